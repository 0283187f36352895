"""Read models of hosts for listings, ``hosts show``, the API and exporters."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Select, Text, cast, desc, func, select
from sqlalchemy.orm import Session

from gpufleet.domain.names import did_you_mean
from gpufleet.domain.states import HostState
from gpufleet.errors import NotFound
from gpufleet.service.core import fastread
from gpufleet.service.core.fastread import HostDetail as HostDetail
from gpufleet.service.core.fastread import HostView as HostView
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.core.select import (
    check_state,
    group_clause,
    is_explicit,
    model_clause,
    nothing_matches,
    select_hosts,
    selector_terms,
)
from gpufleet.service.views.summary import host_labels
from gpufleet.store.repo import execute_read, host_by_name, read_columns_only
from gpufleet.store.tables import (
    Event,
    FactSnapshot,
    Host,
)


def _view(h: Host, snap: FactSnapshot | None) -> HostView:
    return HostView(
        name=h.name,
        address=h.address,
        state=h.state,
        health=h.health,
        fault=h.fault,
        pool=h.pool,
        groups=list(h.groups),
        gpu_count=snap.gpu_count if snap else None,
        gpu_model=snap.gpu_model if snap else None,
        driver=snap.driver if snap else None,
        cuda=snap.cuda if snap else None,
        profiles=list(h.profiles),
        last_collected_at=h.last_collected_at,
        last_outcome=h.last_outcome,
        last_reason=h.last_reason,
        status_reason=h.status_reason,
        eta=h.eta if h.state in (HostState.MAINTENANCE, HostState.QUARANTINED) else None,
    )


#: What a listed host is read from: the host's own columns a row shows and its latest
#: snapshot's derived columns; never the facts document or the host's other JSON columns.
LIST_COLUMNS = (
    Host.name,
    Host.address,
    Host.state,
    Host.health,
    Host.fault,
    Host.pool,
    cast(Host.groups, Text).label("groups"),  # JSON text: decoded once per distinct list
    cast(Host.profiles, Text).label("profiles"),
    Host.last_collected_at,
    Host.last_outcome,
    Host.last_reason,
    Host.status_reason,
    Host.eta,
    FactSnapshot.gpu_count,
    FactSnapshot.gpu_model,
    FactSnapshot.driver,
    FactSnapshot.cuda,
)


def list_query(
    selector: str | None = None,
    *,
    group: str | None = None,
    model: str | None = None,
    state: str | None = None,
    pool: str | None = None,
    after: str | None = None,
    limit: int | None = None,
    indexed: bool = True,
) -> Select[*tuple[Any, ...]]:
    """The statement :func:`list_hosts` runs (also for its plan): the hosts ``selector``
    selects AND every given filter, :data:`LIST_COLUMNS`, by name, after ``after`` (keyset),
    at most ``limit``. On PostgreSQL a filtered page walks the name index and stops after
    ``limit`` rows (the model filter is an ``ILIKE``, whose selectivity the planner takes from
    the column's statistics; ``lower(...) LIKE`` has none and was planned as a sort of every
    match). ``indexed``: the snapshots' columns are read from their index alone
    (:func:`~gpufleet.store.repo.read_columns_only`, SQLite)."""
    stmt = (
        select(*LIST_COLUMNS)
        .outerjoin(FactSnapshot, FactSnapshot.id == Host.latest_snapshot_id)
        .order_by(Host.name)
    )
    if is_explicit(selector):
        stmt = stmt.where(Host.id.in_(select_hosts(selector).with_only_columns(Host.id)))
    if after is not None:
        stmt = stmt.where(Host.name > after)
    if group:
        stmt = stmt.where(group_clause(group))
    if model:
        stmt = stmt.where(model_clause(model))
    if state:
        stmt = stmt.where(Host.state == check_state(state))
    if pool:
        stmt = stmt.where(Host.pool == pool)
    if indexed:
        stmt = read_columns_only(stmt)
    return stmt if limit is None else stmt.limit(limit)


def list_hosts(
    fleet: Fleet,
    selector: str | None = None,
    *,
    group: str | None = None,
    model: str | None = None,
    state: str | None = None,
    pool: str | None = None,
    after: str | None = None,
    limit: int | None = None,
) -> list[HostView]:
    """Hosts matching the selector AND every given filter, by name; ``after`` and ``limit``
    page through them (keyset on the name: the hosts after that name, at most ``limit``)."""
    if not (group or model or state or pool or after is not None or limit is not None):
        with fastread.fleet_read(fleet) as read:  # the fast read layer (one implementation)
            fast = fastread.host_list(read, selector)
        if fast is not None:
            return fast
    args: dict[str, Any] = {
        "group": group, "model": model, "state": state, "pool": pool, "after": after,
        "limit": limit,
    }  # fmt: skip
    stmt = list_query(selector, **args)
    with fleet.db.session() as s:
        got = execute_read(s, stmt, list_query(selector, **args, indexed=False))
        lists: dict[str, list[str]] = {}
        rows = [fastread.host_view(r, lists) for r in got]
    if not rows and after is None and (is_explicit(selector) or group or model or state or pool):
        filters = [
            f"{k}:{v}"
            for k, v in (("group", group), ("model", model), ("state", state), ("pool", pool))
            if v
        ]
        text = " and ".join([selector or "all", *filters]) if filters else selector
        with fleet.db.session() as s:  # say which name is unknown, with the nearest known
            terms = [*selector_terms(selector), *([f"pool:{pool}"] if pool else [])]
            raise nothing_matches(text, s, terms=terms if filters else None)
    return rows


def show_host(fleet: Fleet, name: str, *, events: int = 15) -> HostDetail:
    """Facts, last collections, recent events, validation, labels and leases of one host:
    read by the fast read layer (:func:`gpufleet.service.core.fastread.host_detail`, also
    the lean start's read), the labels by :func:`~gpufleet.service.views.summary.host_labels`."""
    with fastread.fleet_read(fleet) as read:
        got = fastread.host_detail(read, name, events=events)
    if got is None:
        with fleet.db.session() as s:
            host_by_name(s, name)  # NotFound naming it, with the nearest known names
        raise NotFound(f"no host named '{name}'")  # it went as this ran
    detail = fastread.with_facts(*got)
    for hl in host_labels(fleet, detail.view.name):
        if hl.host == detail.view.name:
            detail.labels, detail.taints = hl.labels, [str(t) for t in hl.taints]
    return detail


def snapshot_count(fleet: Fleet, name: str) -> int:
    """How many fact snapshots (history) a host has."""
    with fleet.db.session() as s:
        return int(
            s.scalar(
                select(func.count(FactSnapshot.id))
                .join(Host, Host.id == FactSnapshot.host_id)
                .where(Host.name == name)
            )
            or 0
        )


def _unknown_host_name(s: Session, name: str) -> bool:
    """No host has ``name`` and no event (of a removed host) names it."""
    if s.scalar(select(Host.id).where(Host.name == name)) is not None:
        return False
    return s.scalar(select(Event.id).where(Event.host_name == name).limit(1)) is None


def list_events(
    fleet: Fleet,
    host: str | None = None,
    *,
    kind: str | None = None,
    limit: int = 50,
    since: datetime | None = None,
    until: datetime | None = None,
) -> list[dict[str, Any]]:
    """The newest events (audit log), optionally for one host and/or of one kind, at or
    after ``since`` and before ``until``."""
    stmt = select(Event).order_by(desc(Event.at), desc(Event.id)).limit(limit)
    if host:
        stmt = stmt.where(Event.host_name == host)
    if kind:
        stmt = stmt.where(Event.kind == kind)
    if since is not None:
        stmt = stmt.where(Event.at >= since)
    if until is not None:
        stmt = stmt.where(Event.at < until)
    with fleet.db.session() as s:
        rows = list(s.scalars(stmt))
        if host and not rows and _unknown_host_name(s, host):
            # a removed host keeps its events (and so is found); a typo is not "no events"
            near = did_you_mean(host, s.scalars(select(Host.name)))
            raise NotFound(f"no host named '{host}', and no events recorded for that name{near}")
        return [
            {
                "at": e.at,
                "actor": e.actor,
                "host": e.host_name,
                "kind": e.kind,
                "message": e.message,
                "data": e.data,
            }
            for e in rows
        ]
