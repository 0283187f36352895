"""``gpufleet baseline``, ``gpufleet pool`` and ``gpufleet drift``."""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any, cast

import typer
from pydantic import ValidationError
from rich.markup import escape

from gpufleet.cli.common import boundary, cell, console, lit, open_fleet, print_json
from gpufleet.cli.drift import print_drift
from gpufleet.cli.tables import WIDE_HELP, Col, show
from gpufleet.domain.pins import (
    PINS,
    Compare,
    Pin,
    PinChange,
    PinValue,
    overlay_pins,
    pins_given,
)
from gpufleet.domain.spec import Baseline, BaselineStatus
from gpufleet.errors import ConfigError
from gpufleet.i18n import N_, _, joined
from gpufleet.service.hosts import baselines as svc

app = typer.Typer(no_args_is_help=True)
pool_app = typer.Typer(no_args_is_help=True)
#: The baselines' statuses (:class:`BaselineStatus`), marked for display.
STATUSES = (N_("candidate"), N_("validated"), N_("deprecated"))


def _pairs(flag: str, pairs: list[str]) -> dict[str, str]:
    out = {}
    for p in pairs:
        k, sep, v = p.partition("=")
        if not sep or not k.strip():
            raise ConfigError(f"{flag} {p!r}: expected KEY=VALUE")
        out[k.strip()] = v.strip()
    return out


def _pin_value(pin: Pin, given: Any) -> PinValue:
    if pin.compare is Compare.MAP:
        return _pairs(pin.flag, list(given))
    if pin.compare is Compare.ONE_OF:
        return list(given)
    return cast("str | None", given)


def _pin_option(pin: Pin) -> inspect.Parameter:
    """``baseline create``'s flag for one pin: repeatable for lists and KEY=VALUE maps."""
    if pin.compare in (Compare.ONE_OF, Compare.MAP):
        annotation: Any = list[str]
        default = typer.Option([], pin.flag, help=pin.help)
    else:
        annotation = str | None
        default = typer.Option(None, pin.flag, help=pin.help)
    return inspect.Parameter(pin.field, _KW, default=default, annotation=annotation)


_KW = inspect.Parameter.KEYWORD_ONLY


def _baseline(data: dict[str, Any]) -> Baseline:
    """The baseline the flags describe; a value it refuses is a ConfigError naming it."""
    try:
        return Baseline.model_validate(data)
    except ValidationError as exc:
        why = "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in exc.errors())
        raise ConfigError(f"baseline {data.get('name')}: {why}") from None


def create_cmd(**options: Any) -> None:
    """Create a baseline (explicitly, or from a host) and optionally map pools to it."""
    name: str = options["name"]
    pool: list[str] = options["pool"]
    status: BaselineStatus = options["status"]
    fleet = open_fleet()
    svc.check_pools(fleet, pool, create=options["create"])  # a typo creates nothing
    meta = {"status": status, "os_image_url": options["os_image_url"]}
    pinned = {p.field: _pin_value(p, options[p.field]) for p in PINS}
    if options["mig_config"]:  # issue 26 item 7: a mig-parted config, in place of --mig
        if pinned["mig"]:
            raise ConfigError("give --mig or --mig-config, not both")
        pinned["mig"] = svc.mig_config_pin(options["mig_config"])
    changes: list[PinChange] = []
    if options["from_host"]:
        # issue 26: the pins given go on top of the host's values ("copy and bump the driver")
        b = svc.baseline_from_host(fleet, options["from_host"], name, options["purpose"])
        values, changes = overlay_pins(b.model_dump(), pins_given(pinned))
        b = _baseline(values | meta)
    else:
        b = _baseline({"name": name, "purpose": options["purpose"]} | meta | pinned)
    svc.save_baseline(fleet, b, replace=options["replace"])
    for p in pool:
        svc.set_pool_baseline(fleet, p, name, create=options["create"])
    show_created(b, options["as_json"], options["from_host"], pool, changes)


