"""Lifecycle commands: validate, maintenance, retire, unquarantine, change, evidence, sweep."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import typer
from rich.markup import escape

from gpufleet.cli.collect import positive_forks, positive_seconds
from gpufleet.cli.common import (
    boundary,
    console,
    err_console,
    host_progress,
    lit,
    open_fleet,
    print_json,
)
from gpufleet.cli.hosts import STATE_STYLE
from gpufleet.cli.tables import WIDE_HELP, Col, show
from gpufleet.domain.changes import DeclaredChangeKind
from gpufleet.i18n import _, joined, reason_text, state_name
from gpufleet.service.background.sweeper import sweep
from gpufleet.service.hosts import operations
from gpufleet.service.hosts.evidence import ingest_file, run_active
from gpufleet.service.hosts.validate import ValidateReport, validate

maintenance_app = typer.Typer(no_args_is_help=True)
change_app = typer.Typer(no_args_is_help=True)
evidence_app = typer.Typer(no_args_is_help=True)


def run_validation(
    selector: str | None,
    transport: str | None,
    *,
    quiet: bool,
    collect_first: bool = True,
    forks: int | None = None,
    timeout: float | None = None,
) -> ValidateReport:
    """Validate with a progress bar over the collection."""
    fleet = open_fleet()
    sweep(fleet)  # reservations start and leases expire before hosts are judged
    with host_progress("validating", quiet=quiet) as p:
        return validate(
            fleet,
            selector,
            collect_first=collect_first,
            transport=transport,
            forks=forks,
            timeout_s=timeout,
            on_start=p.on_start,
            on_result=p.on_result,
        )


def print_verdicts(rep: ValidateReport, *, only_problems: bool = False) -> None:
    """The validation table, one row per host: state change, profiles, reasons."""
    cols = [Col("host", ident=True), Col("state", words=True),
            Col("profiles", 1, words=True), Col("reasons", floor=16)]
    cells = []
    for v in rep.verdicts:
        quiet = not v.reasons and not v.skipped and not v.held_out
        if only_problems and v.state == "available" and quiet:
            continue
        arrow = (
            state_name(v.state)
            if v.state == v.state_before
            else f"{state_name(v.state_before)} -> {state_name(v.state)}"
        )
        cells.append([
            lit(v.host),
            f"[{STATE_STYLE.get(v.state, 'white')}]{arrow}[/]",
            ", ".join(v.profiles),
            lit(
                (reason_text(v.skipped) if v.skipped else "")
                or reason_text("; ".join(v.reasons))
                or _("; ").join(
                    _("not {profile}: {why}").format(profile=p, why=reason_text("; ".join(r)))
                    for p, r in v.held_out.items()
                )
            ),
        ])
    show(cols, cells, title=_("validation"))


#: ``--all``: confirm a change that reaches more than GPUFLEET_CONFIRM_SHARE of the fleet.
ALL_OPTION: bool = typer.Option(
    False,
    "--all",
    help="Confirm a change that reaches more than GPUFLEET_CONFIRM_SHARE of the fleet.",
)
#: ``--no-drain`` / ``--drain-timeout`` of the commands that act on hosts (issue 26).
NO_DRAIN_OPTION: bool = typer.Option(
    False, "--no-drain", help="Do not drain first: Slurm jobs, Kubernetes pods (recorded)."
)
DRAIN_TIMEOUT_OPTION: str = typer.Option(
    "30m", "--drain-timeout", help="Slurm: how long to wait for running jobs (30m, 2h)."
)

HOSTS_HELP = "Host name or selector (NAME-GLOB, group:G, pool:P, state:S, model:M, rack:R)."


def report_each(outcomes: list[operations.HostOutcome], note: str | None = None) -> None:
    """One line per host (its new state, or why it was refused); exit with the first
    refusal's code when any host was refused."""
    for o in outcomes:
        if o.error is None:
            console.print(f"{escape(o.host)}: {escape(state_name(o.state) if o.state else '')}")
        else:
            err_console.print("[bold red]" + _("error:") + f"[/] {escape(o.host)}: "
                              f"{escape(str(o.error))}")
    if note and any(o.error is None for o in outcomes):
        console.print("[dim]" + _("note: ") + f"{escape(note)}[/]")
    failed = [o.error for o in outcomes if o.error is not None]
    if failed:
        raise typer.Exit(failed[0].exit_code)


