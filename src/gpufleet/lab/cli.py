"""``gpufleet lab``: a simulated fleet whose hosts answer with real captured output.

A CLI plugin: the product CLI never imports it; it is found through the ``gpufleet.cli``
entry point group (``lab = "gpufleet.lab.cli:app"`` in pyproject.toml) and loaded only when
a ``gpufleet lab ...`` command (or the command list of ``gpufleet --help``) needs it.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from gpufleet.cli.common import (
    OPTIONS,
    boundary,
    console,
    current_settings,
    lit,
    open_fleet,
    print_json,
)
from gpufleet.cli.tables import WIDE_HELP, Col, show
from gpufleet.errors import ConfigError
from gpufleet.i18n import _, joined, reason_text
from gpufleet.lab.catalogue import all_models
from gpufleet.lab.demo import reference_hosts as reference_hosts
from gpufleet.lab.faults import fault_kinds
from gpufleet.lab.fleet import LabFleet, apply_change, create_fleet, update_lab, write_inventory
from gpufleet.lab.racks import RACK_MODELS, create_racks

if TYPE_CHECKING:
    from gpufleet.lab.demo import DemoRack

app = typer.Typer(
    name="lab",
    help="A simulated fleet answering with real captures.",
    no_args_is_help=True,
)


def lab_dir(explicit: Path | None) -> Path:
    """``--dir`` or ``<home>/lab``."""
    if explicit:
        return explicit.resolve()
    return (open_fleet().home / "lab").resolve()


def parse_faults(specs: list[str]) -> dict[str, list[str]]:
    """``HOST=FAULT[,FAULT]`` pairs -> {host: [faults]}."""
    out: dict[str, list[str]] = {}
    for spec in specs:
        host, sep, faults = spec.partition("=")
        if not sep or not host or not faults:
            raise ConfigError(f"--fault {spec!r}: expected HOST=FAULT[,FAULT...]")
        out.setdefault(host, []).extend(f for f in faults.split(",") if f)
    return out


def create_lab(
    n: int,
    faults: list[str],
    no_default_faults: bool,
    seed: int,
    directory: Path | None,
    models: list[str] | None = None,
    rack: str | None = None,
    racks: int = 1,
    bmc: bool = False,
) -> tuple[Path, LabFleet]:
    """Build, save and write the inventory of a lab fleet (``rack``: ``racks`` whole racks of
    that rack model instead of ``n`` hosts; ``bmc``: start the lab BMC, lab/bmc.py)."""
    from gpufleet.lab.bmc import host_vars, start_bmc, stop_bmc

    d = lab_dir(directory)
    d.mkdir(parents=True, exist_ok=True)
    wanted = parse_faults(faults) if faults else ({} if no_default_faults else None)
    if rack is not None:
        if models:
            raise ConfigError("--rack builds racks of its own tray model: leave out --model")
        fl = create_racks(rack, racks, faults=wanted or {}, seed=seed)
    else:
        fl = create_fleet(
            n, models=models or None, faults=wanted, seed=seed, now=datetime.now(UTC)
        )
    stop_bmc(d)  # a lab made again: its old BMC goes
    fl.save(d)
    extra = host_vars(fl, start_bmc(d, fl)) if bmc else None
    write_inventory(fl, d / "inventory.ini", transport="sim", lab_dir=d, host_vars=extra)
    return d, fl


@app.command("create")
@boundary
def create_cmd(
    hosts: int = typer.Option(32, "--hosts", "-n", min=1, help="Number of hosts."),
    fault: list[str] = typer.Option(
        [],
        "--fault",
        metavar="HOST=FAULT,...",
        help="Faults of one host; repeatable (`gpufleet lab faults` lists them).",
    ),
    model: list[str] = typer.Option(
        [],
        "--model",
        help="Only these models (" + ", ".join(all_models()) + "); repeatable.",
    ),
    no_default_faults: bool = typer.Option(
        False, "--no-default-faults", help="Do not inject the demo faults."
    ),
    seed: int = typer.Option(0, help="Seed for the model mix and serials."),
    directory: Path | None = typer.Option(None, "--dir", help="Lab directory (<home>/lab)."),
    as_json: bool = typer.Option(False, "--json", help="Print the lab hosts as JSON."),
    rack: str | None = typer.Option(
        None, "--rack", help="Build whole racks of this model (" + ", ".join(RACK_MODELS)
        + "; --hosts is then ignored)."
    ),
    racks: int = typer.Option(1, "--racks", min=1, max=1000, help="How many racks (--rack)."),
    bmc: bool = typer.Option(
        False, "--bmc", help="Also start a Redfish BMC emulator (sushy-tools) for every host, "
        "wired into the inventory (`gpufleet lab destroy` stops it)."
    ),
    wide: bool = typer.Option(False, "--wide", help=WIDE_HELP),
) -> None:
    """Create a simulated fleet and its Ansible inventory (enroll it with `gpufleet enroll`)."""
    d, fl = create_lab(hosts, fault, no_default_faults, seed, directory, model, rack, racks, bmc)
    if as_json:
        print_json(
            {
                "dir": str(d),
                "inventory": str(d / "inventory.ini"),
                "hosts": [h.model_dump(mode="json") for h in fl.hosts],
            }
        )
        return
    show([Col("host", ident=True), Col("model", ident=True), Col("faults", words=True)], [
        [lit(h.name), lit(h.model), lit(", ".join(h.faults))]
        for h in fl.hosts
        if h.faults or len(fl.hosts) <= 40
    ], title=f"lab fleet in {lit(str(d))}")
    if bmc:
        console.print(_("BMC: a Redfish emulator for every host, password in {file}").format(
            file=d / "bmc" / "password"), highlight=False)
    console.print(f"inventory: {d / 'inventory.ini'}  (gpufleet enroll -i {d / 'inventory.ini'})")


@app.command("destroy")
@boundary
def destroy_cmd(
    directory: Path | None = typer.Option(None, "--dir", help="Lab directory (<home>/lab)."),
) -> None:
    """Stop the lab's BMC emulator and remove the lab directory (enrolled hosts stay)."""
    import shutil

    from gpufleet.lab.bmc import stop_bmc
    from gpufleet.lab.fleet import LAB_FILE

    d = lab_dir(directory)
    if not (d / LAB_FILE).is_file():
        raise ConfigError(f"no lab in {d} ({LAB_FILE} missing)")
    stopped = stop_bmc(d)
    shutil.rmtree(d)
    console.print(_("lab in {dir} removed").format(dir=d)
                  + (_("; its BMC emulator stopped") if stopped else ""), highlight=False)


