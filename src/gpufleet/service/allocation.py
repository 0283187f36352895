"""Leases: allocate whole hosts to an owner for a purpose and a window, reserve future
windows, renew, release, expire (per-pool policy), and the hook point for notifications.

Placement itself is pure (:mod:`gpufleet.domain.placement`); this module reads the hosts,
runs it and writes the lease in one short transaction that cannot hand a host out twice:

* **SQLite** (one writer): the transaction takes the write lock first (a no-op ``UPDATE``),
  so allocations run one after another and each sees the last one's lease.
* **PostgreSQL**: the chosen hosts are row-locked (``FOR UPDATE``, in id order), then
  re-checked (state version unchanged, no overlapping lease or reservation committed
  meanwhile); a host taken by a concurrent request raises :class:`Conflict` and the request
  is placed again from fresh reads (up to :data:`ATTEMPTS` times).

Both: the move to ``allocated`` goes through :func:`gpufleet.service.lifecycle.transition`
(compare-and-set on ``state_version``). On release the hosts go to ``reclaiming`` and, when
``gpufleet.service.reclaim`` is installed, its ``reclaim_hosts`` runs the reclaim checks.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.domain.events import EventKind
from gpufleet.domain.leases import (
    DEFAULT_POLICY,
    HOLDING,
    LeasePolicy,
    LeaseState,
    OnExpiry,
    lease_window,
)
from gpufleet.domain.placement import Placement, Refusal, Request, explain
from gpufleet.domain.states import Event, HostState
from gpufleet.errors import ConfigError, Conflict, InvalidTransition, NotFound
from gpufleet.service.candidates import CandidateRow, find_placement, host_views, write_lock
from gpufleet.service.fleet import Fleet, record_event
from gpufleet.service.lifecycle import transition
from gpufleet.service.select import is_explicit, nothing_matches, select_hosts
from gpufleet.store.tables import GpuRow, Host, Lease, LeaseHost, Pool

#: How often a request that lost a host to a concurrent one is placed again.
ATTEMPTS = 60

# --- the hook point (webhooks are delivered by whoever registers a hook) -------------------

LeaseHook = Callable[[EventKind, dict[str, Any]], None]
_HOOKS: list[LeaseHook] = []


def register_lease_hook(hook: LeaseHook) -> Callable[[], None]:
    """Call ``hook(kind, lease)`` after every lease event is committed (granted, reserved,
    started, renewed, released, expired); returns the function that removes it. Hooks run
    outside any transaction; one that raises is reported in the result, never undoes it."""
    _HOOKS.append(hook)
    return lambda: _HOOKS.remove(hook) if hook in _HOOKS else None


def _call_hooks(kind: EventKind, lease: LeaseView) -> list[str]:
    problems: list[str] = []
    payload = lease.as_dict()
    for hook in list(_HOOKS):
        try:
            hook(kind, payload)
        except Exception as exc:  # a hook's failure must not undo the lease change
            problems.append(f"lease hook {getattr(hook, '__name__', hook)!s} failed: {exc}")
    return problems


# --- views ----------------------------------------------------------------------------------


@dataclass
class LeaseView:
    """A lease as commands print it."""

    id: int
    owner: str
    purpose: str
    state: str
    actor: str
    starts_at: datetime
    ends_at: datetime
    created_at: datetime
    hosts: list[str]
    gpus: int
    gpu_uuids: dict[str, list[str]]
    request: dict[str, Any]
    released_at: datetime | None = None
    notified_at: datetime | None = None
    reason: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "owner": self.owner,
            "purpose": self.purpose,
            "state": self.state,
            "actor": self.actor,
            "starts_at": self.starts_at,
            "ends_at": self.ends_at,
            "created_at": self.created_at,
            "hosts": self.hosts,
            "gpus": self.gpus,
            "gpu_uuids": self.gpu_uuids,
            "request": self.request,
            "released_at": self.released_at,
            "notified_at": self.notified_at,
            "reason": self.reason,
        }


def _view(lease: Lease) -> LeaseView:
    return LeaseView(
        id=lease.id,
        owner=lease.owner,
        purpose=lease.purpose,
        state=lease.state.value,
        actor=lease.actor,
        starts_at=lease.starts_at,
        ends_at=lease.ends_at,
        created_at=lease.created_at,
        hosts=[lh.host_name for lh in lease.hosts],
        gpus=sum(lh.gpus for lh in lease.hosts),
        gpu_uuids={lh.host_name: list(lh.gpu_uuids or []) for lh in lease.hosts},
        request=dict(lease.request or {}),
        released_at=lease.released_at,
        notified_at=lease.notified_at,
        reason=lease.reason,
    )


@dataclass
class Allocation:
    """What ``allocate`` did: the lease, or why none could be made."""

    lease: LeaseView | None = None
    refusal: Refusal | None = None
    placement: Placement | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.lease is not None


def pool_policy(s: Session, pool: str | None) -> LeasePolicy:
    """The lease policy of ``pool`` (defaults when none is set)."""
    if pool is None:
        return DEFAULT_POLICY
    raw = s.scalar(select(Pool.lease_policy).where(Pool.name == pool))
    if not raw:
        return DEFAULT_POLICY
    return LeasePolicy(
        on_expiry=OnExpiry(raw.get("on_expiry", DEFAULT_POLICY.on_expiry.value)),
        max_duration=timedelta(
            seconds=float(raw.get("max_duration_s", DEFAULT_POLICY.max_duration.total_seconds()))
        ),
    )


def _check_request(req: Request) -> None:
    if (req.gpus is None) == (req.hosts is None):
        raise ConfigError("give exactly one of --gpus N or --hosts M")
    size = req.gpus if req.gpus is not None else req.hosts
    if size is None or size < 1:
        raise ConfigError("--gpus / --hosts must be at least 1")


def _lock_and_recheck(
    s: Session,
    chosen: list[CandidateRow],
    start: datetime,
    end: datetime,
    exclude_lease: int | None,
) -> list[Host]:
    """Row-lock the chosen hosts (id order) and make sure nobody took them meanwhile."""
    ids = sorted(r.id for r in chosen)
    hosts = list(
        s.scalars(select(Host).where(Host.id.in_(ids)).order_by(Host.id).with_for_update())
    )
    versions = {r.id: r.version for r in chosen}
    for h in hosts:
        if (h.state_version or 0) != versions[h.id]:
            raise Conflict(f"host {h.name} changed while it was being placed; placing again")
    clash = select(LeaseHost.host_name).where(
        LeaseHost.holding,
        LeaseHost.host_id.in_(ids),
        LeaseHost.starts_at < end,
        LeaseHost.ends_at > start,
    )
    if exclude_lease is not None:
        clash = clash.where(LeaseHost.lease_id != exclude_lease)
    taken = list(s.scalars(clash))
    if taken:
        raise Conflict(f"host {taken[0]} was leased meanwhile; placing again")
    return hosts


def _gpu_uuids(s: Session, hosts: list[Host]) -> dict[int, list[str]]:
    snaps = {h.latest_snapshot_id: h.id for h in hosts if h.latest_snapshot_id is not None}
    out: dict[int, list[str]] = {h.id: [] for h in hosts}
    for snap, uuid in s.execute(
        select(GpuRow.snapshot_id, GpuRow.uuid)
        .where(GpuRow.snapshot_id.in_(list(snaps)))
        .order_by(GpuRow.snapshot_id, GpuRow.index)
    ):
        if uuid:
            out[snaps[snap]].append(uuid)
    return out


def allocate(
    fleet: Fleet,
    req: Request,
    *,
    owner: str,
    purpose: str,
    duration: timedelta | None = None,
    until: datetime | None = None,
    start: datetime | None = None,
    selector: str | None = None,
) -> Allocation:
    """Place ``req`` and lease the hosts to ``owner`` (or reserve them when ``start`` is in
    the future). A request that cannot be met returns the refusal with its counts."""
    _check_request(req)
    if not owner.strip() or not purpose.strip():
        raise ConfigError("--owner and --purpose must not be empty")
    for attempt in range(ATTEMPTS):
        try:
            result = _allocate_once(fleet, req, owner, purpose, duration, until, start, selector)
            break
        except Conflict:
            if attempt == ATTEMPTS - 1:
                raise
            time.sleep(random.uniform(0.0, 0.02))
    if result.lease is not None:
        kind = (
            EventKind.LEASE_GRANTED
            if result.lease.state == LeaseState.ACTIVE.value
            else EventKind.LEASE_RESERVED
        )
        result.warnings += _call_hooks(kind, result.lease)
    return result


def _allocate_once(
    fleet: Fleet,
    req: Request,
    owner: str,
    purpose: str,
    duration: timedelta | None,
    until: datetime | None,
    start: datetime | None,
    selector: str | None,
) -> Allocation:
    now = fleet.now()
    loose = LeasePolicy(max_duration=timedelta(days=36500))
    begin, end = lease_window(now, start=start, duration=duration, until=until, policy=loose)
    with fleet.db.session() as s:
        write_lock(s)
        placement, views, index = find_placement(s, req, selector, begin, end, now=now)
        if placement is None:
            everything, _ = host_views(
                s,
                Request(**{**_fields(req), "model": None}),
                selector,
                begin,
                end,
                now=now,
                candidates_only=False,
            )
            if not everything and is_explicit(selector):
                raise nothing_matches(selector)
            return Allocation(refusal=explain(req, everything))
        chosen = [index[n] for n in placement.hosts]
        for pool in sorted({r.pool or "" for r in chosen}):
            policy = pool_policy(s, pool or None)
            lease_window(now, start=begin, duration=None, until=end, policy=policy)
        hosts = _lock_and_recheck(s, chosen, begin, end, None)
        uuids = _gpu_uuids(s, hosts)
        gpus = {v.name: v.gpus for v in views}
        active = begin <= now
        lease = Lease(
            owner=owner,
            purpose=purpose,
            actor=fleet.actor,
            state=LeaseState.ACTIVE if active else LeaseState.RESERVED,
            request={**_fields(req), "selector": selector},
            created_at=now,
            starts_at=begin,
            ends_at=end,
        )
        lease.hosts = [
            LeaseHost(
                host_id=h.id,
                host_name=h.name,
                gpus=gpus[h.name],
                gpu_uuids=uuids[h.id],
                starts_at=begin,
                ends_at=end,
                holding=True,
            )
            for h in hosts
        ]
        s.add(lease)
        s.flush()
        if active:
            for h in hosts:
                transition(
                    s,
                    fleet,
                    h,
                    Event.ALLOCATE,
                    f"lease {lease.id} to {owner}: {purpose}",
                    data={"lease": lease.id, "owner": owner, "until": end.isoformat()},
                )
        verb = "granted" if active else "reserved"
        record_event(
            s,
            fleet,
            EventKind.LEASE_GRANTED if active else EventKind.LEASE_RESERVED,
            f"lease {lease.id} {verb} to {owner} ({purpose}): {', '.join(placement.hosts)}, "
            f"{placement.gpus} GPUs, {begin.isoformat(timespec='minutes')} -> "
            f"{end.isoformat(timespec='minutes')}",
            data={
                "lease": lease.id,
                "owner": owner,
                "hosts": list(placement.hosts),
                "starts_at": begin.isoformat(),
                "ends_at": end.isoformat(),
            },
        )
        return Allocation(lease=_view(lease), placement=placement)


def _fields(req: Request) -> dict[str, Any]:
    return {
        "gpus": req.gpus,
        "hosts": req.hosts,
        "model": req.model,
        "min_gpu_memory_mib": req.min_gpu_memory_mib,
        "fabric": req.fabric,
        "profile": req.profile,
    }


# --- reading leases ----------------------------------------------------------------------------


def _lease(s: Session, lease_id: int, *, lock: bool = False) -> Lease:
    stmt = select(Lease).where(Lease.id == lease_id)
    if lock:
        stmt = stmt.with_for_update()
    lease = s.scalar(stmt)
    if lease is None:
        raise NotFound(f"no lease {lease_id}")
    return lease


def list_leases(
    fleet: Fleet,
    selector: str | None = None,
    *,
    owner: str | None = None,
    include_ended: bool = False,
) -> list[LeaseView]:
    """Leases (holding ones unless ``include_ended``), of ``owner`` and touching the hosts
    of ``selector``, by start."""
    with fleet.db.session() as s:
        stmt = select(Lease).order_by(Lease.starts_at, Lease.id)
        if not include_ended:
            stmt = stmt.where(Lease.state.in_(sorted(HOLDING)))
        if owner:
            stmt = stmt.where(Lease.owner == owner)
        if is_explicit(selector):
            ids = select_hosts(selector).with_only_columns(Host.id).order_by(None)
            if not s.scalars(ids).first():
                raise nothing_matches(selector)
            stmt = stmt.where(
                Lease.id.in_(select(LeaseHost.lease_id).where(LeaseHost.host_id.in_(ids)))
            )
        return [_view(lease) for lease in s.scalars(stmt)]


def show_lease(fleet: Fleet, lease_id: int) -> LeaseView:
    """One lease by id (NotFound, exit 4)."""
    with fleet.db.session() as s:
        return _view(_lease(s, lease_id))


def expiring(fleet: Fleet, within: timedelta, selector: str | None = None) -> list[LeaseView]:
    """Active leases whose expiry is within ``within`` from now (expired ones included)."""
    limit = fleet.now() + within
    return [
        lease
        for lease in list_leases(fleet, selector)
        if lease.state == LeaseState.ACTIVE.value and lease.ends_at <= limit
    ]


# --- renew, release ---------------------------------------------------------------------------


def renew(
    fleet: Fleet, lease_id: int, *, duration: timedelta | None = None, until: datetime | None = None
) -> LeaseView:
    """Move a holding lease's expiry to now + ``duration`` (or ``until``): refused past the
    pool's longest lease, or when a reservation of another lease needs one of its hosts."""
    now = fleet.now()
    with fleet.db.session() as s:
        write_lock(s)
        lease = _lease(s, lease_id, lock=True)
        if lease.state not in HOLDING:
            raise InvalidTransition(
                f"lease {lease_id}", lease.state.value, "renew", [v.value for v in sorted(HOLDING)]
            )
        base = max(now, lease.starts_at)
        pools = set(
            s.scalars(select(Host.pool).where(Host.id.in_([lh.host_id for lh in lease.hosts])))
        )
        end = None
        for pool in sorted(pools, key=lambda p: p or ""):
            _, end = lease_window(
                base, start=base, duration=duration, until=until, policy=pool_policy(s, pool)
            )
        if end is None:
            _, end = lease_window(base, start=base, duration=duration, until=until)
        chosen = [
            CandidateRow(lh.host_id, v or 0, None)
            for lh, v in s.execute(
                select(LeaseHost, Host.state_version)
                .join(Host, Host.id == LeaseHost.host_id)
                .where(LeaseHost.lease_id == lease.id)
            )
        ]
        try:
            _lock_and_recheck(s, chosen, lease.ends_at, end, lease.id)
        except Conflict as exc:
            raise ConfigError(
                f"cannot renew lease {lease_id} to {end.isoformat()}: {exc}".replace(
                    "; placing again", " (another lease holds it then)"
                )
            ) from None
        before = lease.ends_at
        lease.ends_at = end
        lease.notified_at = None
        for lh in lease.hosts:
            lh.ends_at = end
        record_event(
            s,
            fleet,
            EventKind.LEASE_RENEWED,
            f"lease {lease.id} of {lease.owner} renewed: {before.isoformat(timespec='minutes')}"
            f" -> {end.isoformat(timespec='minutes')}",
            data={"lease": lease.id, "before": before.isoformat(), "after": end.isoformat()},
        )
        view = _view(lease)
    _call_hooks(EventKind.LEASE_RENEWED, view)
    return view


