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

if TYPE_CHECKING:
    from gpufleet.service.baselines import DriftReport
    from gpufleet.service.fleet import Fleet


def print_drift(rep: DriftReport, *, as_json: bool) -> int:
    """Print a drift report; its exit code: 1 when any host drifts, else 0."""
    if as_json:
        print_json(
            {
                "summary": [asdict(s) for s in rep.summary],
                "hosts": {h: [asdict(i) for i in items] for h, items in rep.by_host.items()},
                "baselines": rep.baselines,
                "no_baseline": rep.no_baseline,
                "no_facts": rep.no_facts,
            }
        )
    else:
        from rich.table import Table

        from gpufleet.cli.common import console

        if rep.summary:
            t = Table(title="drift, fleet-wide")
            for col in ("field", "found", "on hosts", "baseline"):
                t.add_column(col, overflow="fold")
            for s in rep.summary:
                t.add_row(s.field, lit(cell(s.actual)), str(len(s.hosts)), lit(cell(s.expected)))
            console.print(t)
            console.print(
                ", ".join(
                    f"{s.field} {lit(s.actual)} on {len(s.hosts)} host"
                    f"{'s' if len(s.hosts) != 1 else ''}, baseline {lit(s.expected)}"
                    for s in rep.summary
                )
            )
            h = Table(title="hosts off baseline")
            for col in ("host", "baseline", "field", "expected", "actual"):
                h.add_column(col, overflow="fold")
            for host, items in sorted(rep.by_host.items()):
                for i in items:
                    h.add_row(
                        lit(host),
                        lit(cell(rep.baselines.get(host))),
                        i.field,
                        lit(cell(i.expected)),
                        lit(cell(i.actual)),
                    )
            console.print(h)
        else:
            console.print(f"no drift on {len(rep.baselines)} hosts with a baseline")
        if rep.no_baseline:
            console.print(f"[dim]{len(rep.no_baseline)} hosts have no baseline (pool unmapped)[/]")
    return 1 if rep.by_host else 0


def lean_drift(selector: str | None, *, as_json: bool) -> int | None:
    """Print ``gpufleet drift [SELECTOR] [--json]`` and return its exit code (1 when any host
    drifts), or None when the command must run instead
    (:func:`~gpufleet.cli.common.lean_read`)."""
    from gpufleet.service.baselines import drift

    def read(fleet: Fleet) -> Callable[[], int]:
        rep = drift(fleet, selector)
        return lambda: print_drift(rep, as_json=as_json)

    return lean_read(read)