def register(app: typer.Typer) -> None:
    """Attach the lifecycle commands."""
    app.command("validate")(validate_cmd)
    app.command("retire")(retire_cmd)
    app.command("unquarantine")(unquarantine_cmd)
    app.command("sweep")(sweep_cmd)
    app.add_typer(maintenance_app, name="maintenance", help="Take hosts in and out of maintenance.")
    app.add_typer(change_app, name="change", help="Declare changes made outside gpufleet.")
    app.add_typer(
        evidence_app, name="evidence", help="Store active-test results (DCGM, NCCL, gpu-burn)."
    )


@boundary
def validate_cmd(
    selector: str | None = typer.Argument(None, help="Hosts (default all)."),
    transport: str | None = typer.Option(None, help="Force a transport: ssh, sim or local."),
    no_collect: bool = typer.Option(False, "--no-collect", help="Judge the stored facts only."),
    forks: int | None = typer.Option(
        None, "--forks", "-f", help="Hosts collected at once (200).", callback=positive_forks
    ),
    timeout: float | None = typer.Option(
        None, help="Seconds per host for the collection (120).", callback=positive_seconds
    ),
    as_json: bool = typer.Option(False, "--json", help="Print verdicts as JSON."),
    wide: bool = typer.Option(False, "--wide", help=WIDE_HELP),
) -> None:
    """Collect fresh facts, run the checks and move each host (available / validating /
    quarantined). Exit 0 when every selected host that can be validated ended available,
    1 when any ended elsewhere or could not be judged (unreachable, no facts). Hosts held
    out of validation on purpose (maintenance, allocated, retired) are listed but do not
    make the run fail on their own."""
    rep = run_validation(
        selector,
        transport,
        quiet=as_json,
        collect_first=not no_collect,
        forks=forks,
        timeout=timeout,
    )
    if as_json:
        print_json([asdict(v) for v in rep.verdicts])
    else:
        print_verdicts(rep, only_problems=len(rep.verdicts) > 40)
        states: dict[str, int] = {}
        for v in rep.verdicts:
            states[v.state] = states.get(v.state, 0) + 1
        console.print(joined(
            _("{n} {state}").format(n=n, state=state_name(s)) for s, n in sorted(states.items())
        ))
        for alarm in sorted({v.rack_incident for v in rep.verdicts if v.rack_incident}):
            hosts = ", ".join(v.host for v in rep.verdicts if v.rack_incident == alarm)
            console.print(_("rack incident (alarm {alarm}): NVLink fabric failures on {hosts}; "
                            "their rack's hosts are restricted (gpufleet racks incidents)")
                          .format(alarm=alarm, hosts=lit(hosts)))
    if not rep.ok:
        raise typer.Exit(1)