@dataclass
class Released:
    """A released lease, the hosts sent to reclaiming, and what reclaim said."""

    lease: LeaseView
    reclaiming: list[str]
    reclaim: object | None = None
    note: str | None = None
    warnings: list[str] = field(default_factory=list)


def release(
    fleet: Fleet, lease_id: int, reason: str = "released by its owner", *, expired: bool = False
) -> Released:
    """End a lease: an active one's hosts go to ``reclaiming`` (then the reclaim checks, when
    installed); a reservation is cancelled (its hosts were never allocated)."""
    now = fleet.now()
    with fleet.db.session() as s:
        lease = _lease(s, lease_id, lock=True)
        if lease.state not in HOLDING:
            raise InvalidTransition(
                f"lease {lease_id}",
                lease.state.value,
                "release",
                [v.value for v in sorted(HOLDING)],
            )
        moved: list[str] = []
        if lease.state is LeaseState.ACTIVE:
            ids = sorted(lh.host_id for lh in lease.hosts)
            for h in s.scalars(
                select(Host).where(Host.id.in_(ids)).order_by(Host.id).with_for_update()
            ):
                if HostState(h.state) is HostState.ALLOCATED:
                    transition(
                        s,
                        fleet,
                        h,
                        Event.RELEASE,
                        f"lease {lease.id} of {lease.owner} ended: {reason}",
                        data={"lease": lease.id},
                    )
                    moved.append(h.name)
            lease.state = LeaseState.RELEASED
        else:
            lease.state = LeaseState.CANCELLED
        lease.released_at = now
        lease.reason = reason
        for lh in lease.hosts:
            lh.holding = False
        record_event(
            s,
            fleet,
            EventKind.LEASE_RELEASED,
            f"lease {lease.id} of {lease.owner} {lease.state.value} ({reason})"
            + (f": {', '.join(moved)} to reclaiming" if moved else ""),
            data={"lease": lease.id, "hosts": moved, "reason": reason, "expired": expired},
        )
        view = _view(lease)
    out = Released(view, moved)
    out.warnings += _call_hooks(EventKind.LEASE_RELEASED, view)
    if moved:
        out.reclaim, out.note = _reclaim(fleet, moved, lease_id)
    return out


