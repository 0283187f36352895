"""``gpufleet hosts show``'s output, and its lean start (issue 8, start-up).

Importing this module imports no Typer: :func:`lean_hosts_show` prints one host's page from
the entry point (:mod:`gpufleet.cli.entry`) before Typer is imported; the command itself
(:func:`gpufleet.cli.hosts.show_cmd`) and the remote mode print through :func:`print_host` /
:func:`render_host` too, so the output is one code path. The page is read by the service
(:func:`gpufleet.service.views.hosts.show_host`), as the command reads it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich import box
from rich.markup import escape

from gpufleet.cli.common import (
    cell,
    console,
    lean_read,
    lean_shown,
    lit,
    local_time,
    print_json,
)
from gpufleet.cli.tables import Col, num, show
from gpufleet.i18n import _, reason_text, state_name

if TYPE_CHECKING:
    from gpufleet.domain.facts import HostFacts
    from gpufleet.service.core.fastread import HostDetail
    from gpufleet.service.core.fleet import Fleet
    from gpufleet.store.readmodel import Read


def print_host(d: HostDetail, *, as_json: bool) -> None:
    """One host's page: JSON (:func:`host_detail_json`), else :func:`render_host`."""
    if as_json:
        print_json(host_detail_json(d))
        return
    render_host(d)


def host_detail_json(d: HostDetail) -> dict[str, Any]:
    """The page as plain data: the API's ``HostDetailOut``."""
    from gpufleet.api.schemas import HostDetailOut

    return HostDetailOut.of(d).json_dict()


def render_host(d: HostDetail) -> None:
    """The ``hosts show`` page (from the service, or rebuilt from the API in remote mode)."""
    v, f = d.view, d.facts
    console.print(
        f"[bold]{lit(v.name)}[/] ({lit(v.address)})  " + _("state")
        + f" [bold]{state_name(v.state)}[/]  " + _("health") + f" {v.health}"
        + ("  " + _("fault") + f" [red]{lit(v.fault)}[/]" if v.fault else "")
    )
    if v.status_reason:
        console.print("  " + _("why: ") + lit(reason_text(v.status_reason)))
    if v.eta is not None:
        console.print("  " + _("back by: ") + local_time(v.eta))
    if d.reclaim_due:
        console.print(
            "  [red]" + _("owes a passing reclaim:") + f"[/] {lit(d.reclaim_due)} "
            + _("('gpufleet reclaim {name}', or 'unquarantine --force --reason ...')").format(
                name=lit(v.name))
        )
    if d.usable_gpus is not None:  # a partial host (issue 10)
        bad = "; ".join(
            f"GPU {u['index'] if u['index'] is not None else u['pci_bus_id']}: "
            + reason_text(u["reason"])
            for u in d.unusable_gpus
        )
        console.print("  " + _("usable GPUs: {n} (unusable: {bad})").format(
            n=d.usable_gpus, bad=lit(bad)))
    console.print(
        "  " + _("groups: ") + lit(", ".join(v.groups)) + "   " + _("pool: ")
        + lit(v.pool or "-") + "   " + _("profiles: ") + (", ".join(v.profiles) or "-")
    )
    if f is None:
        console.print("  " + _("no facts collected yet"))
    else:
        render_accelerators(f)
        if f.ib_ports:
            nic = [Col("CA", ident=True), Col("port", ident=True), Col("state", ident=True),
                   Col("physical", 2, ident=True), Col("rate", 1, ident=True, justify="right"),
                   Col("link layer", 3, ident=True)]
            show(nic, [
                [
                    lit(p.ca),
                    str(p.port),
                    lit(p.state or ""),
                    lit(p.physical_state or ""),
                    "" if p.rate_gbps is None else f"{p.rate_gbps:g}",
                    lit(p.link_layer or ""),
                ]
                for p in f.ib_ports
            ], title=_("high-speed NIC ports"))
        for prob in f.problems:
            console.print("  [yellow]" + _("note:") + f"[/] {lit(prob)}")
    if d.collections:
        last = d.collections[0]
        console.print("  " + _("last collection: run {run} {outcome} {reason}").format(
            run=last["run_id"], outcome=_(str(last["outcome"])),
            reason=lit(last["reason"] or "")))
    for a in d.alarms:
        console.print(
            "  [red]" + _("alarm") + "[/] "
            + _("{kind} ({severity}) since {at}: {message}").format(
                kind=a.kind, severity=_(str(a.severity)), at=local_time(a.opened_at),
                message=lit(reason_text(a.message)))
        )
    for r in d.remediations:  # the ladder climbed (issue 10)
        extra = " " + _("ticket {ticket}").format(ticket=r["ticket"]) if r["ticket"] else ""
        console.print("  " + _("remediation {action} {outcome} {at}{extra}: {detail}").format(
            action=lit(r["action"]), outcome=lit(r["outcome"]), at=local_time(r["at"]),
            extra=lit(extra), detail=lit(r["detail"])))
    for ev in d.evidence:
        verdict = {True: _("passed"), False: _("FAILED"), None: _("recorded")}[ev["passed"]]
        console.print("  " + _("evidence {kind} {verdict} {at}: {summary}").format(
            kind=ev["kind"], verdict=verdict, at=local_time(ev["at"]),
            summary=lit(ev["summary"])))
    if d.events:
        events = [Col("at", 2, words=True), Col("actor", 3, ident=True),
                  Col("kind", 1, ident=True), Col("message", floor=30)]
        show(events, [
            [local_time(ev["at"]), lit(ev["actor"]), cell(ev["kind"]), lit(ev["message"])]
            for ev in d.events
        ], title=_("recent events"))


def _num(value: float | int | None, unit: str) -> str:
    return "-" if value is None else f"{value:g}{unit}"


