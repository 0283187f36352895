"""Allocation commands: allocate, leases, capacity (and capacity check)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import typer

from gpufleet.api.schemas import CapacityCheckOut
from gpufleet.cli.common import (
    boundary,
    console,
    err_console,
    lit,
    local_time,
    open_fleet,
    print_json,
    when,
)
from gpufleet.cli.leases_view import lease_table as _lease_table
from gpufleet.cli.leases_view import show_lease as show_lease
from gpufleet.cli.tables import WIDE_HELP, Col, show
from gpufleet.domain.leases import OnExpiry, parse_duration, parse_gpu_memory, parse_percent
from gpufleet.domain.placement import Request
from gpufleet.i18n import N_, _, state_name
from gpufleet.service.allocation import allocation, capacity, leases
from gpufleet.service.allocation.leases import LeaseView
from gpufleet.service.exports.capacity_gate import k8s_check
from gpufleet.service.exports.capacity_k8s import K8sCapacity, k8s_capacity, selector_text
from gpufleet.service.exports.capacity_slurm import (
    SlurmCapacity,
    slurm_capacity,
    slurm_check,
)

leases_app = typer.Typer(no_args_is_help=True)
capacity_app = typer.Typer(invoke_without_command=True)

SELECTOR_HELP = "Only hosts of this selector (NAME-GLOB, group:G, pool:P, rack:R, model:M)."


def _time(value: str | None, flag: str) -> datetime | None:
    """An operator's time (:func:`gpufleet.cli.common.when`: local time unless zoned)."""
    return when(value, flag)


def register(app: typer.Typer) -> None:
    """Attach the allocation commands."""
    app.command("allocate")(allocate_cmd)
    app.add_typer(leases_app, name="leases", help="Leases and reservations: list, renew, release.")
    app.add_typer(capacity_app, name="capacity", help="GPU capacity, and the CI capacity gate.")


@boundary
def allocate_cmd(
    gpus: int | None = typer.Option(None, "--gpus", help="GPUs wanted (whole hosts)."),
    hosts: int | None = typer.Option(None, "--hosts", help="Hosts wanted."),
    model: str | None = typer.Option(None, "--model", help="GPU model, e.g. H100."),
    min_gpu_memory: str | None = typer.Option(
        None, "--min-gpu-memory", help="GPU memory per GPU, e.g. 80G."
    ),
    fabric: str | None = typer.Option(None, "--fabric", help="ib, roce or none."),
    profile: str | None = typer.Option(
        None, "--profile", help="Workload profile the hosts are validated for."
    ),
    cuda: str | None = typer.Option(
        None, "--cuda", help="CUDA MAJOR.MINOR the workload was built for (driver gate)."
    ),
    nvl_domain: bool = typer.Option(
        False, "--nvl-domain", help="Keep the lease inside one NVLink domain (GB200/GB300 "
        "NVL72 rack), refusing to span two; hosts a rack incident restricts are left out."
    ),
    selector: str | None = typer.Option(None, "--selector", help=SELECTOR_HELP),
    owner: str = typer.Option(..., "--owner", help="Team or person answering for the lease."),
    purpose: str = typer.Option(..., "--purpose", help="What the hosts are for."),
    for_: str | None = typer.Option(None, "--for", help="Duration, e.g. 72h or 7d."),
    until: str | None = typer.Option(None, "--until", help="End (ISO time; local unless zoned)."),
    start: str | None = typer.Option(
        None, "--start", help="Reserve from this time (ISO; local unless zoned); default now."
    ),
    users: list[str] | None = typer.Option(
        None,
        "--user",
        help="A login user of the lessee (repeat for several); reclaim checks that none of "
        "their processes or crontabs are left. Without it, every user with UID >= 1000.",
    ),
    account: str | None = typer.Option(
        None, "--account", help="Slurm account (project) of the lease: its reservation "
        "admits that account's jobs (Accounts=) as well as the users'.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the lease (or refusal) as JSON."),
) -> None:
    """Lease whole hosts to an owner for a purpose and a time (or reserve them from --start).
    Exit 0 granted, 1 when the request cannot be met (the reason is printed), 2 usage."""
    req = Request(
        gpus=gpus,
        hosts=hosts,
        model=model,
        min_gpu_memory_mib=parse_gpu_memory(min_gpu_memory) if min_gpu_memory else None,
        fabric=fabric,
        profile=profile,
        cuda=cuda,
        nvl_domain=nvl_domain,
    )
    got = allocation.allocate(
        open_fleet(),
        req,
        owner=owner,
        purpose=purpose,
        duration=parse_duration(for_, "--for") if for_ else None,
        until=_time(until, "--until"),
        start=_time(start, "--start"),
        selector=selector,
        users=users,
        account=account,
    )
    show_allocation(got, as_json)
    if got.ok:
        enforce_in_slurm()


