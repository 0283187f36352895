"""``gpufleet parts list|show``: every GPU's history by serial, across hosts and slots."""

from __future__ import annotations

from dataclasses import asdict

import typer
from rich.table import Table

from gpufleet.cli.common import boundary, console, lit, local_time, open_fleet, print_json
from gpufleet.service.health.parts import list_parts, show_part

app = typer.Typer(no_args_is_help=True)


@app.command("list")
@boundary
def list_cmd(
    with_history: bool = typer.Option(
        False, "--with-history", help="Only GPUs with recorded events (resets, RMA, unusable)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
) -> None:
    """Every GPU serial seen: where it is now, how many hosts it has been in, its events."""
    rows = list_parts(open_fleet(), with_history=with_history)
    if as_json:
        print_json(rows)
        return
    t = Table(title="parts")
    for col in ("serial", "host", "GPU", "hosts", "events"):
        t.add_column(col, overflow="fold")
    for r in rows:
        t.add_row(
            lit(r["serial"]),
            lit(r["host"] or "-"),
            lit(r["index"] if r["index"] is not None else "-"),
            str(r["hosts"]),
            str(r["events"]),
        )
    console.print(t)


@app.command("show")
@boundary
def show_cmd(
    serial: str = typer.Argument(..., help="GPU serial number."),
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
) -> None:
    """One GPU's history: the hosts and slots it was in, and its alarms, Xids, resets, RMA
    tickets and evidence, wherever they happened."""
    hist = show_part(open_fleet(), serial)
    if as_json:
        print_json({**asdict(hist), "hosts": hist.hosts})
        return
    console.print(f"GPU {lit(hist.serial)} ({lit(hist.model or 'model unknown')})")
    if len(hist.hosts) > 1:
        console.print(f"moved between hosts: {lit(', '.join(hist.hosts))}")
    t = Table(title="where")
    for col in ("host", "GPU", "uuid", "first seen", "last seen"):
        t.add_column(col, overflow="fold")
    for loc in hist.locations:
        t.add_row(
            lit(loc["host"]),
            str(loc["index"]),
            lit(loc["uuid"] or "-"),
            local_time(loc["first_seen"]),
            local_time(loc["last_seen"]),
        )
    console.print(t)
    e = Table(title="history")
    for col in ("at", "host", "GPU", "kind", "what"):
        e.add_column(col, overflow="fold")
    for ev in hist.events:
        e.add_row(
            local_time(ev["at"]),
            lit(ev["host"] or "-"),
            lit(ev["index"] if ev["index"] is not None else "-"),
            lit(ev["kind"]),
            lit(ev["message"]),
        )
    console.print(e)
