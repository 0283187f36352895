"""``gpufleet inspect [SELECTOR]``: the periodic health sweep (once, or ``--every`` until
SIGTERM); ``gpufleet inspect report``: what the sweeps saw; ``gpufleet inspect guard``: the
blast-radius guard's fleet alarms."""

from __future__ import annotations

import signal
import threading
from dataclasses import asdict
from datetime import timedelta
from pathlib import Path
from types import FrameType
from typing import Any

import typer
from typer.core import TyperGroup

from gpufleet.cli.common import boundary, console, lit, local_time, open_fleet, print_json
from gpufleet.cli.tables import WIDE_HELP, Col, show
from gpufleet.domain.sync import parse_every
from gpufleet.errors import UsageError
from gpufleet.i18n import N_, _, reason_text
from gpufleet.service.health.inspect import (
    SweepReport,
    close_fleet_alarm,
    fleet_alarms,
    inspect,
    inspect_loop,
)
from gpufleet.service.health.inspect_report import (
    FORMATS,
    InspectReport,
    build_report,
    parse_since,
    render_csv,
    render_html,
)


class _SweepByDefault(TyperGroup):
    """``gpufleet inspect [SELECTOR] [options]`` runs ``inspect run``; named subcommands
    (``report``, ``guard``) run themselves."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if not args or (args[0] not in self.commands and args[0] not in ("--help", "-h")):
            args = ["run", *args]
        return super().parse_args(ctx, args)


app = typer.Typer(cls=_SweepByDefault)

#: A sweep's own outcome and the findings' severities, marked for display.
SWEEP_WORDS = (N_("probe_failed"), N_("info"), N_("warning"), N_("critical"))


def _print_sweep(report: SweepReport) -> None:
    cols = [Col("host", ident=True), Col("outcome", ident=True), Col("findings / actions")]
    cells = []
    for h in report.hosts:
        lines = [_("{severity}: {message} -> {action}").format(
            severity=_(f.severity.value), message=reason_text(f.message), action=f.action.value)
            for f in h.findings]
        lines += [reason_text(x) for x in h.actions + h.problems]
        if h.reason and not any(p in h.reason for p in h.problems):  # probe_failed: said
            lines.append(h.reason)
        cells.append([lit(h.host), lit(_(h.outcome)), lit("\n".join(lines) or "-")])
    show(cols, cells, title=_("inspection {at} (rules {version})").format(
        at=local_time(report.at), version=report.policy_version))
    if report.busy:
        console.print(_("held by another worker: ") + lit(", ".join(report.busy)))
    if report.guard_tripped:
        console.print(f"[red]{lit(report.guard_message)}[/red]")
    for inc in report.incidents:
        line = _("rack incident (alarm {alarm}): NVLink domain {domain}, {n} of {trays} trays")
        drain = _(", drain recommended") if inc["drain"] else ""
        console.print("[red]" + line.format(alarm=inc["alarm_id"], domain=lit(inc["nvl_domain"]),
                      n=len(inc["hosts"]), trays=inc["trays"]) + drain + "[/red]")


def _as_json(report: SweepReport) -> dict[str, Any]:
    return {
        "at": report.at,
        "policy_version": report.policy_version,
        "guard_tripped": report.guard_tripped,
        "guard_message": report.guard_message,
        "busy": report.busy,
        "incidents": report.incidents,
        "hosts": [
            {
                "host": h.host,
                "outcome": h.outcome,
                "reason": h.reason,
                "findings": [
                    {**asdict(f), "severity": f.severity.value, "action": f.action.value}
                    for f in h.findings
                ],
                "actions": h.actions,
                "problems": h.problems,
            }
            for h in report.hosts
        ],
    }


@app.command("run")
@boundary
def run_cmd(
    selector: str | None = typer.Argument(None, help="Hosts (selector); default every host."),
    every: str | None = typer.Option(
        None, "--every", help="Sweep again every 30s, 5m, 1h ... until SIGTERM (SSH kept open)."
    ),
    transport: str | None = typer.Option(None, "--transport", help="Override every host's."),
    forks: int = typer.Option(50, "--forks", help="Hosts probed at once."),
    timeout: float = typer.Option(30.0, "--timeout", help="Seconds per host (a hang costs this)."),
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
    wide: bool = typer.Option(False, "--wide", help=WIDE_HELP),
) -> None:
    """Probe the hosts (one command each: --query-gpu CSV, new Xid lines, IB/RoCE counters,
    disk space), store the samples, apply the health rules: alarms, quarantine of critical
    findings (within the blast-radius guard), re-validation of healed hosts. This is what
    ``gpufleet inspect [SELECTOR]`` runs."""
    fleet = open_fleet()
    if every is None:
        report = inspect(fleet, selector, transport=transport, forks=forks, timeout_s=timeout)
        if as_json:
            print_json(_as_json(report))
        else:
            _print_sweep(report)
        return
    try:
        seconds = parse_every(every)
    except ValueError as exc:
        raise UsageError(command="gpufleet inspect", cause=f"--every {exc}") from None
    stop, sweeping = threading.Event(), threading.Event()

    def _stop(signum: int, frame: FrameType | None) -> None:
        stop.set()
        if signum == signal.SIGTERM and sweeping.is_set():
            raise SystemExit(128 + signum)  # mid-sweep: the run releases its claims, exit 143

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)

    def shown(report: SweepReport | None, error: str | None) -> None:
        if report is None:
            console.print("[red]" + _("sweep failed: ") + f"{lit(error)}[/red]")
        elif as_json:
            print_json(_as_json(report))
        else:
            _print_sweep(report)

    console.print(_("inspect every {seconds}s (SIGTERM stops)").format(seconds=f"{seconds:g}"))
    n = inspect_loop(
        fleet,
        selector,
        timedelta(seconds=seconds),
        stop,
        transport=transport,
        forks=forks,
        timeout_s=timeout,
        on_sweep=shown,
        sweeping=sweeping,
    )
    console.print(_("stopped after {n} sweep(s)").format(n=n))


@app.command("guard")
@boundary
def guard_cmd(
    close: int | None = typer.Option(None, "--close", help="Close this fleet alarm (id)."),
    reason: str | None = typer.Option(None, "--reason", help="Why (required with --close)."),
    include_closed: bool = typer.Option(False, "--all", help="Closed fleet alarms too."),
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
) -> None:
    """The blast-radius guard's fleet alarms (one open while the guard holds quarantines)."""
    fleet = open_fleet()
    if close is not None:
        if not reason or not reason.strip():
            raise UsageError(command="gpufleet inspect guard", cause="--close needs --reason")
        close_fleet_alarm(fleet, close, reason)
    rows = fleet_alarms(fleet, include_closed=include_closed)
    if as_json:
        print_json(rows)
        return
    for r in rows:
        console.print(f"{r['id']} {lit(r['severity'])} {lit(r['opened_at'])} {lit(r['message'])}")
    if not rows:
        console.print(_("no fleet alarms"))


