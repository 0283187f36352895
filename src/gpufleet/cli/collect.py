"""``gpufleet enroll`` and ``gpufleet collect``."""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path

import typer
from rich.markup import escape

from gpufleet.cli.common import (
    boundary,
    console,
    host_progress,
    lit,
    open_fleet,
    print_json,
    printable,
)
from gpufleet.cli.tables import WIDE_HELP, Col, show
from gpufleet.collect.transport import Outcome
from gpufleet.i18n import _, joined, reason_text
from gpufleet.inventory import load_inventory
from gpufleet.service.core.pipeline import MAX_FORKS, MAX_TIMEOUT_S
from gpufleet.service.hosts.collect import RunReport, collect
from gpufleet.service.hosts.enroll import enroll, ensure_local_host

OUTCOME_STYLE = {
    Outcome.OK: "green",
    Outcome.UNREACHABLE: "red",
    Outcome.AUTH_FAILED: "red",
    Outcome.HOST_KEY_CHANGED: "bold red",
    Outcome.TIMEOUT: "yellow",
    Outcome.BAD_OUTPUT: "magenta",
    Outcome.ERROR: "red",
}


def register(app: typer.Typer) -> None:
    """Attach the top-level commands of this module."""
    app.command("enroll")(enroll_cmd)
    app.command("collect")(collect_cmd)


