"""Allocation: place a request and lease the hosts to an owner for a purpose and a window
(or reserve a future window). Leases once made (views, hooks, renew, release, policy) are
:mod:`gpufleet.service.allocation.leases`; starting reservations and expiring leases is
:mod:`gpufleet.service.allocation.lease_sweep`.

Placement itself is pure (:mod:`gpufleet.domain.placement`); this module reads the hosts
(:mod:`gpufleet.service.allocation.candidates`), runs it and writes the lease in one short
transaction that cannot hand a host out twice:

* **SQLite** (one writer): the transaction takes the write lock first (a no-op ``UPDATE``),
  so allocations run one after another and each sees the last one's lease.
* **PostgreSQL**: the chosen hosts are row-locked (``FOR UPDATE``, in id order), then
  re-checked (state version unchanged, no overlapping lease or reservation committed
  meanwhile); a host taken by a concurrent request raises :class:`Conflict` and the request
  is placed again from fresh reads (up to :data:`ATTEMPTS` times).

Both: the move to ``allocated`` goes through :func:`gpufleet.service.core.lifecycle.transition`
(compare-and-set on ``state_version``).
"""

from __future__ import annotations

import random
import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.domain.cuda import parse_cuda
from gpufleet.domain.events import EventKind
from gpufleet.domain.leases import LeasePolicy, LeaseState, lease_window
from gpufleet.domain.placement import Placement, Refusal, Request, explain
from gpufleet.domain.states import Event
from gpufleet.errors import ConfigError, Conflict
from gpufleet.service.allocation.candidates import (
    find_placement,
    host_views,
    lock_and_recheck,
    write_lock,
)
from gpufleet.service.allocation.leases import (
    LeaseView,
    lease_view,
    pool_policy,
    queue_webhook,
)
from gpufleet.service.core.fleet import Fleet, record_event
from gpufleet.service.core.lifecycle import transition
from gpufleet.service.core.policies import Policies
from gpufleet.service.core.select import is_explicit, nothing_matches
from gpufleet.store.tables import GpuRow, Host, Lease, LeaseHost

#: How often a request that lost a host to a concurrent one is placed again.
ATTEMPTS = 60


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


def _check_request(req: Request) -> None:
    if (req.gpus is None) == (req.hosts is None):
        raise ConfigError("give exactly one of --gpus N or --hosts M")
    size = req.gpus if req.gpus is not None else req.hosts
    if size is None or size < 1:
        raise ConfigError("--gpus / --hosts must be at least 1")
    if req.cuda is not None:
        parse_cuda(req.cuda)  # issue 26: a malformed --cuda is a usage error, not a refusal


#: A Slurm account (``sacctmgr add account``): no blanks, commas or ``=`` (scontrol's syntax).
_ACCOUNT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
#: A login name as useradd accepts it (portable set, at most 32 characters).
_USER = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,30}\$?")


def check_users(users: list[str] | None) -> list[str] | None:
    """The lessee's users, deduplicated in order; None when none were given. ConfigError
    naming a value that is not a login name."""
    if not users:
        return None
    for u in users:
        if not _USER.fullmatch(u):
            raise ConfigError(f"--user '{u}': not a login name (letters, digits, _ . -)")
    return list(dict.fromkeys(users))


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
    users: list[str] | None = None,
    account: str | None = None,
) -> Allocation:
    """Place ``req`` and lease the hosts to ``owner`` (or reserve them when ``start`` is in
    the future). ``users``: the lessee's login users, recorded on the lease for reclaim (and
    admitted by its Slurm reservation); ``account``: the Slurm account (project) whose jobs
    the lease's reservation admits, kept in the lease's ``request``. A request that cannot
    be met returns the refusal with its counts."""
    _check_request(req)
    Policies(fleet).check_profile(req.profile)  # a typo is not "no host validated for it"
    lessees = check_users(users)
    if account is not None and not _ACCOUNT.fullmatch(account):
        raise ConfigError(f"--account '{account}': not a Slurm account name (letters, "
                          "digits, _ . -; at most 64)")
    if not owner.strip() or not purpose.strip():
        raise ConfigError("--owner and --purpose must not be empty")
    for attempt in range(ATTEMPTS):
        try:
            result = _allocate_once(
                fleet, req, owner, purpose, duration, until, start, selector, lessees, account
            )
            break
        except Conflict:
            if attempt == ATTEMPTS - 1:
                raise
            time.sleep(random.uniform(0.0, 0.02))
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
    users: list[str] | None = None,
    account: str | None = None,
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
                raise nothing_matches(selector, s)
            return Allocation(refusal=explain(req, everything))
        chosen = [index[n] for n in placement.hosts]
        for pool in sorted({r.pool or "" for r in chosen}):
            policy = pool_policy(s, pool or None)
            lease_window(now, start=begin, duration=None, until=end, policy=policy)
        hosts = lock_and_recheck(s, chosen, begin, end, None)
        uuids = _gpu_uuids(s, hosts)
        gpus = {v.name: v.gpus for v in views}
        active = begin <= now
        lease = Lease(
            owner=owner,
            purpose=purpose,
            actor=fleet.actor,
            state=LeaseState.ACTIVE if active else LeaseState.RESERVED,
            request={**_fields(req), "selector": selector}
            | ({"account": account} if account else {}),
            created_at=now,
            starts_at=begin,
            ends_at=end,
            users=users,
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
        view = lease_view(lease)
        kind = EventKind.LEASE_GRANTED if active else EventKind.LEASE_RESERVED
        queue_webhook(s, fleet, kind, view)
        return Allocation(lease=view, placement=placement)


def _fields(req: Request) -> dict[str, Any]:
    return {
        "gpus": req.gpus,
        "hosts": req.hosts,
        "model": req.model,
        "min_gpu_memory_mib": req.min_gpu_memory_mib,
        "fabric": req.fabric,
        "profile": req.profile,
        "cuda": req.cuda,
        "nvl_domain": req.nvl_domain,
    }