@app.command("report")
@boundary
def report_cmd(
    selector: str | None = typer.Argument(None, help="Hosts (selector); default every host."),
    since: str = typer.Option("24h", "--since", help="How far back: 30m, 24h, 7d ..."),
    fmt: str = typer.Option("table", "--format", help="table, csv or html."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write to this file."),
    wide: bool = typer.Option(False, "--wide", help=WIDE_HELP),
) -> None:
    """Hosts over thresholds, top offenders, per-model temperature / ECC / throttle summary,
    from the stored samples and alarms (html: one self-contained file with small charts)."""
    if fmt not in FORMATS:
        raise UsageError(
            command="gpufleet inspect report", cause=f"--format {fmt!r}: use " + ", ".join(FORMATS)
        )
    show_report(build_report(open_fleet(), selector, parse_since(since)), fmt, output)


def show_report(report: InspectReport, fmt: str, output: Path | None) -> None:
    """``inspect report``'s output in ``fmt``, local or remote (one presenter)."""
    if fmt not in FORMATS:
        raise UsageError(
            command="gpufleet inspect report", cause=f"--format {fmt!r}: use " + ", ".join(FORMATS)
        )
    if fmt == "table":
        _print_report(report)
        return
    text = render_csv(report) if fmt == "csv" else render_html(report)
    if output is not None:
        output.write_text(text, encoding="utf-8")
        console.print(_("wrote ") + lit(str(output)))
    else:
        typer.echo(text, nl=False)


def _print_report(report: InspectReport) -> None:
    cols = [Col("host", ident=True), Col("model", 1, words=True),
            Col("max temp", 3, ident=True, justify="right"),
            Col("max uncorr. ECC", 4, ident=True, justify="right"),
            Col("HW throttled", 5, ident=True, justify="right"),
            Col("worst", ident=True), Col("rules", 2, words=True)]
    cells = []
    for h in report.top_offenders:
        cells.append([
            lit(h.host),
            lit(h.model),
            lit(h.temperature_max if h.temperature_max is not None else "-"),
            lit(h.ecc_uncorrectable_max if h.ecc_uncorrectable_max is not None else "-"),
            str(h.throttled_samples),
            lit(h.worst),
            lit(", ".join(h.rules) or "-"),
        ])
    show(cols, cells, title=_("top offenders since {since}").format(since=local_time(report.since)))
    per_model = [Col("model", words=True), Col("GPUs", 1, ident=True, justify="right"),
                 Col("samples", 5, ident=True, justify="right"),
                 Col("avg temp", 2, ident=True, justify="right"),
                 Col("max temp", 3, ident=True, justify="right"),
                 Col("max uncorr. ECC", 4, ident=True, justify="right"),
                 Col("throttled", 6, ident=True, justify="right")]
    cells = []
    for r in report.models:
        cells.append([
            lit(r.model),
            str(r.gpus),
            str(r.samples),
            f"{r.temperature_avg:.1f}" if r.temperature_avg is not None else "-",
            lit(r.temperature_max if r.temperature_max is not None else "-"),
            lit(r.ecc_uncorrectable_max if r.ecc_uncorrectable_max is not None else "-"),
            f"{r.throttled_share:.1%}",
        ])
    show(per_model, cells, title=_("per model"))