def show_created(b: Baseline, as_json: bool, from_host: str | None, pool: list[str],
                 changes: Sequence[PinChange] = ()) -> None:
    """Print ``baseline create`` (local and remote mode): what was saved and, from a host,
    the pins given that differ from the host's values."""
    if as_json:
        print_json(
            {
                "baseline": b.name,
                "status": str(b.status),
                "from_host": from_host,
                "pools": pool,
                "changed_from_host": [asdict(c) for c in changes],
            }
        )
        return
    console.print(
        _("baseline {name} saved ({status})").format(name=b.name, status=_(b.status.value))
        + (_(", pools: {pools}").format(pools=joined(pool)) if pool else "")
    )
    if from_host:
        host = lit(from_host)
        if not changes:
            console.print(_("as {host} has it (no pin given differs)").format(host=host))
        for c in changes:
            was, now = lit(_shown(c.host)), lit(_shown(c.pinned))
            console.print("  " + _("{field}: {was} on {host} -> {now}").format(
                field=c.field, was=was, host=host, now=now))


def from_host_only(_api: object, options: Mapping[str, Any]) -> dict[str, Any]:
    """``baseline create`` in remote mode: ``POST baselines`` saves a baseline from a host's
    latest facts, with its name, purpose, pools, --create and --replace; anything else is
    refused (exit 2, naming it), never ignored."""
    from gpufleet.cli.remote import command_name, not_available, refuse_options

    if not options["from_host"]:
        raise not_available(f"{command_name()} without --from-host")
    pinned = {p.flag: _pin_value(p, options[p.field]) for p in PINS}
    refuse_options(**{flag: v for flag, v in pinned.items() if v not in ([], {})})
    refuse_options(**{"--mig-config": options["mig_config"],
                      "--os-image-url": options["os_image_url"],
                      "--status": options["status"] is not BaselineStatus.CANDIDATE})
    return {}


def _shown(value: PinValue) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items()) or "unset"
    if isinstance(value, list):
        return ", ".join(value) or "unset"
    return value if value is not None else "unset"


# The pinned fields' flags come from the pin table (gpufleet.domain.pins): Typer reads the
# command's parameters from its signature.
vars(create_cmd)["__signature__"] = inspect.Signature(
    [
        inspect.Parameter(
            "name",
            _KW,
            default=typer.Argument(..., help="Baseline name, e.g. h100-2026q4."),
            annotation=str,
        ),
        inspect.Parameter(
            "purpose",
            _KW,
            default=typer.Option("", help="What it is for (training, inference ...)."),
            annotation=str,
        ),
        inspect.Parameter(
            "status",
            _KW,
            default=typer.Option(BaselineStatus.CANDIDATE, help="Lifecycle of the baseline."),
            annotation=BaselineStatus,
        ),
        inspect.Parameter(
            "from_host",
            _KW,
            default=typer.Option(
                None,
                "--from-host",
                help="Copy from a known-good host's facts; pins given as well go on top (the "
                "differences from the host are printed).",
            ),
            annotation=str | None,
        ),
        *(_pin_option(p) for p in PINS),
        inspect.Parameter(
            "mig_config",
            _KW,
            default=typer.Option(
                None,
                "--mig-config",
                help="FILE:NAME: pin the MIG layout of config NAME of a mig-parted config file.",
            ),
            annotation=str | None,
        ),
        inspect.Parameter(
            "os_image_url",
            _KW,
            default=typer.Option(
                None,
                "--os-image-url",
                help="OS image (http/https URL) gpufleet reimage --baseline inserts; not a pin.",
            ),
            annotation=str | None,
        ),
        inspect.Parameter(
            "pool",
            _KW,
            default=typer.Option(
                [], help="Point these pools at it; repeatable (an unknown pool needs --create)."
            ),
            annotation=list[str],
        ),
        inspect.Parameter(
            "create",
            _KW,
            default=typer.Option(False, "--create", help="Create the --pool pools that are new."),
            annotation=bool,
        ),
        inspect.Parameter(
            "replace",
            _KW,
            default=typer.Option(False, "--replace", help="Overwrite an existing baseline."),
            annotation=bool,
        ),
        inspect.Parameter(
            "as_json",
            _KW,
            default=typer.Option(
                False, "--json", help="Print what was saved and, with --from-host, the pins "
                "that differ from the host's values."
            ),
            annotation=bool,
        ),
    ]
)
app.command("create")(boundary(create_cmd))


@app.command("list")
@boundary
def list_cmd(
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
    wide: bool = typer.Option(False, "--wide", help=WIDE_HELP),
) -> None:
    """Baselines with status and the pools using them."""
    show_baselines(svc.list_baselines(open_fleet()), as_json)


