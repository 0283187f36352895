"""Capacity: free / allocated / reserved / quarantined / maintenance GPUs by model, pool and
profile, now or at a future time, and the gate a release pipeline asks ("is there room?").

A mixed fleet side by side (issue 15): each row names its vendor; the accelerators of a host
carrying another vendor's than NVIDIA's (Ascend NPUs, AMD Instinct GPUs, with or without
NVIDIA GPUs beside them) are counted under their vendor and model (``huawei 910B3``, ``amd
Instinct MI100``, ``H100 80GB HBM3``), read from the host's facts
(:mod:`gpufleet.service.hosts.accelerator_counts`)."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select

from gpufleet.domain.cuda import parse_cuda
from gpufleet.domain.events import EventKind
from gpufleet.domain.leases import LeaseState
from gpufleet.domain.placement import HostView, Request, allocatable, explain, matches_hardware
from gpufleet.domain.states import HostState
from gpufleet.errors import ConfigError
from gpufleet.service.allocation.candidates import host_views
from gpufleet.service.core import webhooks
from gpufleet.service.core.fleet import Fleet, record_event
from gpufleet.service.core.policies import Policies
from gpufleet.service.core.select import is_explicit, nothing_matches
from gpufleet.service.hosts.accelerator_counts import accelerators_from_facts, display_model
from gpufleet.store.tables import Lease, LeaseHost

#: The columns of ``gpufleet capacity``.
_TICK = timedelta(seconds=1)
COLUMNS = ("free", "allocated", "reserved", "quarantined", "maintenance", "other")


@dataclass
class CapacityReport:
    """GPUs per (model, pool, profile) and column, at ``at``; hosts expected back."""

    at: datetime
    rows: list[dict[str, Any]]
    totals: dict[str, int]
    back: list[dict[str, Any]] = field(default_factory=list)
    #: issue 27: per multi-node NVLink domain, its hosts, GPUs and free GPUs and whether a
    #: rack incident restricts it; and the most free GPUs one unrestricted domain holds (the
    #: largest ``allocate --nvl-domain`` that fits).
    domains: list[dict[str, Any]] = field(default_factory=list)
    largest_domain_block: int = 0


def _column(h: HostView, lease_state: str | None) -> str:
    if lease_state == LeaseState.ACTIVE.value:
        return "allocated"
    if lease_state == LeaseState.RESERVED.value:
        return "reserved"
    if h.state is HostState.AVAILABLE and h.alarm:
        return "other"  # issue 24: an open blocking alarm (a held quarantine) is not free
    if h.state is HostState.AVAILABLE or h.free_by_start:
        return "free"
    if h.state is HostState.ALLOCATED:
        return "allocated"
    if h.state is HostState.QUARANTINED:
        return "quarantined"
    if h.state is HostState.MAINTENANCE:
        return "maintenance"
    return "other"  # enrolled, validating, reclaiming (retired hosts are left out)


def capacity(
    fleet: Fleet, selector: str | None = None, at: datetime | None = None
) -> CapacityReport:
    """What is free at ``at`` (default now): a lease or reservation covering ``at`` holds its
    hosts; a host allocated now whose lease ends before ``at`` counts as free then."""
    now = fleet.now()
    when = max(at or now, now)
    probe = when if when > now else now
    with fleet.db.session() as s:
        views, index = host_views(
            s, Request(hosts=1), selector, probe, probe + _TICK, now=now, candidates_only=False
        )
        covering: dict[int, str] = {
            hid: st.value
            for hid, st in s.execute(
                select(LeaseHost.host_id, Lease.state)
                .join(Lease, Lease.id == LeaseHost.lease_id)
                .where(LeaseHost.holding, LeaseHost.starts_at <= probe, LeaseHost.ends_at > probe)
            )
        }
        decoded = accelerators_from_facts(
            s, [index[h.name].id for h in views if h.state is not HostState.RETIRED]
        )
    if not views and is_explicit(selector):
        raise nothing_matches(selector)
    rows: dict[tuple[str, str, str], Counter[str]] = {}
    vendors: dict[str, str] = {}  # displayed model -> vendor
    totals: Counter[str] = Counter()
    back: list[dict[str, Any]] = []
    domains: dict[str, dict[str, Any]] = {}
    for h in views:
        if h.state is HostState.RETIRED:
            continue
        hid = index[h.name].id
        col = _column(h, covering.get(hid))
        if h.nvl_domain:
            d = domains.setdefault(h.nvl_domain, {"nvl_domain": h.nvl_domain, "hosts": 0,
                                                  "gpus": 0, "free": 0, "restricted": False})
            d["hosts"] += 1
            d["gpus"] += h.gpus
            d["free"] += h.gpus if col == "free" else 0
            d["restricted"] = d["restricted"] or h.nvl_restricted
        groups = decoded.get(hid) or [
            ("nvidia" if h.model else "unknown", h.model or "unknown", h.gpus)
        ]
        count = sum(n for _, _, n in groups)
        totals[col] += count
        for vendor, name, n in groups:
            model = display_model(vendor, name)
            vendors[model] = vendor
            for profile in sorted(h.profiles) or ["-"]:
                rows.setdefault((model, h.pool or "-", profile), Counter())[col] += n
        if h.eta is not None:
            back.append({"host": h.name, "state": h.state.value, "gpus": count, "eta": h.eta})
    return CapacityReport(
        at=when,
        rows=[
            {
                "vendor": vendors[m],
                "model": m,
                "pool": p,
                "profile": pr,
                **{c: counts.get(c, 0) for c in COLUMNS},
            }
            for (m, p, pr), counts in sorted(rows.items())
        ],
        totals={c: totals.get(c, 0) for c in COLUMNS},
        back=sorted(back, key=lambda b: (b["eta"], b["host"])),
        domains=[domains[k] for k in sorted(domains)],
        largest_domain_block=max(
            (d["free"] for d in domains.values() if not d["restricted"]), default=0),
    )


@dataclass
class CapacityCheck:
    """The answer of ``capacity check``: enough allocatable GPUs or not, and if not, what is
    missing, where capacity is held and when it frees up."""

    ok: bool
    requested: int
    headroom: float
    needed: int
    allocatable: int
    missing: int
    model: str | None
    profile: str | None
    message: str
    held: list[dict[str, Any]] = field(default_factory=list)
    frees: list[dict[str, Any]] = field(default_factory=list)
    #: issue 26: the CUDA the release needs (hosts whose driver cannot serve it left out)
    cuda: str | None = None
    #: issue 26: the scheduler's view (``capacity check --k8s``): free GPUs where work runs
    k8s: dict[str, Any] | None = None


def check(
    fleet: Fleet,
    *,
    gpus: int,
    model: str | None = None,
    profile: str | None = None,
    headroom: float = 0.0,
    selector: str | None = None,
    cuda: str | None = None,
) -> CapacityCheck:
    """Are ``gpus`` x (1 + ``headroom``) GPUs of ``model`` validated for ``profile``
    allocatable now (available, no open alarm, not reserved for now)? ``cuda``: only hosts
    whose driver serves that CUDA count (:mod:`gpufleet.domain.cuda`)."""
    if gpus < 1:
        raise ConfigError("--gpus must be at least 1")
    if cuda is not None:
        parse_cuda(cuda)
    Policies(fleet).check_profile(profile)
    needed = math.ceil(gpus * (1 + headroom) - 1e-9)
    req = Request(gpus=needed, model=model, profile=profile, cuda=cuda)
    now = fleet.now()
    with fleet.db.session() as s:
        views, _ = host_views(
            s, Request(gpus=needed), selector, now, now + _TICK, now=now, candidates_only=False
        )
        ends: dict[str, datetime] = {
            name: end
            for name, end in s.execute(
                select(LeaseHost.host_name, LeaseHost.ends_at)
                .join(Lease, Lease.id == LeaseHost.lease_id)
                .where(LeaseHost.holding, Lease.state == LeaseState.ACTIVE)
            )
        }
    if not views and is_explicit(selector):
        raise nothing_matches(selector)
    free = sum(h.gpus for h in views if allocatable(req, h))
    missing = max(0, needed - free)
    held: list[dict[str, Any]] = []
    frees: Counter[datetime] = Counter()
    for h in views:
        if not matches_hardware(req, h) or allocatable(req, h):
            continue
        until = ends.get(h.name) if h.state is HostState.ALLOCATED else h.eta or h.busy_until
        if h.state is HostState.AVAILABLE and profile and profile not in h.profiles:
            continue  # not validated for the profile: not capacity that frees up
        held.append({"host": h.name, "state": h.state.value, "gpus": h.gpus, "until": until})
        if until is not None:
            frees[until] += h.gpus
    if missing == 0:
        message = f"{free} GPUs allocatable, {needed} needed ({gpus} + {headroom:.0%} headroom)"
    else:
        message = explain(req, views).message.replace(
            f"cannot place {req.describe()}", f"not enough capacity for {req.describe()}"
        )
    return CapacityCheck(
        ok=missing == 0,
        requested=gpus,
        headroom=headroom,
        needed=needed,
        allocatable=free,
        missing=missing,
        model=model,
        profile=profile,
        message=message,
        held=sorted(held, key=lambda d: (str(d["until"]), d["host"])),
        frees=[{"at": t, "gpus": n} for t, n in sorted(frees.items())],
        cuda=cuda,
    )


def notify_short(fleet: Fleet, r: CapacityCheck) -> None:
    """Issue 26: a short gate is an on-call notice: a ``capacity-short`` event and webhook
    (through the outbox, :func:`gpufleet.service.core.webhooks.enqueue`), one transaction."""
    data: dict[str, Any] = {
        "requested": r.requested, "needed": r.needed, "allocatable": r.allocatable,
        "missing": r.missing, "model": r.model, "profile": r.profile, "cuda": r.cuda,
        "message": r.message,
    }
    if r.k8s is not None:
        data["k8s"] = r.k8s
    with fleet.db.session() as s:
        record_event(s, fleet, EventKind.CAPACITY_SHORT, r.message, data=data)
        webhooks.enqueue(s, fleet, EventKind.CAPACITY_SHORT.value, None, data)
