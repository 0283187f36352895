"""Shared queries: the few reads every use case needs, spelled once.

Services call these inside their own transaction (the session is theirs); nothing here opens
a transaction, commits or does network I/O. Selectors are built by
:mod:`gpufleet.service.core.select`; the functions here take the resulting ``SELECT`` of hosts.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol

from sqlalchemy import Column, ColumnElement, Row, Select, Table, Text, cast, desc, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import Session, defer
from sqlalchemy.sql import visitors
from sqlalchemy.sql.compiler import SQLCompiler

from gpufleet.domain.events import EventKind
from gpufleet.domain.facts import HostFacts
from gpufleet.domain.names import did_you_mean
from gpufleet.domain.spec import Baseline
from gpufleet.errors import NotFound
from gpufleet.store.readmodel import baseline_name
from gpufleet.store.tables import BaselineRow, Event, FactLabelSet, FactSnapshot, Host, Pool


def host_by_name(s: Session, name: str, *, for_update: bool = False) -> Host:
    """The host called ``name`` (row-locked with ``for_update``); :class:`NotFound` (exit 4)
    naming it otherwise."""
    stmt = select(Host).where(Host.name == name)
    if for_update:
        stmt = stmt.with_for_update()
    host = s.scalar(stmt)
    if host is None:
        raise no_host(s, name)
    return host


def known_pools(s: Session) -> set[str]:
    """Every pool name: the pools' rows and the pools hosts name."""
    return set(s.scalars(select(Pool.name))) | {
        p for p in s.scalars(select(Host.pool).distinct()) if p
    }


def no_pool(s: Session, name: str, known: set[str] | None = None) -> NotFound:
    """NotFound (exit 4) for the pool ``name``, with the nearest known names."""
    pools = known_pools(s) if known is None else known
    return NotFound(f"no pool named '{name}'{did_you_mean(name, pools)}")


def no_baseline(s: Session, name: str) -> NotFound:
    """NotFound (exit 4) for the baseline ``name``, with the nearest known names."""
    near = did_you_mean(name, s.scalars(select(BaselineRow.name)))
    return NotFound(f"no baseline named '{name}'{near}")


def no_host(s: Session, name: str) -> NotFound:
    """NotFound (exit 4) for the host ``name``, with the nearest known names."""
    return NotFound(f"no host named '{name}'{did_you_mean(name, s.scalars(select(Host.name)))}")


def hosts_with_latest_facts(
    s: Session,
    hosts: Select[Host],
    *where: ColumnElement[bool],
    limit: int | None = None,
    facts: bool = True,
) -> list[tuple[Host, FactSnapshot | None]]:
    """Each host ``hosts`` selects (e.g. ``select_hosts(selector)``) with its latest good
    snapshot (None before the first collection), by name (the first ``limit`` of them).
    ``where`` adds clauses that may name either table (e.g. a model filter on
    :class:`FactSnapshot`). ``facts=False`` leaves the facts document unread (the snapshot's
    derived columns only: GPU count/model/memory, driver, CUDA, kernel, OS), for reads that
    must not decode every host's facts; :func:`latest_facts` reads them in batches."""
    stmt = latest_facts_query(hosts, *where, limit=limit, facts=facts)
    return [(h, snap) for h, snap in s.execute(stmt)]


def latest_facts_query(
    hosts: Select[Host],
    *where: ColumnElement[bool],
    limit: int | None = None,
    facts: bool = True,
) -> Select[Host, FactSnapshot]:
    """The statement :func:`hosts_with_latest_facts` runs (for its plan, too)."""
    ids = hosts.with_only_columns(Host.id).order_by(None)
    stmt = (
        select(Host, FactSnapshot)
        .outerjoin(FactSnapshot, FactSnapshot.id == Host.latest_snapshot_id)
        .where(Host.id.in_(ids), *where)
        .order_by(Host.name)
    )
    if not facts:
        stmt = stmt.options(defer(FactSnapshot.facts, raiseload=True))
    if limit is not None:
        stmt = stmt.limit(limit)
    return stmt


#: The index of the snapshot columns fleet-wide reads take (migrations 0016, 0017).
READ_COLUMNS_INDEX = "ix_fact_snapshots_read_columns"
#: Those columns: a read that takes only these (and the hosts') reads the index alone.
READ_COLUMNS = frozenset({"id", "gpu_count", "gpu_model", "driver", "cuda", "fact_labels_id"})


@compiles(Table, "sqlite")
def _sqlite_table(element: Table, compiler: SQLCompiler, **kw: Any) -> str:
    """A table in a FROM clause on SQLite, with its ``INDEXED BY`` hint when the statement
    gives one (``with_hint(table, "INDEXED BY ix", "sqlite")``; SQLAlchemy renders no
    table hint for SQLite by itself)."""
    text: str = compiler.visit_table(element, **kw)  # type: ignore[no-untyped-call]
    hint = (kw.get("fromhints") or {}).get(element)
    if hint and kw.get("asfrom") and not kw.get("ashint") and hint.startswith("INDEXED BY "):
        text += " " + hint
    return text


