"""``gpufleet drift``'s output, and its lean start (issue 8, start-up).

Importing this module imports no Typer: :func:`lean_drift` prints the drift report straight
from the entry point (:mod:`gpufleet.cli.entry`) before Typer is imported; the command itself
(:func:`gpufleet.cli.baseline.drift_cmd`) and the remote mode print through
:func:`print_drift` too, so the output is one code path.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import TYPE_CHECKING

from gpufleet.cli.common import cell, lean_read, lit, print_json
from gpufleet.i18n import _, ngettext

if TYPE_CHECKING:
    from gpufleet.domain.drift import PoolField
    from gpufleet.service.core.fleet import Fleet
    from gpufleet.service.hosts.baselines import DriftReport


def pool_json(rep: DriftReport) -> list[dict[str, object]]:
    """Issue 26: the pools of a drift report as ``drift --json`` and the API give them."""
    return [asdict(p) | {"drifts": p.drifts} for p in rep.pools]


def print_drift(rep: DriftReport, *, as_json: bool) -> int:
    """Print a drift report; its exit code: 1 when any host drifts from its baseline or a
    pool from its own (issue 26), else 0."""
    if as_json:
        print_json(
            {
                "summary": [asdict(s) for s in rep.summary],
                "hosts": {h: [asdict(i) for i in items] for h, items in rep.by_host.items()},
                "baselines": rep.baselines,
                "no_baseline": rep.no_baseline,
                "no_facts": rep.no_facts,
                "pools": pool_json(rep),
            }
        )
    else:
        from gpufleet.cli.common import console
        from gpufleet.cli.tables import Col, show

        if rep.summary:
            summary = [Col("field", ident=True), Col("found", words=True),
                       Col("on hosts", 1, justify="right"), Col("baseline", words=True)]
            show(summary, [
                [s.field, lit(cell(s.actual)), str(len(s.hosts)), lit(cell(s.expected))]
                for s in rep.summary
            ], title=_("drift, fleet-wide"))
            console.print(
                _(", ").join(
                    ngettext("{field} {actual} on {n} host, baseline {expected}",
                             "{field} {actual} on {n} hosts, baseline {expected}",
                             len(s.hosts)).format(field=s.field, actual=lit(s.actual),
                                                  n=len(s.hosts), expected=lit(s.expected))
                    for s in rep.summary
                )
            )
            off = [Col("host", ident=True), Col("baseline", 1, ident=True),
                   Col("field", ident=True), Col("expected", words=True),
                   Col("actual", words=True)]
            show(off, [
                [
                    lit(host),
                    lit(cell(rep.baselines.get(host))),
                    i.field,
                    lit(cell(i.expected)),
                    lit(cell(i.actual)),
                ]
                for host, items in sorted(rep.by_host.items())
                for i in items
            ], title=_("hosts off baseline"))
        _print_pools(rep)
        if not rep.drifts:
            console.print(_("no drift on {n} hosts with a baseline").format(n=len(rep.baselines)))
        if rep.no_baseline:
            none = _("{n} hosts have no baseline (pool unmapped)").format(n=len(rep.no_baseline))
            console.print(f"[dim]{none}[/]")
    return 1 if rep.drifts else 0


def _print_pools(rep: DriftReport) -> None:
    """Issue 26: each pool that differs from its baseline, at a glance (a half-migrated
    pool: some hosts on a campaign's target baseline, the pool still on the old one)."""
    from gpufleet.cli.common import console
    from gpufleet.cli.tables import Col, show

    pools = [p for p in rep.pools if p.drifts]
    if not pools:
        return
    cols = [Col("pool", ident=True), Col("baseline", 2, ident=True),
            Col("match", 1, ident=True), Col("on another baseline", 3, words=True),
            Col("field", ident=True), Col("values", 4, words=True)]
    cells = []
    for p in pools:
        other = "; ".join(f"{b}: {len(hs)}" for b, hs in p.on_other.items()) or "-"
        rows: list[PoolField | None] = [*p.fields] or [None]
        for i, f in enumerate(rows):
            first = i == 0
            cells.append([
                lit(p.pool) if first else "",
                lit(p.baseline) if first else "",
                f"{len(p.matching)}/{len(p.hosts)}" if first else "",
                lit(other) if first else "",
                f.field if f else "-",
                lit(f.describe(_).split(" ", 1)[1]) if f else "-",
            ])
    show(cols, cells, title=_("pools off their baseline"))
    for p in pools:
        console.print(lit(p.describe(_)))
        for other in p.on_other:
            console.print("  " + _("to make {baseline} the pool's baseline: ").format(
                baseline=lit(other)) + f"gpufleet pool baseline {lit(p.pool)} {lit(other)}")


def lean_drift(selector: str | None, *, as_json: bool) -> int | None:
    """Print ``gpufleet drift [SELECTOR] [--json]`` and return its exit code (1 when any host
    drifts), or None when the command must run instead
    (:func:`~gpufleet.cli.common.lean_read`)."""
    from gpufleet.service.hosts.baselines import drift

    def read(fleet: Fleet) -> Callable[[], int]:
        rep = drift(fleet, selector)
        return lambda: print_drift(rep, as_json=as_json)

    return lean_read(read)
