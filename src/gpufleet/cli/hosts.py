"""``gpufleet hosts list|show|rekey|remove``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from gpufleet.cli.common import (
    boundary,
    cell,
    console,
    err_console,
    lit,
    local_time,
    open_fleet,
    print_json,
)
from gpufleet.service.hosts import HostDetail, HostView, list_events, list_hosts, show_host

# Imported where used (issue 8, start-up): ``hosts show`` without --json needs neither the
# API's models nor the operations.
if TYPE_CHECKING:
    from gpufleet.api.schemas import HostOut

app = typer.Typer(no_args_is_help=True)

#: Profile names shortened for narrow tables (``--json`` keeps the full names).
PROFILE_SHORT = {"training-multinode": "M", "training-single": "S", "inference": "I", "test": "T"}


def _profile_order(name: str) -> tuple[int, str]:
    order = list(PROFILE_SHORT)
    return (order.index(name) if name in order else len(order), name)


STATE_STYLE = {
    "available": "green",
    "allocated": "cyan",
    "validating": "yellow",
    "enrolled": "white",
    "quarantined": "bold red",
    "maintenance": "magenta",
    "reclaiming": "yellow",
    "retired": "dim",
}


@app.command("list")
@boundary
def list_cmd(
    selector: str | None = typer.Argument(
        None, help="NAME-GLOB, group:G, pool:P, state:S, model:M"
    ),
    group: str | None = typer.Option(None, "--group", "-g", help="Only hosts in this group."),
    model: str | None = typer.Option(None, "--model", "-m", help="GPU model substring, e.g. H100."),
    state: str | None = typer.Option(None, "--state", "-s", help="Lifecycle state."),
    pool: str | None = typer.Option(None, "--pool", "-p", help="Pool name."),
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
) -> None:
    """List hosts with state, GPUs, driver and last collection."""
    rows = list_hosts(open_fleet(), selector, group=group, model=model, state=state, pool=pool)
    if as_json:
        from gpufleet.api.schemas import HostOut

        print_json([HostOut.of(r).json_dict() for r in rows])
        return
    render_host_list(rows)


def render_host_list(rows: Sequence[HostView | HostOut]) -> None:
    """The ``hosts list`` table (rows from the service, or from the API in remote mode)."""
    t = Table(
        title=f"{len(rows)} hosts",
        box=box.SIMPLE_HEAD,
        caption="profiles: " + ", ".join(f"{v}={k}" for k, v in PROFILE_SHORT.items()),
    )
    for col in ("host", "state", "pool", "GPUs", "driver", "prof.", "collect"):
        t.add_column(col, no_wrap=col in ("host", "state", "driver", "prof."), overflow="fold")
    for r in rows:
        gpus = (
            f"{r.gpu_count}x {lit((r.gpu_model or '?').removeprefix('NVIDIA '))}"
            if r.gpu_count
            else ("-" if r.gpu_model is None else "0")
        )
        st = f"[{STATE_STYLE.get(r.state, 'white')}]{r.state}[/]"
        if r.fault:
            st += f"\n[dim]{lit(r.fault)}[/]"
        t.add_row(
            lit(r.name),
            st,
            lit(r.pool or ""),
            gpus,
            lit(r.driver or ""),
            ",".join(PROFILE_SHORT.get(p, p) for p in sorted(r.profiles, key=_profile_order)),
            r.last_outcome or "never",
        )
    console.print(t)


@app.command("show")
@boundary
def show_cmd(
    name: str = typer.Argument(..., help="Host name."),
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
) -> None:
    """Facts, GPU table, NICs, last collections and recent events of one host."""
    d = show_host(open_fleet(), name)
    if as_json:
        from gpufleet.api.schemas import HostDetailOut

        print_json(HostDetailOut.of(d).json_dict())
        return
    render_host(d)


def render_host(d: HostDetail) -> None:
    """The ``hosts show`` page (from the service, or rebuilt from the API in remote mode)."""
    v, f = d.view, d.facts
    console.print(
        f"[bold]{lit(v.name)}[/] ({lit(v.address)})  state [bold]{v.state}[/]  health {v.health}"
        + (f"  fault [red]{lit(v.fault)}[/]" if v.fault else "")
    )
    if v.status_reason:
        console.print(f"  why: {lit(v.status_reason)}")
    if v.eta is not None:
        console.print(f"  back by: {local_time(v.eta)}")
    if d.usable_gpus is not None:  # a partial host (issue 10)
        bad = "; ".join(
            f"GPU {u['index'] if u['index'] is not None else u['pci_bus_id']}: {u['reason']}"
            for u in d.unusable_gpus
        )
        console.print(f"  usable GPUs: {d.usable_gpus} (unusable: {lit(bad)})")
    console.print(
        f"  groups: {lit(', '.join(v.groups))}   pool: {lit(v.pool or '-')}   "
        f"profiles: {', '.join(v.profiles) or '-'}"
    )
    if f is None:
        console.print("  no facts collected yet")
    else:
        os_name = f.os.pretty_name if f.os else None
        console.print(
            escape(
                f"  OS {cell(os_name)}, kernel {cell(f.kernel)}, "
                f"driver {cell(f.driver_version)}, CUDA {cell(f.cuda_version)}, "
                f"{len(f.pci_gpus)} NVIDIA GPUs on PCI, collected {local_time(f.collected_at)}"
            )
        )
        if f.nvidia_smi_error:
            console.print(f"  [red]{lit(f.nvidia_smi_error)}[/]")
        # Identifiers are never cut: every column folds (wraps mid-word) instead of
        # cropping, and the identifiers get their own table so they fit 80 columns.
        g = Table(title="GPUs", box=box.SIMPLE_HEAD)
        for col in ("#", "model", "memory", "temp", "ECC unc.", "remap"):
            g.add_column(col, overflow="fold")
        ids = Table(title="GPU identifiers", box=box.SIMPLE_HEAD)
        for col in ("#", "serial", "bus", "VBIOS", "UUID"):
            ids.add_column(col, overflow="fold")
        for gpu in f.gpus:
            unc = gpu.ecc_volatile.uncorrectable if gpu.ecc_volatile else None
            rr = gpu.remapped_rows
            remap = (
                "-" if rr is None else ("FAIL" if rr.failure else "pending" if rr.pending else "ok")
            )
            g.add_row(
                str(gpu.index),
                escape(cell(gpu.product_name)),
                "-" if gpu.memory_total_mib is None else f"{gpu.memory_total_mib} MiB",
                "-" if gpu.temperature_c is None else f"{gpu.temperature_c:.0f}C",
                cell(unc),
                remap,
            )
            ids.add_row(
                str(gpu.index),
                escape(cell(gpu.serial)),
                escape(cell(gpu.pci_bus_id)),
                escape(cell(gpu.vbios_version)),
                escape(cell(gpu.uuid)),
            )
        if f.gpus:
            console.print(g)
            console.print(ids)
        if f.ib_ports:
            n = Table(title="high-speed NIC ports")
            for col in ("CA", "port", "state", "physical", "rate", "link layer"):
                n.add_column(col)
            for p in f.ib_ports:
                n.add_row(
                    lit(p.ca),
                    str(p.port),
                    lit(p.state or ""),
                    lit(p.physical_state or ""),
                    "" if p.rate_gbps is None else f"{p.rate_gbps:g}",
                    lit(p.link_layer or ""),
                )
            console.print(n)
        for prob in f.problems:
            console.print(f"  [yellow]note:[/] {lit(prob)}")
    if d.collections:
        last = d.collections[0]
        console.print(
            f"  last collection: run {last['run_id']} {last['outcome']} {lit(last['reason'] or '')}"
        )
    for a in d.alarms:
        console.print(
            f"  [red]alarm[/] {a.kind} ({a.severity}) since {local_time(a.opened_at)}: "
            f"{lit(a.message)}"
        )
    for r in d.remediations:  # the ladder climbed (issue 10)
        extra = f" ticket {r['ticket']}" if r["ticket"] else ""
        console.print(
            f"  remediation {lit(r['action'])} {lit(r['outcome'])} {local_time(r['at'])}"
            f"{lit(extra)}: {lit(r['detail'])}"
        )
    for ev in d.evidence:
        verdict = {True: "passed", False: "FAILED", None: "recorded"}[ev["passed"]]
        console.print(
            f"  evidence {ev['kind']} {verdict} {local_time(ev['at'])}: {lit(ev['summary'])}"
        )
    if d.events:
        e = Table(title="recent events")
        for col in ("at", "actor", "kind", "message"):
            e.add_column(col, overflow="fold")
        for ev in d.events:
            e.add_row(local_time(ev["at"]), lit(ev["actor"]), cell(ev["kind"]), lit(ev["message"]))
        console.print(e)


@boundary
def events_cmd(
    host: str | None = typer.Argument(None, help="Only this host."),
    kind: str | None = typer.Option(
        None, "--kind", "-k", help="transition, alarm, change-detected, evidence ..."
    ),
    limit: int = typer.Option(50, "--limit", "-n", min=1, help="How many, newest first."),
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
) -> None:
    """The audit log: who did what to which host, when and why."""
    rows = list_events(open_fleet(), host, kind=kind, limit=limit)
    if as_json:
        print_json(rows)
        return
    render_events(rows)


def render_events(rows: list[dict[str, Any]]) -> None:
    """The ``events`` table (``at`` a datetime)."""
    t = Table(title=f"{len(rows)} events", expand=True)
    t.add_column("at", overflow="fold", max_width=19)
    t.add_column("actor", overflow="fold", max_width=12)
    t.add_column("host", overflow="fold", max_width=12)
    t.add_column("kind", overflow="fold", max_width=11)
    t.add_column("message", overflow="fold", ratio=1, min_width=24)
    for e in rows:
        t.add_row(
            local_time(e["at"]),
            lit(e["actor"]),
            lit(e["host"]),
            cell(e["kind"]),
            lit(e["message"]),
        )
    console.print(t)


SELECTOR_HELP = "Host name or selector (NAME-GLOB, group:G, pool:P, state:S, model:M, rack:R)."


@app.command("rekey")
@boundary
def rekey_cmd(
    hosts: str = typer.Argument(..., help=SELECTOR_HELP),
    fingerprint: str | None = typer.Option(
        None,
        "--fingerprint",
        help="Accept only the key with this SHA256 fingerprint (one host; read it on the "
        "host's console: ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub).",
    ),
    reason: str = typer.Option("host reimaged", "--reason", help="Why (kept in the event)."),
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
) -> None:
    """Accept a new SSH host key (after a reimage). Without --fingerprint the pinned key is
    cleared and the next collection pins the key it is offered (trust on first use); with
    it, the next collection accepts only that key (any other: host key changed, alarm).
    The host's state is unchanged. Exit 4: no such host; 2: bad fingerprint."""
    from gpufleet.service import operations

    rows = operations.rekey_hosts(open_fleet(), hosts, reason, fingerprint)
    if as_json:
        print_json(
            [
                {
                    "host": r.host,
                    "old": r.old,
                    "expected": r.expected,
                    "state": r.state,
                    "error": r.error.as_json()["error"] if r.error else None,
                }
                for r in rows
            ]
        )
    for r in rows:
        if r.error is not None:
            err_console.print(f"[bold red]error:[/] {lit(r.host)}: {lit(str(r.error))}")
            continue
        if as_json:
            continue
        then = (
            f"next collection accepts only {r.expected}"
            if r.expected
            else "next collection pins the key it is offered"
        )
        console.print(f"{lit(r.host)}: host key {lit(r.old or 'none')} released; {lit(then)}")
        if r.state == "quarantined" and r.fault == "host_key_changed":
            console.print(
                f"[dim]note: {lit(r.host)} stays quarantined (host_key_changed); once the new "
                f"key is pinned: gpufleet unquarantine {lit(r.host)} --reason ...[/]"
            )
    failed = [r.error for r in rows if r.error is not None]
    if failed:
        raise typer.Exit(failed[0].exit_code)


