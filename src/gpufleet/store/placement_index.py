"""Placement's per-rack summary (table ``placement_racks``), kept in step by every commit.

Placement on a large fleet reads this summary (a few hundred rows: per rack, how many
``available`` hosts with no open alarm of each fabric, GPU count, model, GPU memory and
profile set) instead of aggregating every candidate host, then reads only the hosts of the
rack(s) it picked (:func:`gpufleet.service.allocation.candidates.find_placement`).

Keeping it in step is not left to each writer: session events watch every transaction of a
database's own sessions (:func:`install`, called by :class:`gpufleet.store.db.Database` on the
sessionmaker it creates: no listener on SQLAlchemy's global ``Session`` class, no import for
its side effect).

* ``after_flush`` notes the hosts whose candidacy may have changed: a host added, removed or
  with a new state, rack, expected fabric, profiles, latest snapshot or usable GPU count; an
  alarm opened, closed or removed (its host).
* ``do_orm_execute`` does the same for UPDATE/INSERT/DELETE statements on ``hosts`` and
  ``alarms``: one that names its hosts (execution option ``gpufleet_hosts``, as
  :func:`gpufleet.service.core.lifecycle.transition` does) marks those; one that touches no
  watched column (a claim, the SQLite write lock) is ignored; any other marks the whole
  summary stale (its ``fleet`` row is deleted at commit, so the next placement reads every
  candidate and rebuilds it).
* ``before_commit`` rewrites the summary of the racks of the noted hosts from the hosts
  table, in the same transaction: rack rows are locked in rack order (PostgreSQL) before
  they are recomputed, after every host row the transaction locks, so two commits that
  touch one rack apply one after the other and neither computes from a stale read.

Fail closed: a writer that bypasses the ORM session (raw SQL on a connection) can leave a
rack's row stale. Placement never trusts it for a grant: it re-reads the hosts of every rack
it picks with every filter, re-plans when a rack's real count differs (a wrong summary costs
a re-read), and the write re-checks the chosen hosts under the lock.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Text,
    and_,
    cast,
    delete,
    event,
    exists,
    func,
    or_,
    select,
    update,
)
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import ORMExecuteState, Session, UOWTransaction, sessionmaker

from gpufleet.domain.events import AlarmKind, AlarmSeverity
from gpufleet.domain.placement import SummaryKey, summarize
from gpufleet.domain.roles import HostRole
from gpufleet.domain.states import HostState
from gpufleet.store.db import session_now
from gpufleet.store.tables import Alarm, FactSnapshot, Host, PlacementRack

#: Host columns whose change can change a host's candidacy or its summary entry.
WATCHED = frozenset(
    {"state", "rack", "expected", "profiles", "latest_snapshot_id", "usable_gpus", "name", "role"}
)
#: Alarm columns whose change can change whether it keeps its host out of placement.
ALARM_WATCHED = frozenset({"closed_at", "host_id", "kind", "severity"})
#: Alarm kinds whose warnings leave their host allocatable.
WARNING_KINDS = (AlarmKind.HEALTH, AlarmKind.RACK_MANIFEST, AlarmKind.RACK_DOMAIN,
                 AlarmKind.RACK_DRIFT)
#: Execution option of an UPDATE on ``hosts`` naming the host ids it changes.
HOSTS_OPTION = "gpufleet_hosts"
_INFO = "gpufleet.placement_index"
FLEET = "fleet"
RACK = "rack"


@dataclass
class _Dirty:
    hosts: set[int] = field(default_factory=set)
    racks: set[str] = field(default_factory=set)
    everything: bool = False
    rebuild: bool = False


def _dirty(s: Session) -> _Dirty:
    d = s.info.get(_INFO)
    if d is None:
        d = s.info[_INFO] = _Dirty()
    assert isinstance(d, _Dirty)
    return d


def want_rebuild(s: Session) -> None:
    """Rebuild the whole summary when this transaction commits (placement found none)."""
    _dirty(s).rebuild = True


# --- noting what changed ------------------------------------------------------------------


def _changed(obj: object, names: frozenset[str]) -> bool:
    attrs = sa_inspect(obj).attrs
    return any(attrs[n].history.has_changes() for n in names if n in attrs)


def _never_available(host: Host) -> bool:
    """The host is not ``available`` and was not before this flush (its state is loaded and
    unchanged): it is in no rack's summary before nor after, so nothing of it can change
    one (a collection storing an enrolled host's first snapshot, a maintenance host's)."""
    state = sa_inspect(host).attrs["state"].history
    if state.added or state.deleted or not state.unchanged:
        return False
    return all(v is not None and HostState(v) is not HostState.AVAILABLE for v in state.unchanged)


def _after_flush(s: Session, _ctx: UOWTransaction) -> None:
    d: _Dirty | None = None
    for obj in s.new:
        if isinstance(obj, Host) and obj.id is not None:
            d = d or _dirty(s)
            d.hosts.add(obj.id)
        elif isinstance(obj, Alarm) and obj.host_id is not None:
            d = d or _dirty(s)
            d.hosts.add(obj.host_id)
    for obj in s.dirty:
        if isinstance(obj, Host) and _changed(obj, WATCHED) and not _never_available(obj):
            d = d or _dirty(s)
            d.hosts.add(obj.id)
            for old in sa_inspect(obj).attrs["rack"].history.deleted or ():
                d.racks.add(old or "")
        elif isinstance(obj, Alarm) and _changed(obj, ALARM_WATCHED):
            d = d or _dirty(s)
            ids = sa_inspect(obj).attrs["host_id"].history
            d.hosts.update(i for i in (*ids.deleted, *ids.unchanged, *ids.added) if i)
    for obj in s.deleted:
        if isinstance(obj, Host):
            d = d or _dirty(s)
            d.racks.add(obj.rack or "")
        elif isinstance(obj, Alarm) and obj.host_id is not None:
            d = d or _dirty(s)
            d.hosts.add(obj.host_id)


def _values_keys(stmt: Any) -> set[str] | None:
    """The column names an UPDATE sets (None: cannot tell)."""
    values = getattr(stmt, "_values", None)
    if not values:
        return None
    keys: set[str] = set()
    for k in values:
        name = getattr(k, "key", k)
        if not isinstance(name, str):
            return None
        keys.add(name)
    return keys


def _on_execute(state: ORMExecuteState) -> None:
    if not (state.is_update or state.is_delete or state.is_insert):
        return
    mapper = state.bind_mapper
    target = mapper.class_ if mapper is not None else None
    if target is not Host and target is not Alarm:
        return
    d = _dirty(state.session)
    named = state.execution_options.get(HOSTS_OPTION)
    if named is not None:
        d.hosts.update(int(i) for i in named)
        return
    if target is Host and state.is_update:
        keys = _values_keys(state.statement)
        if keys is not None and not keys & WATCHED:
            return
    d.everything = True


def _after_rollback(s: Session) -> None:
    s.info.pop(_INFO, None)


def _before_commit(s: Session) -> None:
    s.flush()  # what is still pending notes its hosts (and takes its row locks first)
    if _INFO not in s.info:
        return
    d = s.info.pop(_INFO)
    assert isinstance(d, _Dirty)
    if d.everything:
        s.execute(delete(PlacementRack).where(PlacementRack.scope == FLEET))
        return
    if d.rebuild:
        rebuild(s)
        return
    racks = set(d.racks)
    if d.hosts:
        ids = sorted(d.hosts)
        for k in range(0, len(ids), 500):
            racks.update(
                r or "" for r in s.scalars(select(Host.rack).where(Host.id.in_(ids[k : k + 500])))
            )
    if racks:
        refresh(s, racks)



def install(sessions: sessionmaker[Session]) -> None:
    """Keep the summary in step with every session ``sessions`` makes (idempotent)."""
    if event.contains(sessions, "before_commit", _before_commit):
        return
    event.listen(sessions, "after_flush", _after_flush)
    event.listen(sessions, "do_orm_execute", _on_execute)
    event.listen(sessions, "after_rollback", _after_rollback)
    event.listen(sessions, "before_commit", _before_commit)


# --- writing the summary --------------------------------------------------------------------


def _insert_missing(s: Session, scope: str, racks: list[str]) -> None:
    if not racks:
        return
    now = session_now(s)
    rows = [{"scope": scope, "rack": r, "blocks": [], "refreshed_at": now} for r in racks]
    if s.get_bind().dialect.name == "postgresql":
        s.execute(postgresql.insert(PlacementRack).on_conflict_do_nothing(), rows)
    else:
        s.execute(sqlite.insert(PlacementRack).on_conflict_do_nothing(), rows)


def _lock(s: Session, scope: str, racks: list[str]) -> None:
    """Row-lock the rows (PostgreSQL; SQLite's one writer already holds the database)."""
    if s.get_bind().dialect.name != "postgresql":
        return
    for k in range(0, len(racks), 500):
        s.execute(
            select(PlacementRack.rack)
            .where(PlacementRack.scope == scope, PlacementRack.rack.in_(racks[k : k + 500]))
            .order_by(PlacementRack.rack)
            .with_for_update()
        )


def _rack_clause(racks: list[str]) -> Any:
    named = [r for r in racks if r]
    clauses: list[Any] = [Host.rack.in_(named)] if named else []
    if "" in racks:
        clauses += [Host.rack.is_(None), Host.rack == ""]
    return or_(*clauses)


def blocking_alarm() -> ColumnElement[bool]:
    """Open alarms that keep a host out of new allocations: all but a health rule's warning
    (issue 10: a warning from ``gpufleet inspect`` leaves the host allocatable; issue 27: so
    does a rack's manifest or domain warning, raised on the rack's first tray)."""
    return and_(
        Alarm.kind != AlarmKind.RACK_INCIDENT,  # restricts NVLink-domain placement only
        or_(Alarm.kind.not_in(WARNING_KINDS), Alarm.severity == AlarmSeverity.CRITICAL),
    )


def compute(s: Session, racks: list[str] | None) -> dict[str, list[list[Any]]]:
    """Every rack's summary entries from the hosts table (``racks`` None: the whole fleet)."""
    gpus = func.coalesce(Host.usable_gpus, FactSnapshot.gpu_count)
    memory = FactSnapshot.gpu_memory_mib  # every vendor's smallest (issue 15)
    alarmed = exists().where(Alarm.host_id == Host.id, Alarm.closed_at.is_(None), blocking_alarm())
    stmt = (
        select(
            Host.rack,
            func.coalesce(func.lower(Host.expected["fabric"].as_string()), ""),
            gpus,
            FactSnapshot.gpu_model,
            memory,
            Host.profiles,
        )
        .join(FactSnapshot, FactSnapshot.id == Host.latest_snapshot_id)
        .where(
            Host.state == HostState.AVAILABLE, gpus > 0, Host.role == HostRole.GPU.value, ~alarmed
        )
    )
    keys: dict[str, list[SummaryKey]] = {r: [] for r in racks or ()}
    chunks = [racks[k : k + 500] for k in range(0, len(racks), 500)] if racks else [None]
    for chunk in chunks:
        q = stmt if chunk is None else stmt.where(_rack_clause(chunk))
        for rack, fabric, n, model, mem, profiles in s.execute(q):
            key: SummaryKey = (fabric or "", int(n), model, mem, tuple(sorted(profiles or ())))
            keys.setdefault(rack or "", []).append(key)
    return {rack: summarize(ks) for rack, ks in keys.items()}


def _write(s: Session, blocks: dict[str, list[list[Any]]]) -> None:
    now = session_now(s)
    for rack, entries in blocks.items():
        s.execute(
            update(PlacementRack)
            .where(PlacementRack.scope == RACK, PlacementRack.rack == rack)
            .values(blocks=entries, refreshed_at=now)
            .execution_options(synchronize_session=False)
        )


def refresh(s: Session, racks: set[str]) -> None:
    """Rewrite the summary rows of ``racks`` from their hosts (rows locked first)."""
    ordered = sorted(racks)
    _insert_missing(s, RACK, ordered)
    _lock(s, RACK, ordered)
    _write(s, compute(s, ordered))


def rebuild(s: Session) -> None:
    """Rewrite the whole summary and mark it complete (its ``fleet`` row)."""
    _insert_missing(s, FLEET, [""])
    _lock(s, FLEET, [""])
    known = select(PlacementRack.rack).where(PlacementRack.scope == RACK)
    racks = sorted(
        {r or "" for r in s.scalars(select(Host.rack).distinct())} | set(s.scalars(known))
    )
    _insert_missing(s, RACK, racks)
    _lock(s, RACK, racks)
    fresh = compute(s, None)
    _write(s, {r: fresh.get(r, []) for r in racks})
    s.execute(
        update(PlacementRack)
        .where(PlacementRack.scope == FLEET)
        .values(refreshed_at=session_now(s))
        .execution_options(synchronize_session=False)
    )


# --- reading it -----------------------------------------------------------------------------


def _grouped(racks: Any) -> Any:
    """The rack rows grouped by identical entries: columns b (entries) and r (rack names)."""
    table = PlacementRack.__table__
    q = select(table.c.blocks.label("b"), racks.label("r")).where(table.c.scope == RACK)
    return q.group_by(table.c.blocks).subquery()


def read_summary(s: Session) -> list[tuple[str, list[list[Any]]]] | None:
    """Every rack's summary entries; None when the summary is not complete (no ``fleet``
    row: never built, or something changed hosts in a way nobody could attribute)."""
    table = PlacementRack.__table__
    # One JSON document, racks grouped by identical entries (a fleet has few kinds of rack):
    # [[entries, [rack, ...]], ...], decoded once.
    complete = exists().where(table.c.scope == FLEET)
    if s.get_bind().dialect.name == "postgresql":
        inner = _grouped(func.json_agg(table.c.rack))
        doc = func.json_agg(func.json_build_array(inner.c.b, inner.c.r))
    else:
        inner = _grouped(func.json_group_array(table.c.rack))
        doc = func.json_group_array(func.json_array(func.json(inner.c.b), func.json(inner.c.r)))
    text = s.connection().execute(select(cast(doc, Text)).add_columns(complete)).one()
    if not text[1]:
        return None
    out: list[tuple[str, list[list[Any]]]] = []
    for entries, names in json.loads(text[0]) if text[0] else []:
        if entries:
            out += [(rack, entries) for rack in names]
    return out
