"""Lifecycle commands: validate, maintenance, retire, unquarantine, change, evidence, sweep."""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime
from pathlib import Path

import typer
from rich.table import Table

from gpufleet.cli.common import boundary, console, host_progress, open_fleet, print_json
from gpufleet.cli.hosts import STATE_STYLE
from gpufleet.domain.changes import DeclaredChangeKind
from gpufleet.service import operations
from gpufleet.service.evidence import ingest_file, run_active
from gpufleet.service.validate import ValidateReport, sweep, validate

maintenance_app = typer.Typer(no_args_is_help=True)
change_app = typer.Typer(no_args_is_help=True)
evidence_app = typer.Typer(no_args_is_help=True)


def run_validation(
    selector: str | None, transport: str | None, *, quiet: bool, collect_first: bool = True
) -> ValidateReport:
    """Validate with a progress bar over the collection."""
    with host_progress("validating", quiet=quiet) as p:
        return validate(
            open_fleet(),
            selector,
            collect_first=collect_first,
            transport=transport,
            on_start=p.on_start,
            on_result=p.on_result,
        )


def verdict_table(rep: ValidateReport, *, only_problems: bool = False) -> Table:
    """One row per host: state change, profiles, reasons."""
    t = Table(title="validation")
    t.add_column("host", no_wrap=True)
    t.add_column("state", no_wrap=True)
    t.add_column("profiles", overflow="fold")
    t.add_column("reasons", overflow="fold")
    for v in rep.verdicts:
        if only_problems and v.state == "available" and not v.reasons and not v.skipped:
            continue
        arrow = v.state if v.state == v.state_before else f"{v.state_before} -> {v.state}"
        t.add_row(
            v.host,
            f"[{STATE_STYLE.get(v.state, 'white')}]{arrow}[/]",
            ",".join(v.profiles),
            v.skipped or "; ".join(v.reasons),
        )
    return t


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
    as_json: bool = typer.Option(False, "--json", help="Print verdicts as JSON."),
) -> None:
    """Collect fresh facts, run the checks and move each host (available / validating /
    quarantined). Exit 0 when every selected host ended available, 1 otherwise."""
    rep = run_validation(selector, transport, quiet=as_json, collect_first=not no_collect)
    if as_json:
        print_json([asdict(v) for v in rep.verdicts])
    else:
        console.print(verdict_table(rep, only_problems=len(rep.verdicts) > 40))
        states: dict[str, int] = {}
        for v in rep.verdicts:
            states[v.state] = states.get(v.state, 0) + 1
        console.print(", ".join(f"{n} {s}" for s, n in sorted(states.items())))
    if not rep.ok:
        raise typer.Exit(1)


@maintenance_app.command("on")
@boundary
def maintenance_on_cmd(
    host: str = typer.Argument(..., help="Host name."),
    reason: str = typer.Option(..., "--reason", help="Why (shown in events and taints)."),
    until: datetime | None = typer.Option(None, "--until", help="Planned end (ISO time)."),
) -> None:
    """Put a host in maintenance (refused while allocated)."""
    from datetime import UTC

    if until is not None and until.tzinfo is None:
        until = until.replace(tzinfo=UTC)
    console.print(f"{host}: {operations.maintenance_on(open_fleet(), host, reason, until)}")


@maintenance_app.command("off")
@boundary
def maintenance_off_cmd(
    host: str = typer.Argument(..., help="Host name."),
    reason: str = typer.Option("maintenance done", "--reason", help="What was done."),
) -> None:
    """End maintenance; the host goes to validating (never straight to available)."""
    console.print(f"{host}: {operations.maintenance_off(open_fleet(), host, reason)}")


@boundary
def retire_cmd(
    host: str = typer.Argument(..., help="Host name."),
    reason: str = typer.Option("retired", "--reason", help="Why."),
) -> None:
    """Retire a host for good."""
    console.print(f"{host}: {operations.retire(open_fleet(), host, reason)}")


@boundary
def unquarantine_cmd(
    host: str = typer.Argument(..., help="Host name."),
    reason: str = typer.Option(..., "--reason", help="What was repaired."),
) -> None:
    """Declare a quarantined host repaired: it goes back to validating."""
    console.print(f"{host}: {operations.unquarantine(open_fleet(), host, reason)}")


@change_app.command("record")
@boundary
def change_record_cmd(
    host: str = typer.Argument(..., help="Host name."),
    kind: DeclaredChangeKind = typer.Option(..., "--kind", help="What changed."),
    ticket: str | None = typer.Option(None, "--ticket", help="Ticket / CI build id."),
    note: str = typer.Option("", "--note", help="Free text."),
) -> None:
    """Record a change made outside gpufleet; the host must be validated again."""
    console.print(f"{host}: {operations.record_change(open_fleet(), host, kind, ticket, note)}")


@evidence_app.command("add")
@boundary
def evidence_add_cmd(
    host: str = typer.Argument(..., help="Host the test ran on."),
    file: Path = typer.Argument(..., exists=True, dir_okay=False, help="Captured output."),
    kind: str = typer.Option(
        ..., "--kind", help="dcgm (dcgmi diag -j), nccl (all_reduce_perf) or gpu-burn."
    ),
) -> None:
    """Parse and store the output of a test your own tooling ran; validation uses it."""
    ingest_file(open_fleet(), host, kind, file)
    console.print(f"{host}: {kind} result stored")


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
    timeout: float = typer.Option(3600, help="Seconds per host."),
    as_json: bool = typer.Option(False, "--json", help="Print results as JSON."),
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
    )
    if as_json:
        print_json([asdict(r) for r in runs])
    else:
        t = Table(title=f"{kind} results")
        t.add_column("host", no_wrap=True)
        t.add_column("result", overflow="fold")
        for r in runs:
            t.add_row(r.host, f"[{'green' if r.ok else 'red'}]{r.summary}[/]")
        console.print(t)
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
            f"{len(touched)} hosts moved" + (f": {', '.join(touched)}" if touched else "")
        )
