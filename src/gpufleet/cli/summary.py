"""``gpufleet summary`` and ``gpufleet labels``."""

from __future__ import annotations

from dataclasses import asdict

import typer
from rich.table import Table

from gpufleet.cli.common import boundary, console, open_fleet, print_json
from gpufleet.service.fleet import Fleet
from gpufleet.service.summary import FleetSummary, fleet_summary, host_labels

STATE_ORDER = [
    "available",
    "allocated",
    "validating",
    "enrolled",
    "reclaiming",
    "maintenance",
    "quarantined",
    "retired",
]


def summary_json(sm: FleetSummary) -> dict[str, object]:
    """The summary as plain data."""
    d = asdict(sm)
    d["drift"] = {
        "summary": [asdict(x) for x in sm.drift.summary],
        "hosts": {h: [asdict(i) for i in items] for h, items in sm.drift.by_host.items()},
        "no_baseline": sm.drift.no_baseline,
    }
    return d


def print_summary(
    fleet: Fleet, *, validate_first: bool = False, selector: str | None = None
) -> None:
    """Validate (optionally) then print the fleet summary."""
    if validate_first:
        from gpufleet.cli.lifecycle import run_validation, verdict_table

        console.rule("4. validate")
        rep = run_validation(selector, None, quiet=False, collect_first=False)
        console.print(verdict_table(rep, only_problems=True))
    render_summary(fleet_summary(fleet, selector))


def render_summary(sm: FleetSummary) -> None:
    """Rich rendering of a fleet summary."""
    console.rule("fleet summary")
    console.print(
        f"[bold]{sm.hosts} hosts, {sm.gpus_total} GPUs, {sm.gpus_available} GPUs available[/]"
    )
    st = Table(title="hosts per state")
    st.add_column("state")
    st.add_column("hosts", justify="right")
    for s in STATE_ORDER:
        if sm.per_state.get(s):
            st.add_row(s, str(sm.per_state[s]))
    console.print(st)
    if sm.gpus_per_profile_model:
        profiles = list(sm.gpus_per_profile_model)
        models = sorted({m for per in sm.gpus_per_profile_model.values() for m in per})
        gp = Table(title="available GPUs per profile and model")
        gp.add_column("GPU model", overflow="fold")
        for p in profiles:
            gp.add_column(p, justify="right")
        for m in models:
            gp.add_row(
                m.removeprefix("NVIDIA "),
                *[str(sm.gpus_per_profile_model[p].get(m, 0)) for p in profiles],
            )
        gp.add_row(
            "[dim]hosts[/]", *[f"[dim]{sm.hosts_per_profile.get(p, 0)}[/]" for p in profiles]
        )
        console.print(gp)
    if sm.quarantined:
        q = Table(title="quarantined")
        q.add_column("host", no_wrap=True)
        q.add_column("fault", no_wrap=True)
        q.add_column("reason", overflow="fold")
        for row in sm.quarantined:
            q.add_row(row["host"] or "", f"[red]{row['fault']}[/]", row["reason"] or "")
        console.print(q)
    if sm.validating:
        v = Table(title="held in validating")
        v.add_column("host", no_wrap=True)
        v.add_column("why", overflow="fold")
        for row in sm.validating:
            v.add_row(row["host"] or "", row["reason"] or "")
        console.print(v)
    if sm.warnings:
        w = Table(title="available, with warnings")
        w.add_column("host", no_wrap=True)
        w.add_column("warning", overflow="fold")
        for row in sm.warnings:
            w.add_row(row["host"] or "", f"[yellow]{row['reason'] or ''}[/]")
        console.print(w)
    if sm.drift.summary:
        d = Table(title="drift from pool baselines")
        for col in ("field", "found", "baseline", "hosts"):
            d.add_column(col, overflow="fold")
        for item in sm.drift.summary:
            names = ", ".join(item.hosts[:6]) + (" ..." if len(item.hosts) > 6 else "")
            d.add_row(item.field, item.actual or "-", item.expected, f"{len(item.hosts)}: {names}")
        console.print(d)
    if sm.unreachable:
        u = Table(title="last collection failed")
        u.add_column("host", no_wrap=True)
        u.add_column("outcome", no_wrap=True)
        u.add_column("reason", overflow="fold")
        for row in sm.unreachable:
            u.add_row(row["host"] or "", row["fault"] or "", row["reason"] or "")
        console.print(u)


def register(app: typer.Typer) -> None:
    """Attach ``summary`` and ``labels``."""
    app.command("summary")(summary_cmd)
    app.command("labels")(labels_cmd)


@boundary
def summary_cmd(
    selector: str | None = typer.Argument(None, help="Hosts (default all)."),
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
) -> None:
    """Hosts per state, available GPUs per profile/model, quarantined hosts, drift."""
    sm = fleet_summary(open_fleet(), selector)
    if as_json:
        print_json(summary_json(sm))
    else:
        render_summary(sm)


@boundary
def labels_cmd(
    selector: str | None = typer.Argument(None, help="HOST or selector (default all)."),
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
) -> None:
    """Kubernetes labels (GPU Feature Discovery compatible + gpufleet.io) and taints."""
    rows = host_labels(open_fleet(), selector)
    if as_json:
        print_json(
            [
                {
                    "host": r.host,
                    "labels": r.labels,
                    "taints": [
                        {"key": t.key, "value": t.value, "effect": t.effect} for t in r.taints
                    ],
                }
                for r in rows
            ]
        )
        return
    for r in rows:
        t = Table(title=r.host, show_header=False)
        t.add_column("key", no_wrap=True)
        t.add_column("value", overflow="fold")
        for k, v in sorted(r.labels.items()):
            t.add_row(k, v)
        for taint in r.taints:
            t.add_row("[red]taint[/]", str(taint))
        console.print(t)
