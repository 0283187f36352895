"""``gpufleet reclaim``: check released hosts and send them back to the pool (or quarantine)."""

from __future__ import annotations

from dataclasses import asdict

import typer
from rich.table import Table

from gpufleet.cli.common import boundary, console, lit, open_fleet, print_json
from gpufleet.service.reclaim import reclaim_selected


@boundary
def reclaim_cmd(
    selector: str = typer.Argument(
        ..., help="Hosts to reclaim (selector); only those in reclaiming are checked."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print results as JSON."),
) -> None:
    """Run the reclaim checks (GPU processes and memory, pending row remaps, data mounts, the
    lessee's processes and crontabs, scratch) and validation on hosts in reclaiming: clean ->
    available, else quarantined with the findings as evidence. Exit 1 unless all came back."""
    rep = reclaim_selected(open_fleet(), selector)
    if as_json:
        print_json([asdict(h) for h in rep.hosts])
    else:
        t = Table(title="reclaim")
        t.add_column("host", no_wrap=True)
        t.add_column("state", no_wrap=True)
        t.add_column("result", overflow="fold")
        for h in rep.hosts:
            colour = "green" if h.ok else "red"
            t.add_row(lit(h.host), lit(h.state), f"[{colour}]{lit(h.summary)}[/]")
        console.print(t)
    if not rep.ok:
        raise typer.Exit(1)