@app.command("change")
@boundary
def change_cmd(
    host: str = typer.Argument(..., help="Lab host to change."),
    driver: str | None = typer.Option(None, help="Install this driver version (lab change)."),
    repair: bool = typer.Option(False, help="Clear every fault of the host."),
    add_fault: list[str] = typer.Option([], "--add-fault", help="Inject a fault; repeatable."),
    gpu_swap: bool = typer.Option(False, help="Swap a GPU (new serial/UUID)."),
    directory: Path | None = typer.Option(None, "--dir", help="Lab directory (<home>/lab)."),
) -> None:
    """Change a lab host as a technician would: driver, repair, fault, GPU swap."""
    d = lab_dir(directory)

    def change(fl: LabFleet) -> LabFleet:
        current = next((h for h in fl.hosts if h.name == host), None)
        if current is None:
            raise ConfigError(f"no lab host '{host}' in {d}")
        return apply_change(
            fl,
            host,
            driver=driver,
            clear_faults=list(current.faults) if repair else None,
            add_faults=add_fault or None,
            gpu_swap=gpu_swap,
            now=datetime.now(UTC),  # an injected Xid happens now, as with ``lab create``
        )

    update_lab(d, change)
    console.print(f"{host}: changed")


@app.command("faults")
@boundary
def faults_cmd(as_json: bool = typer.Option(False, "--json", help="Print as JSON.")) -> None:
    """List the faults `lab create --fault` and `lab change` can put on a host."""
    kinds = ["xid:CODE" if k == "xid" else k for k in fault_kinds()]
    if as_json:
        print_json(kinds)
        return
    for k in kinds:
        console.print(k, highlight=False)


