"""``gpufleet alarms list|show|ack|resolve``: what an operator must look at, and the record of
handling it."""

from __future__ import annotations

from dataclasses import asdict

import typer

from gpufleet.cli.common import boundary, console, lit, local_time, open_fleet, print_json
from gpufleet.cli.tables import WIDE_HELP, Col, show
from gpufleet.i18n import _, reason_text
from gpufleet.service.core import webhooks
from gpufleet.service.core.alarms import (
    AlarmRecord,
    ack_alarm,
    list_alarms,
    resolve_alarm,
    show_alarm,
)

app = typer.Typer(no_args_is_help=True)


def _print(rec: AlarmRecord) -> None:
    for key, value in asdict(rec).items():
        shown = local_time(value) if key.endswith("_at") else value
        console.print(f"{key:16} {lit(shown if shown is not None else '-')}")


@app.command("list")
@boundary
def list_cmd(
    selector: str | None = typer.Argument(None, help="Hosts (selector); default every host."),
    include_closed: bool = typer.Option(False, "--all", help="Closed alarms too."),
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
    wide: bool = typer.Option(False, "--wide", help=WIDE_HELP),
) -> None:
    """Open alarms (with --all, closed ones too), oldest first; a line names the webhook
    notifications dead-lettered (`gpufleet alarms dead-letters`)."""
    fleet = open_fleet()
    show_alarms(list_alarms(fleet, selector, include_closed=include_closed), as_json)
    dead = webhooks.dead_letter_count(fleet)
    if dead and not as_json:
        console.print(
            f"[red]{dead} webhook notification(s) dead-lettered[/] (never delivered, no longer "
            "retried): gpufleet alarms dead-letters",
            soft_wrap=True,
        )


@app.command("dead-letters")
@boundary
def dead_letters_cmd(
    limit: int = typer.Option(100, "--limit", min=1, max=1000, help="At most this many."),
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
    wide: bool = typer.Option(False, "--wide", help=WIDE_HELP),
) -> None:
    """Webhook notifications given up after GPUFLEET_WEBHOOK_MAX_AGE_H of failed attempts,
    newest first: what, which host, when, attempts and the last error."""
    show_dead_letters(webhooks.dead_letters(open_fleet(), limit), as_json)


def show_dead_letters(rows: list[webhooks.DeadLetter], as_json: bool) -> None:
    """Print webhook dead letters (``alarms dead-letters``; local and remote mode)."""
    if as_json:
        print_json([asdict(r) for r in rows])
        return
    cols = [Col("id", ident=True), Col("kind", ident=True), Col("host", ident=True),
            Col("queued", 2, words=True), Col("attempts", 3, justify="right"),
            Col("last error", 1)]
    cells = [
        [
            str(r.id),
            lit(r.kind),
            lit(r.host or "-"),
            local_time(r.at),
            str(r.attempts),
            lit(r.error or "-"),
        ]
        for r in rows
    ]
    show(cols, cells, title=_("webhook dead letters"))


def show_alarms(rows: list[AlarmRecord], as_json: bool) -> None:
    """Print alarms (``alarms list``)."""
    if as_json:
        print_json([asdict(r) for r in rows])
        return
    cols = [Col("id", ident=True), Col("host", ident=True), Col("kind", ident=True),
            Col("severity", 2, ident=True), Col("opened", 3, words=True),
            Col("acked by", 4, ident=True), Col("closed", 5, words=True), Col("message", 1)]
    cells = [
        [
            str(r.id),
            lit(r.host),
            lit(r.kind),
            lit(_(r.severity)),
            local_time(r.opened_at),
            lit(r.acknowledged_by or "-"),
            local_time(r.closed_at),
            lit(reason_text(r.message)),
        ]
        for r in rows
    ]
    show(cols, cells, title=_("alarms"))


@app.command("show")
@boundary
def show_cmd(
    alarm_id: int = typer.Argument(..., help="Alarm id (alarms list)."),
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
) -> None:
    """One alarm, with its data."""
    show_one(show_alarm(open_fleet(), alarm_id), as_json)


def show_one(rec: AlarmRecord, as_json: bool) -> None:
    """Print one alarm (``alarms show``)."""
    if as_json:
        print_json(asdict(rec))
    else:
        _print(rec)


@app.command("ack")
@boundary
def ack_cmd(
    alarm_id: int = typer.Argument(..., help="Alarm id (alarms list)."),
    reason: str | None = typer.Option(None, "--reason", help="A note for the audit log."),
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
) -> None:
    """Acknowledge an open alarm (seen, being handled); it stays open."""
    show_acked(ack_alarm(open_fleet(), alarm_id, reason), as_json)


def show_acked(rec: AlarmRecord, as_json: bool) -> None:
    """Print an acknowledged alarm (``alarms ack``)."""
    if as_json:
        print_json(asdict(rec))
    else:
        console.print(_("alarm {id} acknowledged by {who}").format(
            id=rec.id, who=lit(rec.acknowledged_by)))


@app.command("resolve")
@boundary
def resolve_cmd(
    alarm_id: int = typer.Argument(..., help="Alarm id (alarms list)."),
    reason: str = typer.Option(..., "--reason", help="Why it is closed by hand (audited)."),
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
) -> None:
    """Close an alarm by hand: an audited admin act with a reason. The host's state is not
    changed (a quarantined host still needs unquarantine and validation)."""
    show_resolved(resolve_alarm(open_fleet(), alarm_id, reason), as_json)


def show_resolved(rec: AlarmRecord, as_json: bool) -> None:
    """Print a resolved alarm (``alarms resolve``, local and remote mode)."""
    if as_json:
        print_json(asdict(rec))
    else:
        console.print(_("alarm {id} resolved: {reason}").format(id=rec.id, reason=lit(rec.reason)))