def read_columns_only(stmt: Select[*tuple[Any, ...]]) -> Select[*tuple[Any, ...]]:
    """``stmt`` (which joins :class:`FactSnapshot` and reads only :data:`READ_COLUMNS` of it)
    reading the snapshots from :data:`READ_COLUMNS_INDEX` alone. SQLite's planner looks a
    snapshot up by its rowid, and a snapshot row holds its facts document (~36 KB: ~9
    overflow pages) before these columns, so each host's read walked them (issue 8:
    ~0.3 s at 12,500 hosts); PostgreSQL keeps the document out of line and plans freely."""
    return stmt.with_hint(FactSnapshot, f"INDEXED BY {READ_COLUMNS_INDEX}", "sqlite")


def execute_read(
    s: Session, stmt: Select[*tuple[Any, ...]], plain: Select[*tuple[Any, ...]]
) -> Sequence[Row[*tuple[Any, ...]]]:
    """The rows of ``stmt`` (:func:`read_columns_only`), or of ``plain`` (the same without
    the index) on a SQLite database without the index (a schema before 0016, which only
    tests that migrate down read). Run on the session's connection as a Core statement:
    plain rows of columns need none of the ORM's per-row loading (~0.1 s at 12,500 hosts)."""
    conn = s.connection()
    try:
        return conn.execute(stmt).all()
    except OperationalError as exc:
        if conn.dialect.name != "sqlite" or "no such index" not in str(exc):
            raise
    return conn.execute(plain).all()


def latest_columns(
    s: Session, hosts: Select[Host], *columns: ColumnElement[Any] | Any
) -> Sequence[Row[*tuple[Any, ...]]]:
    """``columns`` (of :class:`Host` and of its latest snapshot, :class:`FactSnapshot`: NULL
    before the first collection) of each host ``hosts`` selects, by name: plain rows, no ORM
    object and no column the caller did not name, for fleet-wide reads (issue 8: a
    ``Host`` row carries six JSON documents, a snapshot its facts). When every snapshot
    column named is one of :data:`READ_COLUMNS`, the snapshots are read from their index
    alone (:func:`read_columns_only`); a snapshot's labels' facts are its
    ``fact_labels_id``, the few values read once (:func:`label_set_texts`)."""
    ids = hosts.with_only_columns(Host.id).order_by(None)
    stmt = (
        select(*columns)
        .select_from(Host)
        .outerjoin(FactSnapshot, FactSnapshot.id == Host.latest_snapshot_id)
        .where(Host.id.in_(ids))
        .order_by(Host.name)
    )
    if _columns_of(columns, FactSnapshot.__table__) <= READ_COLUMNS:
        return execute_read(s, read_columns_only(stmt), stmt)
    return s.connection().execute(stmt).all()


def _columns_of(columns: Sequence[Any], table: Any) -> set[str]:
    """Names of the columns of ``table`` that ``columns`` (selected expressions) read."""
    names: set[str] = set()
    for c in columns:
        expr = c.__clause_element__() if hasattr(c, "__clause_element__") else c
        for el in visitors.iterate(expr):
            if isinstance(el, Column) and el.table is table:
                names.add(el.name)
    return names