@maintenance_app.command("on")
@boundary
def maintenance_on_cmd(
    hosts: str = typer.Argument(..., help=HOSTS_HELP),
    reason: str = typer.Option(..., "--reason", help="Why (shown in events and taints)."),
    until_: str | None = typer.Option(
        None, "--until", help="Planned end (ISO time; local unless zoned)."
    ),
    eta_: str | None = typer.Option(
        None,
        "--eta",
        help="Expected back (ISO time, local unless zoned; default --until): summary, capacity.",
    ),
    confirm_all: bool = ALL_OPTION,
    no_drain: bool = NO_DRAIN_OPTION,
    drain_timeout: str = DRAIN_TIMEOUT_OPTION,
) -> None:
    """Put hosts in maintenance (refused while allocated). Where work runs in Slurm
    (GPUFLEET_SYNC_TARGETS has slurm) the nodes are drained first and their jobs waited for;
    a host whose jobs outlast --drain-timeout is refused with the jobs that blocked. Where a
    Kubernetes cluster is configured, the hosts' pods are evicted first (budgets respected)."""
    from gpufleet.cli.common import when
    from gpufleet.domain.leases import parse_duration
    from gpufleet.service.exports.slurm_drain import maintenance_drained
    from gpufleet.service.hosts.slurm_drain import work_runs_in_slurm

    until, eta = when(until_, "--until"), when(eta_, "--eta")
    fleet = open_fleet()
    if work_runs_in_slurm(fleet):
        outcomes, drained = maintenance_drained(
            fleet, hosts, reason, until, eta, confirm_all=confirm_all, no_drain=no_drain,
            timeout=parse_duration(drain_timeout, "--drain-timeout"),
        )
        for d in drained.hosts:
            console.print("[dim]" + _("slurm drain: ") + f"{escape(d.describe())}[/]")
        report_each(outcomes)
        return
    report_each(
        operations.each_change(
            fleet,
            hosts,
            lambda n: operations.maintenance_on(fleet, n, reason, until, eta, no_drain=no_drain),
            verb="maintenance on",
            reason=reason,
            confirm_all=confirm_all,
        )
    )


@maintenance_app.command("off")
@boundary
def maintenance_off_cmd(
    hosts: str = typer.Argument(..., help=HOSTS_HELP),
    reason: str = typer.Option("maintenance done", "--reason", help="What was done."),
    confirm_all: bool = ALL_OPTION,
) -> None:
    """End maintenance; hosts go to validating (never straight to available)."""
    fleet = open_fleet()
    report_each(
        operations.each_change(
            fleet,
            hosts,
            lambda n: operations.maintenance_off(fleet, n, reason),
            verb="maintenance off",
            reason=reason,
            confirm_all=confirm_all,
        )
    )


@boundary
def retire_cmd(
    hosts: str = typer.Argument(..., help=HOSTS_HELP),
    reason: str = typer.Option("retired", "--reason", help="Why."),
    confirm_all: bool = ALL_OPTION,
    no_drain: bool = NO_DRAIN_OPTION,
    drain_timeout: str = DRAIN_TIMEOUT_OPTION,
) -> None:
    """Retire hosts for good (refused while allocated). Each host is drained first where
    work runs: its Slurm jobs waited for (GPUFLEET_SYNC_TARGETS has slurm), its Kubernetes
    pods evicted; a host that cannot be drained is refused (exit 6) with what blocked."""
    from gpufleet.domain.leases import parse_duration

    timeout = parse_duration(drain_timeout, "--drain-timeout")
    fleet = open_fleet()
    report_each(
        operations.each_change(
            fleet,
            hosts,
            lambda n: operations.retire(fleet, n, reason, no_drain=no_drain,
                                        drain_timeout=timeout),
            verb="retire",
            reason=reason,
            confirm_all=confirm_all,
        )
    )


@boundary
def unquarantine_cmd(
    hosts: str = typer.Argument(..., help=HOSTS_HELP),
    reason: str = typer.Option(..., "--reason", help="What was repaired."),
    force: bool = typer.Option(
        False,
        "--force",
        help="Let out a host that owes a passing reclaim without one (recorded as a "
        "reclaim-waived event with the reason).",
    ),
    confirm_all: bool = ALL_OPTION,
) -> None:
    """Declare quarantined hosts repaired: they go back to validating. A host that failed
    reclaim (or owes one) is refused (exit 5): 'gpufleet reclaim HOST' re-runs the checks;
    --force waives them, recorded."""
    fleet = open_fleet()
    report_each(
        operations.each_change(
            fleet,
            hosts,
            lambda n: operations.unquarantine(fleet, n, reason, force=force),
            verb="unquarantine",
            reason=reason,
            confirm_all=confirm_all,
        )
    )


