"""Reading the fleet for placement.

* :func:`find_placement` is what ``allocate`` runs: every filter of a candidate (state, model,
  GPU memory, fabric, profile, selector, no open alarm, no overlapping lease or reservation)
  is SQL; one ``GROUP BY`` counts the candidates per (rack, fabric, GPU count); the pure
  :func:`gpufleet.domain.placement.plan_blocks` says which blocks placement needs (the best
  fitting rack, or every rack of a fabric when no single rack holds the request); only those
  hosts are read and placed. The result is exactly ``place`` over every candidate.
* :func:`host_views` reads every host of a selection with its facts, alarms and leases: the
  refusal explanation and ``gpufleet capacity`` (slower; never on a granted request's path).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    String,
    Text,
    and_,
    cast,
    exists,
    false,
    func,
    null,
    or_,
    select,
    type_coerce,
    update,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Session

from gpufleet.domain.placement import (
    Block,
    BlockPlan,
    HostView,
    Placement,
    Request,
    place,
    plan_blocks,
    summary_blocks,
)
from gpufleet.domain.roles import HostRole
from gpufleet.domain.states import HostState
from gpufleet.errors import Conflict
from gpufleet.service.core.select import is_explicit, select_hosts
from gpufleet.store.placement_index import blocking_alarm, read_summary, want_rebuild
from gpufleet.store.repo import execute_read, read_columns_only
from gpufleet.store.tables import Alarm, FactSnapshot, Host, LeaseHost


@dataclass
class CandidateRow:
    """What the write needs of a placed host: its id, state version and pool."""

    id: int
    version: int
    pool: str | None


def write_lock(s: Session) -> None:
    """SQLite: take the database's write lock now (a no-op UPDATE), so that everything this
    transaction reads stays true until it commits. PostgreSQL: nothing (row locks instead)."""
    if s.get_bind().dialect.name == "sqlite":
        s.execute(update(Host).where(Host.id == -1).values(state_version=Host.state_version))


_STATES = {s.value: s for s in HostState}


def _fabric() -> ColumnElement[Any]:
    fabric: ColumnElement[Any] = Host.expected["fabric"].as_string()
    return fabric


def _gpus() -> ColumnElement[Any]:
    """The GPUs a host offers: a partial host's usable count (issue 10, GPU-level health),
    else every GPU of its latest snapshot."""
    return func.coalesce(Host.usable_gpus, FactSnapshot.gpu_count)


def _block_fabric() -> ColumnElement[Any]:
    """The fabric as placement groups it: lower-cased, '' when unset."""
    return func.coalesce(func.lower(_fabric()), "")


def _min_memory() -> Any:
    """The smallest accelerator memory of the host's latest snapshot (NULL when none is
    known): its derived column, every vendor's (issue 15; NVIDIA's equals the GPU rows')."""
    return FactSnapshot.gpu_memory_mib


def _has_profile(s: Session, profile: str) -> ColumnElement[bool]:
    """``profile`` is in ``hosts.profiles`` (the JSON list validation writes; no copy)."""
    if s.get_bind().dialect.name == "postgresql":
        return type_coerce(Host.profiles, JSONB).contains([profile])
    each = func.json_each(Host.profiles).table_valued("value").alias("hp")
    return exists(select(1).select_from(each).where(each.c.value == profile))


def candidate_filters(
    s: Session, req: Request, selector: str | None, start: datetime, end: datetime, now: datetime
) -> list[ColumnElement[bool]]:
    """SQL for :func:`gpufleet.domain.placement.allocatable` over ``hosts`` joined to their
    latest snapshot, for the window [start, end)."""
    free: ColumnElement[bool] = Host.state == HostState.AVAILABLE
    if start > now:  # allocated now, its lease over before the window starts
        ending = exists().where(
            LeaseHost.host_id == Host.id,
            LeaseHost.holding,
            LeaseHost.starts_at <= now,
            LeaseHost.ends_at <= start,
        )
        free = or_(free, and_(Host.state == HostState.ALLOCATED, ending))
    # Only GPU nodes are GPU capacity (issue 26 item 9: cpu/storage hosts never are).
    out: list[ColumnElement[bool]] = [free, _gpus() > 0, Host.role == HostRole.GPU.value]
    if is_explicit(selector):
        out.append(Host.id.in_(select_hosts(selector).with_only_columns(Host.id).order_by(None)))
    if req.model:
        out.append(func.lower(FactSnapshot.gpu_model).contains(req.model.lower(), autoescape=True))
    if req.min_gpu_memory_mib:
        out.append(_min_memory() >= req.min_gpu_memory_mib)
    if req.fabric:
        out.append(func.lower(_fabric()) == req.fabric.lower())
    if req.profile:
        out.append(_has_profile(s, req.profile))
    if req.cuda:  # issue 26: no driver collected serves no CUDA (the version is read below)
        out.append(FactSnapshot.driver.is_not(None))
    if req.nvl_domain:  # issue 27: members of an NVLink domain that no rack incident restricts
        out += [Host.nvl_domain.is_not(None), Host.nvl_restricted.is_(None)]
    out.append(
        Host.id.not_in(
            select(Alarm.host_id).where(
                Alarm.closed_at.is_(None), Alarm.host_id.is_not(None), blocking_alarm()
            )
        )
    )
    out.append(
        Host.id.not_in(
            select(LeaseHost.host_id).where(
                LeaseHost.holding,
                LeaseHost.starts_at < end,
                LeaseHost.ends_at > start,
                LeaseHost.host_id.is_not(None),
            )
        )
    )
    return out


