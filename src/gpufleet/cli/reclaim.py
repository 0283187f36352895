"""``gpufleet reclaim``: check released hosts and send them back to the pool (or quarantine)."""

from __future__ import annotations

from dataclasses import asdict

import typer

from gpufleet.cli.common import boundary, console, lit, open_fleet, print_json
from gpufleet.cli.tables import WIDE_HELP, Col, show
from gpufleet.errors import UsageError
from gpufleet.i18n import _
from gpufleet.service.allocation import reclaim_policy as rp
from gpufleet.service.allocation.reclaim import reclaim_selected


@boundary
def reclaim_cmd(
    selector: str = typer.Argument(
        ...,
        help="Hosts to reclaim (selector): those in reclaiming, and those that owe a passing "
        "reclaim (quarantined or validating after a failed one). 'policy POOL': the pool's "
        "cleanup.",
    ),
    pool: str | None = typer.Argument(None, help="With 'policy': the pool."),
    clean: str | None = typer.Option(
        None,
        "--clean",
        help="With 'policy POOL': what reclaim cleans before its checks, comma-separated: "
        "processes, mounts, crontabs, scratch; none: nothing.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print results as JSON."),
    wide: bool = typer.Option(False, "--wide", help=WIDE_HELP),
) -> None:
    """Run the reclaim checks (GPU processes and memory, pending row remaps, data mounts, the
    lessee's processes and crontabs, scratch) and validation on hosts in reclaiming (or owing
    a passing reclaim): clean -> available, else quarantined with the findings as evidence.
    Exit 1 unless all came back. 'gpufleet reclaim policy POOL [--clean ...]' shows or sets
    the pool's cleanup (each action recorded; what it cannot remove still fails reclaim)."""
    if selector == "policy" and pool is not None:
        fleet = open_fleet()
        if clean is None:
            actions = rp.get_pool_clean(fleet, pool)
        else:
            actions = rp.set_pool_clean(fleet, pool, rp.check_clean(clean))
        if as_json:
            print_json({"pool": pool, "clean": list(actions)})
        else:
            console.print(
                f"pool {lit(pool)}: reclaim cleans " + (", ".join(actions) or "nothing")
            )
        return
    if pool is not None or clean is not None:
        raise UsageError(
            command="gpufleet reclaim",
            cause="POOL and --clean go with 'gpufleet reclaim policy POOL'",
        )
    rep = reclaim_selected(open_fleet(), selector)
    if as_json:
        print_json([asdict(h) for h in rep.hosts])
    else:
        show([Col("host", ident=True), Col("state", ident=True), Col("result", floor=16)], [
            [lit(h.host), lit(h.state), f"[{'green' if h.ok else 'red'}]{lit(h.summary)}[/]"]
            for h in rep.hosts
        ], title=_("reclaim"))
    if not rep.ok:
        raise typer.Exit(1)