@app.command("remove")
@boundary
def remove_cmd(
    hosts: str = typer.Argument(..., help=SELECTOR_HELP),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
    reason: str = typer.Option("removed by operator", "--reason", help="Why (kept in the event)."),
) -> None:
    """Remove hosts and everything stored about them (facts, GPU/NIC rows, collection
    results, validations). The audit log keeps their events and a host-removed event with
    the last state. Refused for an allocated host (exit 5) or one a running collection
    holds (exit 6); exit 4 when nothing matches."""
    from gpufleet.service import operations

    fleet = open_fleet()
    names = operations.named_hosts(fleet, hosts, "remove")
    shown = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
    if not yes and not typer.confirm(f"Remove {len(names)} host(s): {shown}?", default=False):
        err_console.print("nothing removed")
        raise typer.Exit(1)
    outcomes = operations.each_name(names, lambda n: operations.remove_host(fleet, n, reason))
    for o in outcomes:
        if o.error is None:
            console.print(f"{lit(o.host)}: removed (was {lit(o.state)})")
        else:
            err_console.print(f"[bold red]error:[/] {lit(o.host)}: {lit(str(o.error))}")
    failed = [o.error for o in outcomes if o.error is not None]
    if failed:
        raise typer.Exit(failed[0].exit_code)


@app.command("eta")
@boundary
def hosts_eta_cmd(
    host: str = typer.Argument(..., help="Host in maintenance or quarantine (or a selector)."),
    eta: str = typer.Argument(..., help="Expected back (ISO time), or 'none' to clear."),
) -> None:
    """Say when hosts in maintenance or quarantine are expected back (summary, capacity)."""
    from gpufleet.cli.alloc import _time
    from gpufleet.cli.lifecycle import report_each
    from gpufleet.service import operations

    when = None if eta.strip().lower() == "none" else _time(eta, "ETA")
    fleet = open_fleet()
    report_each(operations.each(fleet, host, lambda n: operations.set_eta(fleet, n, when)))