def _reclaim(fleet: Fleet, hosts: list[str], lease_id: int) -> tuple[object | None, str | None]:
    """Hand the released hosts to the reclaim checks when that module is installed."""
    try:
        from gpufleet.service import reclaim as reclaim_mod  # type: ignore[attr-defined,unused-ignore]
    except ImportError as exc:
        if exc.name not in ("gpufleet.service.reclaim", None):
            raise
        return None, (
            f"{', '.join(hosts)} left in reclaiming: the reclaim checks are not installed "
            "(gpufleet.service.reclaim); they time out to quarantined after the reclaiming "
            "deadline unless reclaimed"
        )
    fn = getattr(reclaim_mod, "reclaim_hosts", None)
    if fn is None:
        return None, f"{', '.join(hosts)} left in reclaiming: reclaim_hosts is not available yet"
    return fn(fleet, hosts, lease_id=lease_id), None


# --- the sweep: reservations start, leases expire ----------------------------------------------


def sweep_leases(fleet: Fleet) -> list[str]:
    """Start reservations whose window began (hosts -> allocated), apply each pool's expiry
    policy to active leases past their expiry (release, or notify once). Returns the hosts
    whose state changed."""
    now = fleet.now()
    touched: list[str] = []
    with fleet.db.session() as s:
        due = list(
            s.scalars(
                select(Lease.id)
                .where(Lease.state == LeaseState.RESERVED, Lease.starts_at <= now)
                .order_by(Lease.id)
            )
        )
        expired = list(
            s.scalars(
                select(Lease.id)
                .where(Lease.state == LeaseState.ACTIVE, Lease.ends_at <= now)
                .order_by(Lease.id)
            )
        )
    for lease_id in due:
        touched += _start_reservation(fleet, lease_id)
    for lease_id in expired:
        touched += _expire(fleet, lease_id)
    return touched