def _block_columns(req: Request | None) -> tuple[Any, Any]:
    """What a block is: (rack, fabric); for an NVLink-domain request (domain, domain)."""
    if req is not None and req.nvl_domain:
        return Host.nvl_domain, Host.nvl_domain
    return Host.rack, _block_fabric()


def candidate_blocks(
    s: Session, filters: list[ColumnElement[bool]], req: Request | None = None,
    firsts: dict[Block, str] | None = None,
) -> dict[Block, Counter[int]]:
    """How many candidate hosts of each GPU count every (rack, fabric) block has (every
    NVLink domain for an ``nvl_domain`` request). ``firsts``: filled with each block's
    smallest candidate host name, read by the same scan (:func:`_first_domain`)."""
    rack, fabric = _block_columns(req)
    first = func.min(Host.name) if firsts is not None else null()
    stmt = (
        select(rack, fabric, _gpus(), func.count(), first)
        .join(FactSnapshot, FactSnapshot.id == Host.latest_snapshot_id)
        .where(*filters)
        .group_by(rack, fabric, _gpus())
    )
    out: dict[Block, Counter[int]] = {}
    for rack, fab, gpus, n, name in s.execute(stmt):
        block = (rack or "", fab or "")
        out.setdefault(block, Counter())[gpus or 0] += n
        if firsts is not None and (block not in firsts or name < firsts[block]):
            firsts[block] = name
    return out


def _block_clause(racks: set[str], column: Any) -> ColumnElement[bool]:
    named = sorted(r for r in racks if r)
    clauses: list[ColumnElement[bool]] = [column.in_(named)] if named else []
    if "" in racks:
        clauses += [column.is_(None), column == ""]
    return or_(false(), *clauses)


def candidate_views(
    s: Session,
    req: Request,
    filters: list[ColumnElement[bool]],
    *,
    racks: frozenset[Block] = frozenset(),
    fabrics: frozenset[str] = frozenset(),
) -> tuple[list[HostView], dict[str, CandidateRow]]:
    """The candidates of the given blocks (filters from :func:`candidate_filters`)."""
    cols: list[Any] = [
        Host.id,
        Host.name,
        type_coerce(Host.state, String),
        Host.state_version,
        Host.rack,
        Host.pool,
        _fabric(),
        Host.profiles,
        _gpus(),
        FactSnapshot.gpu_model,
        FactSnapshot.driver,
        Host.nvl_domain,
    ]
    if req.min_gpu_memory_mib:
        cols.append(_min_memory())
    stmt = (
        select(*cols).join(FactSnapshot, FactSnapshot.id == Host.latest_snapshot_id).where(*filters)
    )
    rack_col, fabric_col = _block_columns(req)
    if racks:
        stmt = stmt.where(_block_clause({r for r, _ in racks}, rack_col))
    if fabrics:
        stmt = stmt.where(fabric_col.in_(sorted(fabrics)))
    views: list[HostView] = []
    index: dict[str, CandidateRow] = {}
    for row in s.execute(stmt):
        hid, name, state, version, rack, pool, fabric, profiles, gpus, model, driver, nvl = row[:12]
        view = HostView(
            name=name,
            state=_STATES[state],
            gpus=gpus or 0,
            model=model,
            gpu_memory_mib=row[12] if req.min_gpu_memory_mib else None,
            rack=rack,
            fabric=fabric,
            pool=pool,
            profiles=frozenset(profiles or ()),
            free_by_start=state == HostState.ALLOCATED.value,
            driver=driver,
            nvl_domain=nvl,
        )
        key = (nvl or "", nvl or "") if req.nvl_domain else (rack or "", (fabric or "").lower())
        if racks and key not in racks:
            continue  # the rack's hosts on another fabric: another block
        views.append(view)
        index[name] = CandidateRow(hid, version or 0, pool)
    return views, index