def show_allocation(got: allocation.Allocation, as_json: bool) -> None:
    """Print what ``allocate`` did (the service's answer, or the API's in remote mode);
    exit 1 when refused."""
    if as_json:
        if got.lease is not None:
            print_json({"granted": True, "lease": got.lease.as_dict(), "warnings": got.warnings})
        else:
            assert got.refusal is not None
            r = got.refusal
            print_json(
                {
                    "granted": False,
                    "reason": r.message,
                    "counts": r.counts,
                    "held": r.held,
                    "missing_gpus": r.missing_gpus,
                }
            )
    elif got.lease is not None:
        v = got.lease
        line = (_("lease {id} reserved to {owner}: {hosts} ({gpus} GPUs), {start} -> {end}")
                if v.state == "reserved" else
                _("lease {id} granted to {owner}: {hosts} ({gpus} GPUs), {start} -> {end}"))
        console.print(line.format(
            id=v.id, owner=lit(v.owner), hosts=lit(", ".join(v.hosts)), gpus=v.gpus,
            start=local_time(v.starts_at), end=local_time(v.ends_at)))
        for w in got.warnings:
            err_console.print("[yellow]" + _("warning:") + f"[/] {lit(w)}")
    else:
        assert got.refusal is not None
        err_console.print("[bold red]" + _("refused:") + f"[/] {lit(got.refusal.message)}",
                          soft_wrap=True)
    if got.lease is None:
        raise typer.Exit(1)


@leases_app.command("list")
@boundary
def leases_list_cmd(
    selector: str | None = typer.Argument(None, help="Leases holding these hosts."),
    owner: str | None = typer.Option(None, "--owner", help="Only this owner's."),
    all_: bool = typer.Option(False, "--all", help="Include released and cancelled leases."),
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
    wide: bool = typer.Option(False, "--wide", help=WIDE_HELP),
) -> None:
    """Leases and reservations (holding ones unless --all)."""
    rows = leases.list_leases(open_fleet(), selector, owner=owner, include_ended=all_)
    show_leases(rows, as_json)


def show_leases(rows: list[LeaseView], as_json: bool, title: str = N_("leases")) -> None:
    """Print leases (``leases list``)."""
    if as_json:
        print_json([v.as_dict() for v in rows])
    else:
        _lease_table(rows, _(title))


@leases_app.command("show")
@boundary
def leases_show_cmd(
    lease_id: int = typer.Argument(..., help="Lease id."),
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
    wide: bool = typer.Option(False, "--wide", help=WIDE_HELP),
) -> None:
    """One lease with its hosts and GPU UUIDs."""
    show_lease(leases.show_lease(open_fleet(), lease_id), as_json)