def _start_reservation(fleet: Fleet, lease_id: int) -> list[str]:
    now = fleet.now()
    with fleet.db.session() as s:
        lease = _lease(s, lease_id, lock=True)
        if lease.state is not LeaseState.RESERVED or lease.starts_at > now:
            return []
        if lease.ends_at <= now:
            view_reason = "its window passed before its hosts could be allocated"
            lease.state, lease.released_at, lease.reason = LeaseState.CANCELLED, now, view_reason
            for lh in lease.hosts:
                lh.holding = False
            record_event(
                s,
                fleet,
                EventKind.LEASE_RELEASED,
                f"reservation {lease.id} of {lease.owner} cancelled: {view_reason}",
                data={"lease": lease.id, "hosts": [], "reason": view_reason},
            )
            return []
        ids = sorted(lh.host_id for lh in lease.hosts)
        hosts = list(
            s.scalars(select(Host).where(Host.id.in_(ids)).order_by(Host.id).with_for_update())
        )
        waiting = [
            f"{h.name} ({h.state.value})"
            for h in hosts
            if HostState(h.state) is not HostState.AVAILABLE
        ]
        if waiting:
            lease.reason = f"waiting for {', '.join(waiting)}"
            return []  # the next sweep tries again; the hosts stay held for the window
        for h in hosts:
            transition(
                s,
                fleet,
                h,
                Event.ALLOCATE,
                f"reservation {lease.id} of {lease.owner} started: {lease.purpose}",
                data={"lease": lease.id, "owner": lease.owner, "until": lease.ends_at.isoformat()},
            )
        lease.state, lease.reason = LeaseState.ACTIVE, None
        record_event(
            s,
            fleet,
            EventKind.LEASE_STARTED,
            f"reservation {lease.id} of {lease.owner} started: {', '.join(h.name for h in hosts)}",
            data={"lease": lease.id, "hosts": [h.name for h in hosts]},
        )
        view = _view(lease)
        names = [h.name for h in hosts]
    _call_hooks(EventKind.LEASE_STARTED, view)
    return names