@change_app.command("record")
@boundary
def change_record_cmd(
    hosts: str = typer.Argument(..., help=HOSTS_HELP),
    kind: DeclaredChangeKind = typer.Option(..., "--kind", help="What changed."),
    ticket: str | None = typer.Option(None, "--ticket", help="Ticket / CI build id."),
    note: str = typer.Option("", "--note", help="Free text."),
    confirm_all: bool = ALL_OPTION,
) -> None:
    """Record a change made outside gpufleet; the hosts must be validated again. After a
    reimage the host has a new SSH host key: accept it with 'gpufleet hosts rekey HOST'."""
    fleet = open_fleet()
    report_each(
        operations.each_change(
            fleet,
            hosts,
            lambda n: operations.record_change(fleet, n, kind, ticket, note),
            verb="change record",
            confirm_all=confirm_all,
        ),
        note=operations.REIMAGE_HINT if kind is DeclaredChangeKind.REIMAGE else None,
    )


@evidence_app.command("add")
@boundary
def evidence_add_cmd(
    hosts: str = typer.Argument(
        ...,
        help="Host the test ran on, or a selector (every host "
        "it matches gets the result, e.g. a multi-node NCCL run).",
    ),
    file: Path = typer.Argument(..., exists=True, dir_okay=False, help="Captured output."),
    kind: str = typer.Option(
        ..., "--kind", help="dcgm (dcgmi diag -j), nccl (all_reduce_perf) or gpu-burn."
    ),
    level: int | None = typer.Option(
        None, "--level", "-r", min=1, max=4,
        help="dcgm: the diag level the run used (dcgmi diag -r N; its JSON does not say).",
    ),
) -> None:
    """Parse and store the output of a test your own tooling ran; validation uses it."""
    fleet = open_fleet()

    def store(name: str) -> str:
        ingest_file(fleet, name, kind, file, level=level)
        return _("{kind} result stored").format(kind=kind)

    report_each(operations.each(fleet, hosts, store))


@evidence_app.command("run")
@boundary
def evidence_run_cmd(
    selector: str = typer.Argument(..., help="Hosts to test (selector)."),
    kind: str = typer.Option(..., "--kind", help="dcgm, nccl or gpu-burn."),
    level: int = typer.Option(1, "--level", "-r", min=1, max=4, help="DCGM diag level."),
    seconds: int = typer.Option(60, "--seconds", help="gpu-burn duration."),
    command: str | None = typer.Option(
        None, "--command", help="Command line to run instead of the default."
    ),
    timeout: float | None = typer.Option(
        None, help="Seconds per host (GPUFLEET_EVIDENCE_TIMEOUT, 3600).", callback=positive_seconds
    ),
    forks: int | None = typer.Option(
        None,
        "--forks",
        "-f",
        help="Hosts tested at once (GPUFLEET_EVIDENCE_FORKS, 50).",
        callback=positive_forks,
    ),
    as_json: bool = typer.Option(False, "--json", help="Print results as JSON."),
    wide: bool = typer.Option(False, "--wide", help=WIDE_HELP),
) -> None:
    """Run an active test over SSH on each host, parse and store the result.
    Exit 1 when any host failed or could not run it."""
    runs = run_active(
        open_fleet(),
        selector,
        kind,
        level=level,
        seconds=seconds,
        command=command,
        timeout_s=timeout,
        forks=forks,
    )
    if as_json:
        print_json([asdict(r) for r in runs])
    else:
        show([Col("host", ident=True), Col("result")], [
            [lit(r.host), f"[{'green' if r.ok else 'red'}]{lit(r.summary)}[/]"] for r in runs
        ], title=_("{kind} results").format(kind=kind))
    if not all(r.ok for r in runs):
        raise typer.Exit(1)


@boundary
def sweep_cmd(as_json: bool = typer.Option(False, "--json", help="Print as JSON.")) -> None:
    """Fire deadlines (stuck validating/reclaiming -> quarantined) and validation expiry."""
    touched = sweep(open_fleet())
    if as_json:
        print_json(touched)
    else:
        console.print(
            _("{n} hosts moved").format(n=len(touched))
            + (_(": {hosts}").format(hosts=lit(joined(touched))) if touched else "")
        )