@leases_app.command("renew")
@boundary
def leases_renew_cmd(
    lease_id: int = typer.Argument(..., help="Lease id."),
    for_: str | None = typer.Option(
        None, "--for", help="Extend by this from the current end, e.g. 24h."
    ),
    until: str | None = typer.Option(
        None, "--until", help="New end (ISO time; local unless zoned)."
    ),
    shorten: bool = typer.Option(
        False, "--shorten", help="Allow --until before the current end (refused otherwise)."
    ),
    owner: str | None = typer.Option(
        None, "--owner", help="Renew only if this is the lease's owner (exit 6 otherwise)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
) -> None:
    """Extend a lease by --for from its current end, or set its end with --until (an earlier
    end needs --shorten), within its pool's longest lease. Exit 4 unknown lease, 5 ended,
    6 refused by state (another owner's; a reservation needs a host then), 2 usage."""
    v = leases.renew(
        open_fleet(),
        lease_id,
        duration=parse_duration(for_, "--for") if for_ else None,
        until=_time(until, "--until"),
        owner=owner,
        shorten=shorten,
    )
    show_renewed(v, as_json)
    enforce_in_slurm()


def show_renewed(v: LeaseView, as_json: bool) -> None:
    """Print a renewed lease (``leases renew``)."""
    if as_json:
        print_json(v.as_dict())
    else:
        console.print(_("lease {id} renewed until {at}").format(id=v.id, at=local_time(v.ends_at)))


@leases_app.command("release")
@boundary
def leases_release_cmd(
    lease_id: int = typer.Argument(..., help="Lease id."),
    reason: str = typer.Option("released by its owner", "--reason", help="Why."),
    owner: str | None = typer.Option(
        None, "--owner", help="Release only if this is the lease's owner (exit 6 otherwise)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
) -> None:
    """End a lease: its hosts go to reclaiming (a reservation is cancelled). Exit 4 unknown
    lease, 5 already ended, 6 another owner's."""
    show_released(leases.release(open_fleet(), lease_id, reason, owner=owner), as_json)
    enforce_in_slurm()


def enforce_in_slurm() -> None:
    """Where work runs in Slurm (a sync target): bring the leases' reservations in line now
    rather than at the next sync; what Slurm refused is said on stderr (and is an alarm)."""
    from gpufleet.errors import GpufleetError
    from gpufleet.service.exports.slurm_reservations import reservation_sync
    from gpufleet.service.hosts.slurm_drain import work_runs_in_slurm

    fleet = open_fleet()
    if not work_runs_in_slurm(fleet):
        return
    try:
        rep = reservation_sync(fleet)
    except GpufleetError as exc:
        err_console.print("[yellow]" + _("warning:") + "[/] "
                          + _("Slurm reservations not synced: {why}").format(why=lit(exc)))
        return
    for done in rep.done:
        err_console.print(f"slurm: {lit(done)}")
    for e in rep.errors:
        err_console.print("[yellow]" + _("warning:") + "[/] " + _(
            "lease not enforced in Slurm (alarm raised, the next sync retries): {why}"
        ).format(why=lit(e)))


def show_released(out: leases.Released, as_json: bool) -> None:
    """Print a released lease (``leases release``)."""
    if as_json:
        print_json(
            {
                "lease": out.lease.as_dict(),
                "reclaiming": out.reclaiming,
                "reclaim": str(out.reclaim) if out.reclaim is not None else None,
                "note": out.note,
            }
        )
        return
    line = _("lease {id} {state}").format(id=out.lease.id, state=_(out.lease.state))
    if out.reclaiming:
        line += _(": {hosts} to reclaiming").format(hosts=lit(", ".join(out.reclaiming)))
    console.print(line)
    if out.note:
        console.print("[dim]" + _("note: {note}").format(note=lit(out.note)) + "[/]")


@leases_app.command("expiring")
@boundary
def leases_expiring_cmd(
    selector: str | None = typer.Argument(None, help="Leases holding these hosts."),
    within: str = typer.Option("24h", "--within", help="Window from now, e.g. 24h."),
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
    wide: bool = typer.Option(False, "--wide", help=WIDE_HELP),
) -> None:
    """Active leases that expire within --within (or already have)."""
    rows = leases.expiring(open_fleet(), parse_duration(within, "--within"), selector)
    show_expiring(rows, as_json, within)


def show_expiring(rows: list[LeaseView], as_json: bool, within: str) -> None:
    """Print the leases expiring ``within`` (``leases expiring``)."""
    show_leases(rows, as_json, _("leases expiring within {within}").format(within=within))


@leases_app.command("policy")
@boundary
def leases_policy_cmd(
    pool: str = typer.Argument(..., help="Pool name."),
    on_expiry: OnExpiry = typer.Option(..., "--on-expiry", help="notify or release."),
    max_lease: str | None = typer.Option(
        None, "--max", help="Longest lease before renewal, e.g. 7d."
    ),
) -> None:
    """Set a pool's lease policy: what expiry does, how long a lease may run unrenewed."""
    p = leases.set_policy(
        open_fleet(), pool, on_expiry, parse_duration(max_lease, "--max") if max_lease else None
    )
    console.print(_("pool {pool}: expired leases {action}, longest {longest}").format(
        pool=lit(pool), action=p.on_expiry.value, longest=p.max_duration))


def _print_k8s_capacity(kube: K8sCapacity) -> None:
    cols = [Col("nodeSelector", words=True)] + [
        Col(c, rank, ident=True, justify="right")
        for c, rank in ((N_("nodes"), 2), (N_("allocatable"), 3), (N_("requested"), 4),
                        (N_("free"), 0), (N_("unschedulable"), 5), (N_("gpufleet free"), 1))
    ]
    cells = []
    for r in kube.rows:
        cells.append([
            lit(selector_text(r.selector)),
            *(
                str(v)
                for v in (
                    r.nodes,
                    r.allocatable,
                    r.requested,
                    r.free,
                    r.unschedulable,
                    r.gpufleet_free,
                )
            ),
        ])
    show(cols, cells, title=_("Kubernetes scheduler's GPUs (allocatable - requested)"))
    if kube.missing:
        console.print(_("no Kubernetes node: ") + ", ".join(lit(h) for h in kube.missing))


#: ``capacity``'s numeric column headers at 80 columns (the JSON keeps the full names).
_SHORT = {
    "allocated": N_("alloc"), "reserved": N_("resv"), "quarantined": N_("quar"),
    "maintenance": N_("maint"),
}
#: The capacity columns (``capacity.COLUMNS``) as headers, marked for translation.
_CAPACITY_HEADERS = (N_("free"), N_("other"))


@capacity_app.callback()
@boundary
def capacity_cmd(
    ctx: typer.Context,
    selector: str | None = typer.Option(None, "--selector", help=SELECTOR_HELP),
    at: str | None = typer.Option(
        None, "--at", help="What will be free at this time (ISO; local unless zoned)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
    k8s: bool = typer.Option(
        False,
        "--k8s",
        help="Add the Kubernetes scheduler's view per label set (allocatable "
        "nvidia.com/gpu minus pod requests).",
    ),
    kubeconfig: Path | None = typer.Option(
        None, "--kubeconfig", help="Kubeconfig for --k8s (default GPUFLEET_KUBECONFIG, ...)."
    ),
    wide: bool = typer.Option(False, "--wide", help=WIDE_HELP),
    slurm: bool = typer.Option(
        False, "--slurm", help="Add Slurm's view per partition (GRES minus GRES in use)."
    ),
) -> None:
    """GPUs free / allocated / reserved / quarantined / maintenance by model, pool, profile;
    with --k8s also the scheduler's headroom per nodeSelector label set, with --slurm the
    GPUs Slurm can still give to jobs per partition."""
    if ctx.invoked_subcommand is not None:
        return
    rep = capacity.capacity(open_fleet(), selector, _time(at, "--at"))
    kube = k8s_capacity(open_fleet(), selector, kubeconfig=kubeconfig) if k8s else None
    slurm_cap = slurm_capacity(open_fleet(), selector) if slurm else None
    if slurm_cap is not None and as_json:
        doc = {"at": rep.at, "rows": rep.rows, "totals": rep.totals, "back": rep.back,
               "slurm": slurm_cap.as_json()}
        if kube is not None:
            doc["k8s"] = {"rows": [r.as_json() for r in kube.rows], "missing": kube.missing}
        print_json(doc)
        return
    show_capacity(rep, as_json, kube)
    if slurm_cap is not None:
        _print_slurm_capacity(slurm_cap)


def _print_slurm_capacity(cap: SlurmCapacity) -> None:
    cols = [Col("partition", ident=True), Col("type", ident=True)] + [
        Col(c, rank, ident=True, justify="right")
        for c, rank in (("nodes", 2), ("gpus", 3), ("used", 4), ("free", 0),
                        ("unschedulable", 5), ("gpufleet free", 1))
    ]
    cells = [
        [lit(r.partition), lit(r.gpu_type or "-"), *(str(v) for v in (
            r.nodes, r.gpus, r.used, r.free, r.unschedulable, r.gpufleet_free))]
        for r in cap.rows
    ]
    show(cols, cells, title=_("Slurm's GPUs (gres - gres in use)"))
    if cap.missing:
        console.print(_("no Slurm node: ") + ", ".join(lit(h) for h in cap.missing))


def show_capacity(
    rep: capacity.CapacityReport, as_json: bool, kube: K8sCapacity | None = None
) -> None:
    """Print a capacity report (``capacity``)."""
    if as_json:
        print_json(
            {"at": rep.at, "rows": rep.rows, "totals": rep.totals, "back": rep.back,
             "domains": rep.domains, "largest_domain_block": rep.largest_domain_block}
            | (
                {"k8s": {"rows": [r.as_json() for r in kube.rows], "missing": kube.missing}}
                if kube is not None
                else {}
            )
        )
        return
    # identifiers are never cut: the numbers' short headers leave room for them ("quar" =
    # quarantined), and the rarer numbers hide first on a narrow terminal
    rank = {"free": 0, "allocated": 1, "quarantined": 2, "reserved": 3, "maintenance": 4}
    cols = [Col("model", words=True), Col("pool", ident=True), Col("profile", 1, ident=True)]
    cols += [
        Col(_SHORT.get(c, c), rank.get(c, 5), ident=True, justify="right")
        for c in capacity.COLUMNS
    ]
    cells = [
        [lit(r["model"]), lit(r["pool"]), lit(r["profile"]), *[str(r[c]) for c in capacity.COLUMNS]]
        for r in rep.rows
    ]
    total = _("total GPUs")
    cells.append(
        [f"[bold]{total}[/]", "", "", *[f"[bold]{rep.totals[c]}[/]" for c in capacity.COLUMNS]]
    )
    show(cols, cells, title=_("GPU capacity at {at}").format(at=local_time(rep.at)))
    if rep.back:
        console.print(
            _("expected back: ")
            + "; ".join(
                _("{host} ({state}) by {eta}").format(
                    host=lit(b["host"]), state=state_name(b["state"]), eta=local_time(b["eta"])
                )
                for b in rep.back
            )
        )
    if rep.domains:
        console.print(
            f"NVLink domains: {len(rep.domains)}, largest free single-domain block "
            f"{rep.largest_domain_block} GPUs; restricted: "
            + (", ".join(lit(d["nvl_domain"]) for d in rep.domains if d["restricted"]) or "none")
        )
    if kube is not None:
        _print_k8s_capacity(kube)


@capacity_app.command("check")
@boundary
def capacity_check_cmd(
    gpus: int = typer.Option(..., "--gpus", help="GPUs the release needs."),
    model: str | None = typer.Option(None, "--model", help="GPU model, e.g. H100."),
    profile: str | None = typer.Option(None, "--profile", help="Workload profile."),
    headroom: str = typer.Option("0%", "--headroom", help="Extra on top, e.g. 10%."),
    selector: str | None = typer.Option(None, "--selector", help=SELECTOR_HELP),
    cuda: str | None = typer.Option(
        None, "--cuda", help="CUDA MAJOR.MINOR the release was built for (driver gate)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
    slurm: bool = typer.Option(
        False, "--slurm", help="Also need the GPUs free in Slurm (GRES not allocated to jobs)."
    ),
    partition: str | None = typer.Option(
        None, "--partition", help="With --slurm: the partition (default: the most free)."
    ),
    k8s: bool = typer.Option(
        False, "--k8s", help="Count only GPUs free in Kubernetes too (pods' requests per node)."
    ),
    kubeconfig: Path | None = typer.Option(
        None, "--kubeconfig", help="Kubeconfig for --k8s (default GPUFLEET_KUBECONFIG, ...)."
    ),
) -> None:
    """CI gate: exit 0 when enough GPUs are allocatable now, 1 when not (what is missing,
    where capacity is held, when it frees up; a capacity-short event and webhook), 2 on
    usage errors. --k8s: the GPUs must also be free where work runs; --slurm: free in Slurm,
    in one partition."""
    fleet = open_fleet()
    args: dict[str, Any] = dict(gpus=gpus, model=model, profile=profile,
                                headroom=parse_percent(headroom), selector=selector, cuda=cuda)
    r = (k8s_check(fleet, kubeconfig=kubeconfig, **args) if k8s
         else capacity.check(fleet, **args))
    if not r.ok:
        capacity.notify_short(fleet, r)
    if slurm:
        sc = slurm_check(fleet, r, partition=partition, selector=selector)
        if as_json:
            print_json(CapacityCheckOut.of(r).json_dict() | {"ok": sc.ok,
                                                            "slurm": sc.as_json()})
        else:
            (console if sc.ok else err_console).print(
                f"{'ok' if sc.ok else '[bold red]not enough:[/]'} {lit(sc.message)}",
                soft_wrap=True)
        if not sc.ok:
            raise typer.Exit(1)
        return
    show_check(r, as_json)


def show_check(r: capacity.CapacityCheck, as_json: bool) -> None:
    """Print the capacity gate's answer; exit 1 when there is not enough."""
    if as_json:
        print_json(CapacityCheckOut.of(r).json_dict())
    else:
        (console if r.ok else err_console).print(
            f"{'ok' if r.ok else '[bold red]not enough:[/]'} {lit(r.message)}", soft_wrap=True
        )
        for f in r.frees:
            console.print("  " + _("{n} GPUs free up by {at}").format(
                n=f["gpus"], at=local_time(f["at"])))
    if not r.ok:
        raise typer.Exit(1)