@boundary
def enroll_cmd(
    inventory: Path = typer.Option(
        ...,
        "--inventory",
        "-i",
        exists=True,
        dir_okay=False,
        help="Ansible INI or YAML inventory, or a CSV (name,address,...).",
    ),
    strict: bool = typer.Option(
        False, "--strict", help="Enroll nothing and exit 1 when the inventory has warnings."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Enroll (or update) hosts from an inventory; re-running is idempotent.

    The whole inventory is checked first and nothing is enrolled when it has an error (exit 2,
    naming file:line): an unknown gpufleet_* variable or CSV column, an out-of-range expected
    value, one machine under two names, gpufleet_transport=local for another machine, a secret
    variable (password, token, key) without $GPUFLEET_SECRET_KEY or $GPUFLEET_SECRET_KEY_FILE
    to encrypt it with. Warnings (a duplicate YAML key) are printed on stderr; with --strict
    they stop the enroll with exit 1. A gpufleet_baseline naming no baseline is a warning
    (with "did you mean"); with --strict it stops the enroll with exit 2.
    """
    inv = load_inventory(inventory)
    for warning in inv.warnings:
        typer.echo(printable(f"[WARNING]: {warning}"), err=True)
    if strict and inv.warnings:
        typer.echo(
            f"enroll --strict: {len(inv.warnings)} warning(s) in {inventory}; nothing enrolled",
            err=True,
        )
        raise typer.Exit(1)
    fleet = open_fleet()
    rep = enroll(fleet, inv, strict=strict)
    for warning in rep.warnings[len(inv.warnings) :]:  # the fleet's: an unknown baseline
        typer.echo(printable(f"[WARNING]: {warning}"), err=True)
    if as_json:
        print_json(asdict(rep))
        return
    console.print(
        f"enrolled from [bold]{escape(str(inventory))}[/]: {len(rep.added)} added, "
        f"{len(rep.updated)} updated, {len(rep.unchanged)} unchanged"
    )


#: Exit code of a collect that got nothing because every selected host is held by another
#: worker (the same as :class:`~gpufleet.errors.Conflict`: retry later).
EXIT_ALL_HELD = 6


def positive_seconds(value: float | None) -> float | None:
    """Typer callback: ``--timeout`` must be a positive, finite number (exit 2 otherwise)."""
    if value is not None and (not math.isfinite(value) or value <= 0):
        raise typer.BadParameter(f"must be a positive number of seconds, not {value}")
    if value is not None and value > MAX_TIMEOUT_S:
        raise typer.BadParameter(f"must be at most {MAX_TIMEOUT_S} seconds (7 days), not {value}")
    return value


def positive_forks(value: int | None) -> int | None:
    """Typer callback: ``--forks`` must be at least 1 (exit 2 otherwise)."""
    if value is not None and value < 1:
        raise typer.BadParameter(f"must be at least 1, not {value}")
    if value is not None and value > MAX_FORKS:
        raise typer.BadParameter(f"must be at most {MAX_FORKS}, not {value}")
    return value


def run_collection(
    selector: str | None,
    transport: str | None,
    forks: int | None,
    timeout: float | None,
    quiet: bool,
) -> RunReport:
    """Run a collection with a progress bar (shared by collect and validate)."""
    with host_progress("collecting", quiet=quiet) as p:
        return collect(
            open_fleet(),
            selector,
            transport=transport,
            forks=forks,
            timeout_s=timeout,
            on_start=p.on_start,
            on_result=p.on_result,
        )


def print_outcomes(rep: RunReport, *, only_problems: bool = False) -> None:
    """The run's table, one row per host: outcome and reason."""
    cols = [Col("host", ident=True), Col("outcome", words=True),
            Col("GPUs", 1, ident=True, justify="right"), Col("reason / notes", floor=16)]
    cells = []
    for r in rep.results:
        if (
            only_problems
            and r.outcome is Outcome.OK
            and not (r.changes or r.problems or r.actions)
        ):
            continue
        notes = reason_text("; ".join(([r.reason] if r.reason else []) + r.actions)) or "; ".join(
            r.changes + r.problems[:2]
        )
        cells.append([
            lit(r.host),
            f"[{OUTCOME_STYLE[r.outcome]}]{_(r.outcome.value)}[/]",
            "" if r.gpus is None else str(r.gpus),
            lit(notes),
        ])
    show(cols, cells, title=_("collection run {id}").format(id=rep.run_id))


@boundary
def collect_cmd(
    selector: str | None = typer.Argument(
        None, help="Hosts: NAME-GLOB, group:G, pool:P, state:S, model:M; comma = union."
    ),
    local: bool = typer.Option(False, "--local", help="Collect this machine (real nvidia-smi)."),
    transport: str | None = typer.Option(None, help="Force a transport: ssh, sim or local."),
    forks: int | None = typer.Option(
        None, "--forks", "-f", help="Hosts collected at once (200).", callback=positive_forks
    ),
    timeout: float | None = typer.Option(
        None, help="Seconds per host for the whole script (120).", callback=positive_seconds
    ),
    as_json: bool = typer.Option(False, "--json", help="Print per-host results as JSON."),
    wide: bool = typer.Option(False, "--wide", help=WIDE_HELP),
) -> None:
    """Collect facts from hosts over SSH (or the lab / this machine) and store them.

    Exit code 0 when every host was collected, 1 when any was not (failed, or skipped
    because another worker holds it), 6 when nothing was collected because every selected
    host is being collected by another worker.
    """
    if local:
        selector = ensure_local_host(open_fleet())
        transport = "local"
    rep = run_collection(selector, transport, forks, timeout, quiet=as_json)
    if as_json:
        print_json(
            {
                "run_id": rep.run_id,
                "counts": rep.counts,
                "skipped_locked": rep.skipped_locked,
                "hosts": [asdict(r) | {"outcome": r.outcome.value} for r in rep.results],
            }
        )
    else:
        print_outcomes(rep, only_problems=len(rep.results) > 40)
        summary = joined(f"{n} {_(o)}" for o, n in sorted(rep.counts.items()))
        hosts = _("{n} hosts").format(n=len(rep.results))
        console.print(f"[bold]{hosts}[/]" + _(": ") + summary)
        if rep.skipped_locked:
            skipped = _("{n} hosts skipped: being collected by another worker: {hosts}").format(
                n=len(rep.skipped_locked), hosts=lit(joined(rep.skipped_locked))
            )
            console.print(f"[yellow]{skipped}[/]")
    if rep.all_held_elsewhere:
        typer.echo(
            _("error: nothing collected: all {n} hosts selected are being collected by another "
              "worker; retry when it is done").format(n=len(rep.skipped_locked)),
            err=True,
        )
        raise typer.Exit(EXIT_ALL_HELD)
    if not rep.ok:
        raise typer.Exit(1)