#: How many times placement re-plans after a rack read from the summary proved different.
REREADS = 8


def find_placement(
    s: Session, req: Request, selector: str | None, start: datetime, end: datetime, *, now: datetime
) -> tuple[Placement | None, list[HostView], dict[str, CandidateRow]]:
    """Place ``req`` for [start, end) reading only the blocks placement needs (see the
    module). None: it cannot be placed (explain it with :func:`host_views`)."""
    filters = candidate_filters(s, req, selector, start, end, now)
    if req.cuda or req.nvl_domain:
        # issue 27: NVLink-domain blocks are not the summary's racks: one GROUP BY by domain
        if not req.cuda:
            return place_exact(s, req, filters)
        # issue 26: the driver gate is a version comparison SQL does not make: every
        # candidate is read and placement (allocatable) leaves out the drivers that
        # cannot serve it
        views, index = candidate_views(s, req, filters)
        return place(req, views), views, index
    summary = None
    if start <= now and not is_explicit(selector):
        summary = read_summary(s)
        if summary is None:
            want_rebuild(s)
    if summary is not None:
        got = _place_from_summary(s, req, filters, summary_blocks(req, summary))
        if got is not None:
            return got
    return place_exact(s, req, filters)


def place_exact(
    s: Session, req: Request, filters: list[ColumnElement[bool]]
) -> tuple[Placement | None, list[HostView], dict[str, CandidateRow]]:
    """One GROUP BY over every candidate, then the hosts of the blocks placement needs."""
    firsts: dict[Block, str] | None = {} if req.nvl_domain else None
    blocks = candidate_blocks(s, filters, req, firsts)
    plan = plan_blocks(req, blocks)
    if plan is None:
        return None, [], {}
    if req.nvl_domain and len(plan.racks) > 1:
        plan = BlockPlan(racks=_first_domain(plan.racks, blocks, firsts or {}))
    views, index = candidate_views(s, req, filters, racks=plan.racks, fabrics=plan.fabrics)
    placement = place(req, views)
    if placement is None:  # SQL and Python disagreed on a filter (never seen): read them all
        views, index = candidate_views(s, req, filters)
        placement = place(req, views)
    return placement, views, index


def _first_domain(
    tied: frozenset[Block], blocks: dict[Block, Counter[int]], firsts: dict[Block, str]
) -> frozenset[Block]:
    """Issue 27: of NVLink domains that tie on the score, the one ``place`` chooses by host
    name, without reading their hosts: where every tied domain's trays have one GPU count,
    ``place`` takes each domain's first trays by name, so the domain holding the smallest
    candidate name (``firsts``, read with the blocks) wins (otherwise all stay tied and are
    read)."""
    if any(len(+blocks[b]) != 1 for b in tied) or not all(b in firsts for b in tied):
        return tied
    return frozenset({min(tied, key=lambda b: firsts[b])})


def _place_from_summary(
    s: Session,
    req: Request,
    filters: list[ColumnElement[bool]],
    blocks: dict[Block, Counter[int]],
) -> tuple[Placement, list[HostView], dict[str, CandidateRow]] | None:
    """Plan on the summary's counts, read the planned racks' hosts with every filter; when a
    rack's real candidates differ from its summary (a reservation in the window, a stale
    row), correct its count and plan again. None: no placement this way (the caller reads
    every candidate: a refusal is only ever given on the exact counts)."""
    read: dict[Block, tuple[list[HostView], dict[str, CandidateRow]]] = {}
    for _ in range(REREADS):
        plan = plan_blocks(req, blocks)
        if plan is None:
            return None
        if plan.fabrics:  # no single rack holds it: every candidate of the fabric, exactly
            views, index = candidate_views(s, req, filters, fabrics=plan.fabrics)
            placement = place(req, views)
            return None if placement is None else (placement, views, index)
        unread = plan.racks - read.keys()
        if unread:
            views, index = candidate_views(s, req, filters, racks=frozenset(unread))
            real: dict[Block, Counter[int]] = {b: Counter() for b in unread}
            for b in unread:
                read[b] = ([], {})
            for v in views:
                b = (v.rack or "", (v.fabric or "").lower())
                real[b][v.gpus] += 1
                read[b][0].append(v)
                read[b][1][v.name] = index[v.name]
            stale = False
            for b, counts in real.items():
                if +counts != +blocks.get(b, Counter()):
                    stale = True
                    if counts:
                        blocks[b] = counts
                    else:
                        blocks.pop(b, None)
            if stale:
                continue
        views = [v for b in sorted(plan.racks) for v in read[b][0]]
        index = {n: r for b in plan.racks for n, r in read[b][1].items()}
        placement = place(req, views)
        return None if placement is None else (placement, views, index)
    return None