@app.command("demo")
@boundary
def demo_cmd(
    hosts: int = typer.Option(32, "--hosts", "-n", min=1, help="Number of hosts."),
    seed: int = typer.Option(0, help="Seed."),
    wide: bool = typer.Option(False, "--wide", help=WIDE_HELP),
) -> None:
    """The whole onboarding on a fresh lab: create, enroll, collect, validate, summarise."""
    from gpufleet.cli.collect import print_outcomes
    from gpufleet.cli.common import host_progress
    from gpufleet.cli.lifecycle import print_verdicts
    from gpufleet.cli.summary import render_summary
    from gpufleet.lab.demo import DemoReport, run_demo

    home = OPTIONS.home

    def print_step(step: str, rep: DemoReport) -> None:
        if step == "lab":
            console.rule(
                _("1. lab fleet: {n} hosts in {dir}").format(n=len(rep.lab.hosts), dir=rep.lab_dir)
            )
        elif step == "enroll" and rep.enrolled is not None:
            e = rep.enrolled
            console.rule(_("2. enroll"))
            console.print(
                _("{added} added, {updated} updated, {unchanged} unchanged (home {home})").format(
                    added=len(e.added), updated=len(e.updated), unchanged=len(e.unchanged),
                    home=home or _("default"),
                )
            )
            console.rule(_("3. collect"))
        elif step == "collect" and rep.collection is not None:
            run = rep.collection
            print_outcomes(run, only_problems=True)
            console.print(
                _("{n} hosts: ").format(n=len(run.results))
                + joined(f"{n} {_(o)}" for o, n in sorted(run.counts.items()))
            )
        elif step == "baselines":
            console.rule(_("baselines: one reference build per pool"))
            for db in rep.baselines:
                console.print(
                    _("pool {pool} -> baseline {name} (driver {driver}, from {host})").format(
                        pool=db.pool, name=db.baseline.name, driver=db.baseline.driver or "-",
                        host=db.reference,
                    )
                )
        elif step == "evidence":
            console.rule(_("active tests: DCGM diag (level 2), NCCL all-reduce"))
            ok = sum(1 for r in rep.evidence if r.ok)
            console.print(_("{ok} of {n} results passed").format(ok=ok, n=len(rep.evidence)))
            for r in rep.evidence:
                if not r.ok:
                    console.print(f"  {lit(r.host)}: {lit(reason_text(r.summary))}")
        elif step == "validate" and rep.validation is not None:
            console.rule(_("4. validate"))
            print_verdicts(rep.validation, only_problems=True)
        elif step == "summary" and rep.summary is not None:
            render_summary(rep.summary)
        elif step == "rack" and rep.rack is not None:
            print_rack(rep.rack)

    rep = run_demo(
        open_fleet(),
        lab_dir(None),
        hosts,
        seed=seed,
        on_step=print_step,
        progress=lambda label: host_progress(label, quiet=False),
    )
    settings = current_settings()
    look_at = [q["host"] for q in rep.summary.quarantined] if rep.summary else []
    steps = next_steps(
        settings.home if OPTIONS.home is not None else None,
        db_url=OPTIONS.db_url,
        host=next(iter(look_at), None) or rep.lab.hosts[0].name,
        cwd=Path.cwd(),
        venv=None if sys.prefix == sys.base_prefix else Path(sys.prefix),
        rack=rep.rack.anchor if rep.rack else None,
    )
    console.rule(_("next steps: paste these into your shell"))
    for line in steps:
        console.print(line, markup=False, highlight=False, soft_wrap=True)

def print_rack(rack: DemoRack) -> None:
    """The demo's rack step (issue 27 item 8): the rack validated, the switch fault two trays
    see, the one rack incident it makes."""
    from collections import Counter

    from gpufleet.i18n import state_name
    from gpufleet.lab.demo import DEMO_RACK

    console.rule(_("5. a rack: {model}, {n} trays in one NVLink domain").format(
        model=DEMO_RACK, n=len(rack.lab.hosts)))
    states = Counter(v.state for v in rack.validation.verdicts)
    console.print(joined(
        _("{n} {state}").format(n=n, state=state_name(st)) for st, n in sorted(states.items())
    ))
    console.print(_("a switch tray fault, seen by {trays}: inspect").format(
        trays=joined(rack.faulty)))
    for inc in rack.sweep.incidents:
        console.print(_(
            "one rack incident (alarm {alarm}): fabric findings on {k} of {n} trays; the "
            "rack's hosts are restricted (out of NVLink-domain placement), none quarantined"
        ).format(alarm=inc["alarm_id"], k=len(inc["hosts"]), n=inc["trays"]))


def next_steps(
    home: Path | None, *, db_url: str | None, host: str, cwd: Path, venv: Path | None,
    rack: str | None = None,
) -> list[str]:
    """What goes on from the demo, as lines that work when pasted into a shell in ``cwd``:
    gpufleet on PATH (the activate script of ``venv``, the virtual environment gpufleet runs
    from, if any), the demo's fleet (``home`` or ``db_url``, when given on the command
    line), then a short tour that starts at ``host`` (and the demo's ``rack``, one of its
    hosts, when it has one)."""
    import shlex

    def shown(path: Path) -> str:
        if path.is_absolute() and path.is_relative_to(cwd):
            path = path.relative_to(cwd)
        return shlex.quote(str(path))

    lines = []
    if venv is not None:
        lines.append(f". {shown(venv / 'bin' / 'activate')}")
    if home is not None:
        lines.append(f"export GPUFLEET_HOME={shown(home)}")
    if db_url is not None:
        lines.append(f"export GPUFLEET_DATABASE_URL={shlex.quote(db_url)}")
    name = shlex.quote(host)
    lines += [
        "gpufleet hosts list",
        f"gpufleet hosts show {name}",
        "gpufleet drift",
        "gpufleet capacity",
        "gpufleet events --limit 10",
    ]
    if rack is not None:
        lines += [f"gpufleet racks show {shlex.quote(rack)}", "gpufleet racks incidents"]
    if venv is not None and (cwd / "gpufleet").is_file():  # the checkout's wrapper
        lines.append(_("# or, without activating: ./gpufleet hosts list"))
    return lines