def render_accelerators(f: HostFacts) -> None:
    """The host line (OS, kernel), a line per vendor (its software stack and count, or why
    its tool failed), the accelerator table and the identifier table: any vendor, read from
    the vendor-neutral inventory (:func:`gpufleet.service.views.accelerators.
    host_accelerators`); a vendor's own words only on its own hosts."""
    from gpufleet.service.views.accelerators import host_accelerators

    acc = host_accelerators(f)
    os_name = f.os.pretty_name if f.os else None
    console.print(escape("  " + _("OS {os}, kernel {kernel}").format(
        os=cell(os_name), kernel=cell(f.kernel))))
    console.print("  " + _("collected {at}").format(at=local_time(f.collected_at)))
    for v in acc.vendors:
        parts = [_("driver {version}").format(version=cell(v.driver))]
        if v.firmware:
            parts.append(_("firmware {version}").format(version=v.firmware))
        if v.runtime_name:
            parts.append(f"{v.runtime_name} {cell(v.runtime)}")
        if v.tool and v.tool_version:
            parts.append(f"{v.tool} {v.tool_version}")
        count = f"{v.count} {v.noun}" + (f" ({', '.join(v.models)})" if v.models else "")
        if v.on_pci is not None:
            count += _(", {n} on PCI").format(n=v.on_pci)
        console.print(escape(f"  {v.vendor}: {_(', ').join(parts)}{_('; ')}{count}"))
        if v.error:
            console.print(f"  [red]{lit(v.error)}[/]")
    if not acc.accelerators:
        return
    noun = acc.noun
    # Identifiers are never cut (gpufleet.cli.tables): they get their own table, and a
    # narrow terminal hides the lesser columns (--wide shows them).
    fw = [a.main_firmware for a in acc.accelerators]
    fw_keys = {x[0] for x in fw if x is not None}
    fw_col = fw_keys.pop() if len(fw_keys) == 1 else "firmware"
    several = len(acc.vendors) > 1
    g = [Col("#", ident=True, words=several), Col("model", ident=True, words=True),
         Col("memory", 3, words=True), num("temp", 1), num("power", 4),
         Col("health", 2, ident=True), Col("errors", 5, floor=16)]
    ids = [Col("#", ident=True, words=several), Col("serial", 1, ident=True),
           Col("bus", 2, ident=True), Col(fw_col, 3, words=True), Col("UUID", ident=True)]
    g_cells: list[list[str]] = []
    id_cells: list[list[str]] = []
    for a, main_fw in zip(acc.accelerators, fw, strict=True):
        idx = f"{a.vendor} {a.index}" if several else str(a.index)
        g_cells.append([
            idx,
            escape(a.model),
            _num(a.memory_total_mib, " MiB"),
            _num(None if a.temperature_c is None else round(a.temperature_c), "C"),
            _num(a.power_w, "W"),
            "-" if a.health == "unknown" else a.health,
            escape(", ".join(a.errors) or "-"),
        ])
        shown = None
        if main_fw is not None:
            shown = main_fw[1] if main_fw[0] == fw_col else " ".join(main_fw)
        id_cells.append([
            idx, escape(cell(a.serial)), escape(cell(a.bus_id)), escape(cell(shown)),
            escape(cell(a.uuid)),
        ])
    show(g, g_cells, title=noun, box=box.SIMPLE_HEAD)
    show(ids, id_cells, title=_("{noun} identifiers").format(noun=noun.removesuffix("s")),
         box=box.SIMPLE_HEAD)


def lean_hosts_show(name: str, *, as_json: bool) -> int | None:
    """Print ``gpufleet hosts show NAME [--json]`` and return its exit code (0), or return
    None (nothing printed) whenever the command must run instead and report in its one way.
    Read by the fast read layer (:func:`gpufleet.service.core.fastread.host_detail`, the
    read :func:`~gpufleet.service.views.hosts.show_host` makes; no SQLAlchemy), the labels of
    ``--json`` by :func:`gpufleet.service.hosts.labels.lean_host_labels`; else through the
    service (:func:`~gpufleet.cli.common.lean_read`): invalid settings, unknown
    ``GPUFLEET_*`` variables (its warnings), remote mode (``GPUFLEET_URL``), no such host
    (its nearest names), any failure while reading."""
    from gpufleet.cli.entry import fast_read

    done = fast_read(lambda read: _fast_detail(read, name, as_json=as_json),
                     lambda d: print_host(d, as_json=as_json))
    if done is not None:
        return done
    from gpufleet.service.views.hosts import show_host  # what the fast read declined

    def read(fleet: Fleet) -> Callable[[], int]:
        d = show_host(fleet, name)
        if as_json:
            return lean_shown(print_json, host_detail_json(d))
        return lean_shown(render_host, d)

    return lean_read(read)


def _fast_detail(read: Read, name: str, *, as_json: bool) -> HostDetail | None:
    """The page of ``name`` from the fast read layer, with its labels and taints for
    ``--json`` (the table shows neither); None: the service must read it."""
    from gpufleet.service.core.fastread import host_detail, with_facts

    got = host_detail(read, name)
    if got is None:
        return None
    d = with_facts(*got)
    if as_json:
        from gpufleet.cli.common import OPTIONS
        from gpufleet.config_lean import lean_store
        from gpufleet.service.hosts.labels import lean_host_labels

        store = lean_store(OPTIONS.home, OPTIONS.db_url)
        rows = None if store is None else lean_host_labels(store.db_url(), d.view.name)
        if rows is None:
            return None
        for hl in rows:
            if hl.host == d.view.name:
                d.labels, d.taints = hl.labels, [str(t) for t in hl.taints]
    return d
