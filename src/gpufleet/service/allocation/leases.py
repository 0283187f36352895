"""Leases once made: the lease view, the hook point for lease events, reading (list, show,
expiring), renewing, releasing (hosts to ``reclaiming``, then the reclaim checks when
installed) and each pool's lease policy. Making a lease is
:mod:`gpufleet.service.allocation.allocation`;
starting reservations and expiring leases is :mod:`gpufleet.service.allocation.lease_sweep`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

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
    renewed_end,
)
from gpufleet.domain.states import Event, HostState
from gpufleet.errors import Conflict, InvalidTransition, NotFound
from gpufleet.service.allocation.candidates import CandidateRow, lock_and_recheck, write_lock
from gpufleet.service.core import fastread
from gpufleet.service.core.fastread import LeaseView as LeaseView
from gpufleet.service.core.fleet import Fleet, record_event
from gpufleet.service.core.lifecycle import transition
from gpufleet.service.core.select import is_explicit, nothing_matches, select_hosts
from gpufleet.store.repo import no_pool
from gpufleet.store.tables import Host, Lease, LeaseHost, Pool

# --- notifications: lease events are queued in the lease change's transaction (the outbox) --


def queue_webhook(s: Session, fleet: Fleet, kind: EventKind, lease: LeaseView) -> None:
    """Queue the lease event's webhook in the transaction ``s`` that makes the change (issue
    24: a change is never committed without its notification; see service/core/webhooks.py)."""
    from gpufleet.service.core import webhooks  # here: the reads need none of it

    webhooks.enqueue(s, fleet, kind.value, None, lease.as_dict())


# --- views ----------------------------------------------------------------------------------


def lease_view(lease: Lease) -> LeaseView:
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
        users=list(lease.users) if lease.users is not None else None,
    )


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


# --- reading leases ----------------------------------------------------------------------------


def get_lease(s: Session, lease_id: int, *, lock: bool = False) -> Lease:
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
                raise nothing_matches(selector, s)
            stmt = stmt.where(
                Lease.id.in_(select(LeaseHost.lease_id).where(LeaseHost.host_id.in_(ids)))
            )
        return [lease_view(lease) for lease in s.scalars(stmt)]


def show_lease(fleet: Fleet, lease_id: int) -> LeaseView:
    """One lease by id (NotFound, exit 4), read by the fast read layer
    (:func:`gpufleet.service.core.fastread.lease`, also the lean ``leases show``'s read)."""
    with fastread.fleet_read(fleet) as read:
        view = fastread.lease(read, lease_id)
    if view is None:
        raise NotFound(f"no lease {lease_id}")
    return view


def expiring(fleet: Fleet, within: timedelta, selector: str | None = None) -> list[LeaseView]:
    """Active leases whose expiry is within ``within`` from now (expired ones included)."""
    limit = fleet.now() + within
    return [
        lease
        for lease in list_leases(fleet, selector)
        if lease.state == LeaseState.ACTIVE.value and lease.ends_at <= limit
    ]


# --- renew, release ---------------------------------------------------------------------------


def check_owner(lease: Lease, owner: str | None, action: str) -> None:
    """``owner`` (when given) must be the lease's owner: Conflict (exit 6) otherwise."""
    if owner is not None and owner != lease.owner:
        raise Conflict(
            f"cannot {action} lease {lease.id}: it is owned by '{lease.owner}', not '{owner}'"
        )


def renew(
    fleet: Fleet,
    lease_id: int,
    *,
    duration: timedelta | None = None,
    until: datetime | None = None,
    owner: str | None = None,
    shorten: bool = False,
) -> LeaseView:
    """Extend a holding lease by ``duration`` from its current end, or move its end to
    ``until`` (an earlier end only with ``shorten``: :func:`~gpufleet.domain.leases.renewed_end`).

    Refusals: an unknown lease is NotFound (exit 4); an ended one InvalidTransition (5);
    ``owner`` given and not the lease's, or a reservation of another lease needing one of its
    hosts in the new window, Conflict (6); past the pool's longest lease or a bad window,
    ConfigError (2, a usage error)."""
    now = fleet.now()
    with fleet.db.session() as s:
        write_lock(s)
        lease = get_lease(s, lease_id, lock=True)
        if lease.state not in HOLDING:
            raise InvalidTransition(
                f"lease {lease_id}", lease.state.value, "renew", [v.value for v in sorted(HOLDING)]
            )
        check_owner(lease, owner, "renew")
        base = max(now, lease.starts_at)
        new_end = renewed_end(
            lease_id, lease.ends_at, now, duration=duration, until=until, shorten=shorten
        )
        pools = set(
            s.scalars(select(Host.pool).where(Host.id.in_([lh.host_id for lh in lease.hosts])))
        )
        end = None
        for pool in sorted(pools, key=lambda p: p or ""):
            _, end = lease_window(
                base, start=base, duration=None, until=new_end, policy=pool_policy(s, pool)
            )
        if end is None:
            _, end = lease_window(base, start=base, duration=None, until=new_end)
        chosen = [
            CandidateRow(lh.host_id, v or 0, None)
            for lh, v in s.execute(
                select(LeaseHost, Host.state_version)
                .join(Host, Host.id == LeaseHost.host_id)
                .where(LeaseHost.lease_id == lease.id)
            )
        ]
        try:
            lock_and_recheck(s, chosen, lease.ends_at, end, lease.id)
        except Conflict as exc:
            raise Conflict(
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
        view = lease_view(lease)
        queue_webhook(s, fleet, EventKind.LEASE_RENEWED, view)
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
    fleet: Fleet,
    lease_id: int,
    reason: str = "released by its owner",
    *,
    expired: bool = False,
    owner: str | None = None,
) -> Released:
    """End a lease: an active one's hosts go to ``reclaiming`` (then the reclaim checks, when
    installed); a reservation is cancelled (its hosts were never allocated). Refusals: unknown
    lease NotFound (exit 4), already ended InvalidTransition (5), ``owner`` given and not the
    lease's Conflict (6)."""
    now = fleet.now()
    with fleet.db.session() as s:
        lease = get_lease(s, lease_id, lock=True)
        if lease.state not in HOLDING:
            raise InvalidTransition(
                f"lease {lease_id}",
                lease.state.value,
                "release",
                [v.value for v in sorted(HOLDING)],
            )
        check_owner(lease, owner, "release")
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
        view = lease_view(lease)
        queue_webhook(s, fleet, EventKind.LEASE_RELEASED, view)
    out = Released(view, moved)
    if moved:
        out.reclaim, out.note = _reclaim(fleet, moved, lease_id, view.users)
    return out


def _reclaim(
    fleet: Fleet, hosts: list[str], lease_id: int, users: list[str] | None
) -> tuple[object | None, str | None]:
    """Hand the released hosts to the reclaim checks
    (:mod:`gpufleet.service.allocation.reclaim`)."""
    # here: reclaim reads hosts over SSH and imports collection; lease reads never need it
    from gpufleet.service.allocation import reclaim

    return reclaim.reclaim_hosts(fleet, hosts, lease_id=lease_id, lessee_users=users), None


# --- pool policy --------------------------------------------------------------------------------


def set_policy(
    fleet: Fleet, pool: str, on_expiry: OnExpiry, max_duration: timedelta | None = None
) -> LeasePolicy:
    """Set ``pool``'s lease policy (the pool must exist: enrolled from an inventory)."""
    with fleet.db.session() as s:
        row = s.scalar(select(Pool).where(Pool.name == pool).with_for_update())
        if row is None:
            raise no_pool(s, pool)
        current = pool_policy(s, pool)
        policy = LeasePolicy(on_expiry, max_duration or current.max_duration)
        row.lease_policy = {
            **(row.lease_policy or {}),  # the pool's reclaim cleanup (service/reclaim_policy)
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