def label_set_digest(value: Mapping[str, Any]) -> str:
    """The :attr:`FactLabelSet.digest` of ``value`` (a ``domain.labels.fact_labels``
    value): SHA-256 of its canonical JSON text (keys sorted, no spaces), so equal values
    have one set whatever their key order (migration 0017 backfills with the same)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def label_set_texts(s: Session, ids: Iterable[int | None]) -> dict[int, str]:
    """The JSON text of each :class:`FactLabelSet` of ``ids`` (None ignored), by id: what a
    fleet-wide read joins to its snapshots' ``fact_labels_id`` (a fleet has a few sets; one
    read of them instead of a 1.4 KB text per host, issue 8)."""
    wanted = {i for i in ids if i is not None}
    if not wanted:
        return {}
    stmt = select(FactLabelSet.id, cast(FactLabelSet.value, Text)).where(
        FactLabelSet.id.in_(wanted)
    )
    return {i: t for i, t in s.connection().execute(stmt)}


def label_set_id(s: Session, value: Mapping[str, Any]) -> int:
    """The id of the :class:`FactLabelSet` holding ``value``, inserted when there is none
    yet (issue 8: a snapshot refers to its labels' value, stored once per distinct value).
    Safe with several writers: the insert does nothing when another transaction holds or
    committed the same digest (PostgreSQL waits for that one to end), and the set is then
    read back; sets are never updated nor deleted, so the id stays valid."""
    digest = label_set_digest(value)
    by_digest = select(FactLabelSet.id).where(FactLabelSet.digest == digest)
    got = s.scalar(by_digest)
    if got is not None:
        return got
    dialect = s.get_bind().dialect.name
    ins = (postgresql if dialect == "postgresql" else sqlite).insert(FactLabelSet)
    s.execute(
        ins.values(digest=digest, value=dict(value)).on_conflict_do_nothing(
            index_elements=[FactLabelSet.digest]
        )
    )
    return s.execute(by_digest).scalar_one()


#: Facts documents decoded at once by :func:`latest_facts` (memory stays bounded).
FACTS_BATCH = 200


def latest_facts(s: Session, snapshot_ids: Sequence[int]) -> Iterator[tuple[int, HostFacts]]:
    """(snapshot id, its facts) for ``snapshot_ids``, read and decoded :data:`FACTS_BATCH`
    at a time, so a caller that uses each and lets it go holds one batch at most."""
    for i in range(0, len(snapshot_ids), FACTS_BATCH):
        chunk = snapshot_ids[i : i + FACTS_BATCH]
        rows = s.execute(
            select(FactSnapshot.id, FactSnapshot.facts).where(FactSnapshot.id.in_(chunk))
        ).all()
        for sid, doc in rows:
            yield sid, HostFacts.model_validate(doc)


#: A host's own ``gpufleet_baseline`` variable (NULL when not set), read in SQL: fleet-wide
#: reads need it to find each host's baseline and need nothing else of ``vars`` (issue 8).
OWN_BASELINE = Host.vars["gpufleet_baseline"].as_string().label("own_baseline")


class FollowsBaseline(Protocol):
    """What the baseline a host follows is read from (a :class:`Host`, or a row of its
    ``vars`` and ``pool`` columns)."""

    @property
    def vars(self) -> Mapping[str, Any]: ...
    @property
    def pool(self) -> str | None: ...


class Baselines:
    """:func:`baseline_name_for_host` and :func:`baseline_for_host` for many hosts in one
    session: the pools and each named baseline are read once, not once per host."""

    def __init__(self, s: Session) -> None:
        self._s = s
        self._pools: dict[str, str | None] | None = None
        self._specs: dict[str, Baseline | None] = {}

    def name_for(self, host: FollowsBaseline) -> str | None:
        """As :func:`baseline_name_for_host`."""
        return self.name_from(host.vars.get("gpufleet_baseline"), host.pool)

    def name_from(self, own: str | None, pool: str | None) -> str | None:
        """:meth:`name_for` a host whose ``gpufleet_baseline`` variable is ``own`` (None:
        not set; :data:`OWN_BASELINE` reads it without decoding ``vars``) in ``pool``."""
        pool_baseline = None
        if not own and pool:
            if self._pools is None:
                self._pools = {n: b for n, b in self._s.execute(select(Pool.name, Pool.baseline))}
            pool_baseline = self._pools.get(pool)
        return own or pool_baseline or None

    def for_host(self, host: FollowsBaseline) -> Baseline | None:
        """As :func:`baseline_for_host`."""
        return self.named(self.name_for(host))

    def named(self, name: str | None) -> Baseline | None:
        """The stored baseline called ``name`` (None: no name, or not stored), read once."""
        if name is None:
            return None
        if name not in self._specs:
            row = self._s.scalar(select(BaselineRow).where(BaselineRow.name == name))
            self._specs[name] = (
                None
                if row is None
                else Baseline.model_validate(row.spec | {"name": row.name, "status": row.status})
            )
        return self._specs[name]


def baseline_name_for_host(s: Session, host: Host) -> str | None:
    """The name of the baseline that applies to ``host``: its own ``gpufleet_baseline``
    variable, else its pool's baseline; None when neither names one. The named baseline may
    not exist (see :func:`baseline_for_host`)."""
    pool_baseline = None
    if not host.vars.get("gpufleet_baseline") and host.pool:
        pool_baseline = s.scalar(select(Pool.baseline).where(Pool.name == host.pool))
    return baseline_name(host.vars, pool_baseline)


def baseline_for_host(s: Session, host: Host) -> Baseline | None:
    """The baseline that applies to ``host`` (:func:`baseline_name_for_host`), or None when
    none is named or the named one is not stored. Validation and drift both use this."""
    name = baseline_name_for_host(s, host)
    if name is None:
        return None
    row = s.scalar(select(BaselineRow).where(BaselineRow.name == name))
    if row is None:
        return None
    return Baseline.model_validate(row.spec | {"name": row.name, "status": row.status})


#: Audit-log kinds that mean "the hardware or software under test changed": evidence recorded
#: before the latest of them tested something else and no longer counts.
CHANGE_EVENT_KINDS: Sequence[EventKind] = (EventKind.CHANGE_DETECTED, EventKind.CHANGE_DECLARED)


def last_change_event_id(s: Session, host_id: int) -> int | None:
    """Id of the host's latest detected or declared change (driver, GPU swap, reimage ...);
    event ids grow with every append, so it orders changes even within one clock tick."""
    return s.scalar(
        select(Event.id)
        .where(Event.host_id == host_id, Event.kind.in_(CHANGE_EVENT_KINDS))
        .order_by(desc(Event.id))
        .limit(1)
    )


def last_change_event(s: Session, host_id: int) -> Event | None:
    """The host's latest detected or declared change event (see :func:`last_change_event_id`)."""
    return s.scalar(
        select(Event)
        .where(Event.host_id == host_id, Event.kind.in_(CHANGE_EVENT_KINDS))
        .order_by(desc(Event.id))
        .limit(1)
    )
