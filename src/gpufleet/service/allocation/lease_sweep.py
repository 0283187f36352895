"""The lease sweep: reservations whose window began become leases (hosts -> allocated), and
each pool's expiry policy is applied to active leases past their expiry (release and
reclaim, or notify once through the hooks)."""

from __future__ import annotations

from sqlalchemy import select

from gpufleet.domain.events import EventKind
from gpufleet.domain.leases import LeaseState, OnExpiry
from gpufleet.domain.states import Event, HostState
from gpufleet.service.allocation.leases import (
    get_lease,
    lease_view,
    pool_policy,
    queue_webhook,
    release,
)
from gpufleet.service.core.fleet import Fleet, record_event
from gpufleet.service.core.lifecycle import transition
from gpufleet.store.tables import Host, Lease

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
        lease = get_lease(s, lease_id, lock=True)
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
        view = lease_view(lease)
        queue_webhook(s, fleet, EventKind.LEASE_STARTED, view)
        names = [h.name for h in hosts]
    return names


def _expire(fleet: Fleet, lease_id: int) -> list[str]:
    now = fleet.now()
    with fleet.db.session() as s:
        lease = get_lease(s, lease_id, lock=True)
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
        view = lease_view(lease)
        queue_webhook(s, fleet, EventKind.LEASE_EXPIRED, view)
    if policy.on_expiry is OnExpiry.RELEASE:
        return release(fleet, lease_id, "expired", expired=True).reclaiming
    return []
