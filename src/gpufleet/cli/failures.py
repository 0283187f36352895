"""``gpufleet failures``: record job failures, import them, report where they concentrate."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import typer

from gpufleet.cli.common import (
    boundary,
    console,
    err_console,
    lit,
    open_fleet,
    print_json,
    when,
)
from gpufleet.domain.leases import parse_duration
from gpufleet.errors import ConfigError
from gpufleet.i18n import _
from gpufleet.service.exports.slurm import import_slurm_failures
from gpufleet.service.health.failures import (
    ImportReport,
    Recorded,
    failure_report,
    import_failures,
    record_failure,
)

app = typer.Typer(no_args_is_help=True)


@app.command("record")
@boundary
def record_cmd(
    job: str = typer.Option(..., "--job", help="Job id."),
    host: str = typer.Option(..., "--host", help="Host the job failed on."),
    gpu: str | None = typer.Option(None, "--gpu", help="GPU index or UUID."),
    time: str = typer.Option(..., "--time", help="When (ISO 8601; local unless zoned)."),
    message: str = typer.Option(..., "--message", help="The error message."),
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
) -> None:
    """Record one job failure; its message is classified by the rule table."""
    show_recorded(
        record_failure(
            open_fleet(), job=job, host=host, gpu=gpu, time=when_(time), message=message
        ),
        as_json,
    )


def when_(time: str) -> str:
    """``--time`` as the operator means it (local unless zoned), zoned for the service."""
    at = when(time, "--time")
    assert at is not None
    return at.isoformat()


def show_recorded(r: Recorded, as_json: bool) -> None:
    """Print a recorded failure (``failures record``)."""
    if as_json:
        print_json(asdict(r))
    else:
        console.print(
            f"recorded: {lit(r.host)} job {lit(r.job)}: {r.category}"
            + (f" ({lit(r.rule)})" if r.rule else "")
        )


@app.command("import")
@boundary
def import_cmd(
    file: Path | None = typer.Argument(
        None, help="JSON lines or CSV (job,host,gpu,time,message)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
    slurm: bool = typer.Option(
        False, "--slurm", help="Import failed jobs from Slurm (sacct --json) instead of a file."
    ),
    since: str = typer.Option("1d", "--since", help="With --slurm: jobs of this window."),
) -> None:
    """Import failures; a bad line is reported (FILE:LINE) and the others are stored.
    Exit 1 when a line was refused."""
    if slurm == (file is not None):
        raise ConfigError("failures import: give a FILE or --slurm (one of them)")
    if file is None:
        rep = import_slurm_failures(open_fleet(), parse_duration(since, "--since"))
    else:
        rep = import_failures(open_fleet(), file)
    show_import(rep, as_json)


def show_import(rep: ImportReport, as_json: bool) -> None:
    """Print what an import stored and refused; exit 1 when a line was refused."""
    if as_json:
        print_json(asdict(rep))
    else:
        console.print(_("{n} failures recorded").format(n=rep.recorded))
        for e in rep.errors:
            err_console.print(_("refused: ") + lit(e))
    if rep.errors:
        raise typer.Exit(1)


@app.command("report")
@boundary
def report_cmd(
    since: str = typer.Option("7d", "--since", help="Window, e.g. 24h, 7d."),
    quarantine: bool = typer.Option(
        False, "--quarantine", help="Quarantine the flagged hosts (reason names the report)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
) -> None:
    """Failures grouped by host and GPU, next to the host's alarms, Xid lines, changes and
    baseline drift in the window; flags hosts where failures of several jobs concentrate."""
    rep = failure_report(
        open_fleet(),
        parse_duration(since, "--since"),
        quarantine=quarantine,
        label=f"failures report --since {since}",
    )
    show_report(rep.as_json(), as_json)


def show_report(rep: dict[str, Any], as_json: bool) -> None:
    """``failures report``'s output from its JSON, local or remote (one presenter)."""
    if as_json:
        print_json(rep)
        return
    for g in rep["hosts"]:
        mark = "[bold red]FLAGGED[/] " if g["flagged"] else ""
        console.print(f"{mark}{lit(g['summary'])}")
    if not rep["hosts"]:
        console.print(_("no failures in the window"))
    for name in rep["quarantined"]:
        console.print(_("quarantined: ") + lit(name))
    for why in rep["not_quarantined"]:
        console.print(_("not quarantined: ") + lit(why))