def _expire(fleet: Fleet, lease_id: int) -> list[str]:
    now = fleet.now()
    with fleet.db.session() as s:
        lease = _lease(s, lease_id, lock=True)
        if lease.state is not LeaseState.ACTIVE or lease.ends_at > now:
            return []
        pool = (
            s.scalar(select(Host.pool).where(Host.id == lease.hosts[0].host_id))
            if lease.hosts
            else None
        )
        policy = pool_policy(s, pool)
        if policy.on_expiry is OnExpiry.NOTIFY and lease.notified_at is not None:
            return []
        lease.notified_at = now
        record_event(
            s,
            fleet,
            EventKind.LEASE_EXPIRED,
            f"lease {lease.id} of {lease.owner} expired at "
            f"{lease.ends_at.isoformat(timespec='minutes')} (pool {pool or '-'} policy: "
            f"{policy.on_expiry.value})",
            data={
                "lease": lease.id,
                "owner": lease.owner,
                "policy": policy.on_expiry.value,
                "hosts": [lh.host_name for lh in lease.hosts],
            },
        )
        view = _view(lease)
    _call_hooks(EventKind.LEASE_EXPIRED, view)
    if policy.on_expiry is OnExpiry.RELEASE:
        return release(fleet, lease_id, "expired", expired=True).reclaiming
    return []


# --- pool policy --------------------------------------------------------------------------------


def set_policy(
    fleet: Fleet, pool: str, on_expiry: OnExpiry, max_duration: timedelta | None = None
) -> LeasePolicy:
    """Set ``pool``'s lease policy (the pool must exist: enrolled from an inventory)."""
    with fleet.db.session() as s:
        row = s.scalar(select(Pool).where(Pool.name == pool).with_for_update())
        if row is None:
            raise NotFound(f"no pool named '{pool}'")
        current = pool_policy(s, pool)
        policy = LeasePolicy(on_expiry, max_duration or current.max_duration)
        row.lease_policy = {
            "on_expiry": policy.on_expiry.value,
            "max_duration_s": policy.max_duration.total_seconds(),
        }
        record_event(
            s,
            fleet,
            EventKind.LEASE_POLICY,
            f"pool {pool}: expired leases {policy.on_expiry.value}, longest lease "
            f"{policy.max_duration}",
            data={"pool": pool, **row.lease_policy},
        )
        return policy