def host_views(
    s: Session,
    req: Request,
    selector: str | None,
    start: datetime,
    end: datetime,
    *,
    now: datetime,
    candidates_only: bool,
) -> tuple[list[HostView], dict[str, CandidateRow]]:
    """Every host of ``selector`` as placement sees it for the window [start, end):
    ``candidates_only`` reads only hosts that could be free then (available, or allocated
    when the window starts later)."""
    cols = [
        Host.id,
        Host.name,
        type_coerce(Host.state, String),  # the raw value: 10,000 rows, one enum lookup each
        Host.state_version,
        Host.rack,
        Host.pool,
        Host.expected["fabric"].as_string(),
        cast(Host.profiles, Text),  # decoded once per distinct list below
        Host.eta,
        _gpus(),
        FactSnapshot.gpu_model,
        FactSnapshot.driver,
        # read only when asked: every other snapshot column here is in the snapshot index
        _min_memory() if req.min_gpu_memory_mib else null(),
        Host.nvl_domain,
        Host.nvl_restricted,
    ]
    stmt = (
        select(*cols)
        .outerjoin(FactSnapshot, FactSnapshot.id == Host.latest_snapshot_id)
        .where(Host.role == HostRole.GPU.value)  # cpu/storage nodes are no GPU capacity
    )
    if is_explicit(selector):
        ids = select_hosts(selector).with_only_columns(Host.id).order_by(None)
        stmt = stmt.where(Host.id.in_(ids))
    if candidates_only:
        states = [HostState.AVAILABLE]
        if start > now:
            states.append(HostState.ALLOCATED)
        stmt = stmt.where(Host.state.in_(states))
    if req.model:
        stmt = stmt.where(func.lower(FactSnapshot.gpu_model).contains(req.model.lower()))
    # issue 8: the snapshots' columns from their index alone (on SQLite a snapshot row's
    # facts document sits before them), the rows as plain Core rows
    rows = (
        s.execute(stmt).all()
        if req.min_gpu_memory_mib
        else execute_read(s, read_columns_only(stmt), stmt)
    )
    alarmed = set(
        s.scalars(select(Alarm.host_id).where(Alarm.closed_at.is_(None), blocking_alarm()))
    )
    busy: dict[int, datetime] = {
        hid: until
        for hid, until in s.execute(
            select(LeaseHost.host_id, func.max(LeaseHost.ends_at))
            .where(LeaseHost.holding, LeaseHost.starts_at < end, LeaseHost.ends_at > start)
            .group_by(LeaseHost.host_id)
        )
    }
    ending: set[int] = set()
    if start > now:
        ending = set(
            s.scalars(
                select(LeaseHost.host_id).where(
                    LeaseHost.holding, LeaseHost.starts_at <= now, LeaseHost.ends_at <= start
                )
            )
        )
    views: list[HostView] = []
    index: dict[str, CandidateRow] = {}
    profile_sets: dict[str | None, frozenset[str]] = {None: frozenset()}
    for row in rows:
        hid, name, state, version, rack, pool, fabric, text, eta, gpus, model, drv, mem = row[:13]
        st = _STATES[state]
        profiles = profile_sets.get(text)
        if profiles is None:
            profiles = profile_sets[text] = frozenset(json.loads(text) or ())
        views.append(
            HostView(
                name=name,
                state=st,
                gpus=gpus or 0,
                model=model,
                gpu_memory_mib=mem if req.min_gpu_memory_mib else None,
                rack=rack,
                fabric=fabric,
                pool=pool,
                profiles=profiles,
                alarm=hid in alarmed,
                busy_until=busy.get(hid),
                eta=eta if st in (HostState.MAINTENANCE, HostState.QUARANTINED) else None,
                free_by_start=st is HostState.ALLOCATED and hid in ending and hid not in busy,
                driver=drv,
                nvl_domain=row[13],
                nvl_restricted=row[14] is not None,
            )
        )
        index[name] = CandidateRow(hid, version or 0, pool)
    return views, index


def lock_and_recheck(
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
