"""``gpufleet parts list|show``: every GPU's history by serial, across hosts and slots."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import typer

from gpufleet.cli.common import boundary, console, lit, local_time, open_fleet, print_json
from gpufleet.cli.tables import WIDE_HELP, Col, show
from gpufleet.i18n import _
from gpufleet.service.health.parts import PartHistory, list_parts, show_part

app = typer.Typer(no_args_is_help=True)


@app.command("list")
@boundary
def list_cmd(
    with_history: bool = typer.Option(
        False, "--with-history", help="Only GPUs with recorded events (resets, RMA, unusable)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
    wide: bool = typer.Option(False, "--wide", help=WIDE_HELP),
) -> None:
    """Every GPU serial seen: where it is now, how many hosts it has been in, its events."""
    print_parts(list_parts(open_fleet(), with_history=with_history), as_json)


def print_parts(rows: list[dict[str, Any]], as_json: bool) -> None:
    """``parts list``'s output, local or remote (one presenter)."""
    if as_json:
        print_json(rows)
        return
    cols = [Col("serial", ident=True), Col("host", 1, ident=True), Col("GPU", 2, ident=True),
            Col("hosts", 3, justify="right"), Col("events", 4, justify="right")]
    cells = [
        [
            lit(r["serial"]),
            lit(r["host"] or "-"),
            lit(r["index"] if r["index"] is not None else "-"),
            str(r["hosts"]),
            str(r["events"]),
        ]
        for r in rows
    ]
    show(cols, cells, title=_("parts"))


@app.command("show")
@boundary
def show_cmd(
    serial: str = typer.Argument(..., help="GPU serial number."),
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
    wide: bool = typer.Option(False, "--wide", help=WIDE_HELP),
) -> None:
    """One GPU's history: the hosts and slots it was in, and its alarms, Xids, resets, RMA
    tickets and evidence, wherever they happened."""
    print_part(show_part(open_fleet(), serial), as_json)


def print_part(hist: PartHistory, as_json: bool) -> None:
    """``parts show``'s output, local or remote (one presenter)."""
    if as_json:
        print_json({**asdict(hist), "hosts": hist.hosts})
        return
    console.print(f"GPU {lit(hist.serial)} ({lit(hist.model or _('model unknown'))})")
    if len(hist.hosts) > 1:
        console.print(_("moved between hosts: ") + lit(", ".join(hist.hosts)))
    where = [Col("host", ident=True), Col("GPU", ident=True), Col("uuid", 1, ident=True),
             Col("first seen", 3, words=True), Col("last seen", 2, words=True)]
    show(where, [
        [
            lit(loc["host"]),
            str(loc["index"]),
            lit(loc["uuid"] or "-"),
            local_time(loc["first_seen"]),
            local_time(loc["last_seen"]),
        ]
        for loc in hist.locations
    ], title=_("where"))
    history = [Col("at", 1, words=True), Col("host", ident=True), Col("GPU", 2, ident=True),
               Col("kind", ident=True), Col("what")]
    show(history, [
        [
            local_time(ev["at"]),
            lit(ev["host"] or "-"),
            lit(ev["index"] if ev["index"] is not None else "-"),
            lit(ev["kind"]),
            lit(ev["message"]),
        ]
        for ev in hist.events
    ], title=_("history"))