def show_baselines(rows: list[tuple[Baseline, list[str]]], as_json: bool) -> None:
    """Print baselines with the pools using them (``baseline list``)."""
    if as_json:
        print_json([b.model_dump(mode="json") | {"pools": pools} for b, pools in rows])
        return
    cols = [Col("name", ident=True), Col("status", ident=True), Col("driver", 1, ident=True),
            Col("CUDA", 2, ident=True), Col("kernel", 4, ident=True), Col("OS", 5, words=True),
            Col("OS image URL", 6, ident=True), Col("pools", 3, words=True)]
    cells = []
    for b, pools in rows:
        cells.append([
            lit(b.name),
            _(b.status.value),
            lit(cell(b.driver)),
            lit(cell(b.cuda)),
            lit(cell(b.kernel)),
            lit(cell(b.os_image)),
            lit(cell(b.os_image_url)),
            lit(cell(pools)),
        ])
    show(cols, cells, title=_("baselines"))


@app.command("show")
@boundary
def show_cmd(
    name: str, as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
    wide: bool = typer.Option(False, "--wide", help=WIDE_HELP),
) -> None:
    """Every field of one baseline."""
    show_baseline(svc.get_baseline(open_fleet(), name), as_json)


def show_baseline(b: Baseline, as_json: bool) -> None:
    """``baseline show``'s output, local or remote (one presenter)."""
    if as_json:
        print_json(b.model_dump(mode="json"))
        return
    show([Col("field", ident=True), Col("value", words=True)], [
        [k, escape(cell(v))] for k, v in b.model_dump(mode="json").items()
    ], title=_("baseline {name}").format(name=lit(b.name)), show_header=False)


@app.command("diff")
@boundary
def diff_cmd(
    a: str, b: str, as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
    wide: bool = typer.Option(False, "--wide", help=WIDE_HELP),
) -> None:
    """Fields where two baselines differ."""
    fleet = open_fleet()
    rows = svc.diff_baselines(svc.get_baseline(fleet, a), svc.get_baseline(fleet, b))
    if as_json:
        print_json([{"field": f, a: x, b: y} for f, x, y in rows])
        return
    if not rows:
        console.print(_("identical"))
        return
    show([Col("field", ident=True), Col(a, words=True), Col(b, words=True)], [
        [f, escape(cell(x)), escape(cell(y))] for f, x, y in rows
    ], title=_("{a} vs {b}").format(a=lit(a), b=lit(b)))


@pool_app.command("list")
@boundary
def pool_list_cmd(
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
    wide: bool = typer.Option(False, "--wide", help=WIDE_HELP),
) -> None:
    """Pools with their baseline and size."""
    show_pools(svc.list_pools(open_fleet()), as_json)


def show_pools(rows: list[svc.PoolView], as_json: bool) -> None:
    """Print pools (``pool list``)."""
    if as_json:
        print_json([asdict(p) for p in rows])
        return
    show([Col("pool", ident=True), Col("baseline", ident=True),
          Col("hosts", 1, ident=True, justify="right")], [
        [lit(p.name), lit(p.baseline), str(p.hosts)] for p in rows
    ], title=_("pools"))


@pool_app.command("baseline")
@boundary
def pool_baseline_cmd(
    pool: str = typer.Argument(..., help="Pool name (from the inventory's gpufleet_pool)."),
    baseline: str = typer.Argument(..., help="Baseline name."),
    create: bool = typer.Option(False, "--create", help="Create the pool if it is new."),
) -> None:
    """Point a pool at a baseline (an unknown pool is refused unless --create)."""
    svc.set_pool_baseline(open_fleet(), pool, baseline, create=create)
    show_pool_baseline(None, pool, baseline)


def show_pool_baseline(_set: object, pool: str, baseline: str) -> None:
    """``pool baseline``'s line once the pool points at the baseline, local or remote (the
    API's answer, the pool, is not needed)."""
    console.print(_("pool {pool} -> baseline {name}").format(pool=lit(pool), name=lit(baseline)))


@boundary
def drift_cmd(
    selector: str | None = typer.Argument(None, help="Hosts (default all)."),
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
    wide: bool = typer.Option(False, "--wide", help=WIDE_HELP),
) -> None:
    """Every host that differs from its pool's baseline, field by field, with fleet-wide counts.
    Exit 1 when any host drifts."""
    show_drift(svc.drift(open_fleet(), selector), as_json)


def show_drift(rep: svc.DriftReport, as_json: bool) -> None:
    """Print a drift report (:func:`gpufleet.cli.drift.print_drift`); exit 1 when any host
    drifts."""
    if print_drift(rep, as_json=as_json):
        raise typer.Exit(1)
