"""Lean reads for commands that must start fast (issue 8, start-up): one host's row read with
the database driver itself (stdlib ``sqlite3``; ``psycopg`` on PostgreSQL), no SQLAlchemy.

``gpufleet labels HOST`` reads one host and its latest snapshot's derived columns; importing
SQLAlchemy, the ORM tables and the service layer costs about a second of CPU, more than the
whole read. These functions only read, open SQLite read-only, and answer None whenever they
cannot answer exactly what the store layer would: a URL they do not handle, a database that
is missing, unreachable or not at this gpufleet's schema, a host that is not there. The
caller then takes the ordinary path, which reports the cause (the one error boundary).

What they read is defined elsewhere, once: the columns (:mod:`gpufleet.store.tables`), the
schema revision (the migration scripts' head, :data:`gpufleet.store.db.SCHEMA_REVISION`; a test
keeps :func:`schema_head` equal to it), the baseline a host follows
(:func:`baseline_name`, also used by :mod:`gpufleet.store.repo`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import quote

from gpufleet.domain.times import as_utc

VERSIONS = Path(__file__).with_name("migrations") / "versions"

_REVISION = re.compile(r'^(down_revision|revision)\s*=\s*(?:"([^"]*)"|None)', re.M)


@cache
def schema_head() -> str | None:
    """The migration scripts' head: the revision no other script revises (None when the
    scripts do not form one chain). Read from the scripts' text, so without Alembic."""
    revs: set[str] = set()
    downs: set[str] = set()
    for path in VERSIONS.glob("*.py"):
        found = dict((k, v) for k, v in _REVISION.findall(path.read_text(encoding="utf-8")))
        if found.get("revision"):
            revs.add(found["revision"])
            if found.get("down_revision"):
                downs.add(found["down_revision"])
    heads = revs - downs
    return heads.pop() if len(heads) == 1 else None


def baseline_name(host_vars: object, pool_baseline: str | None) -> str | None:
    """The name of the baseline a host follows: its own ``gpufleet_baseline`` variable, else
    its pool's baseline; None when neither names one."""
    own = host_vars.get("gpufleet_baseline") if isinstance(host_vars, dict) else None
    return own or pool_baseline or None


@dataclass(frozen=True, slots=True)
class HostLabelRow:
    """What a host's labels are derived from (the :class:`~gpufleet.store.tables.Host`
    attributes of the same names, its baseline's name and its latest snapshot's
    ``fact_labels``, its ``fact_label_sets`` value; ``has_snapshot`` False before the first
    collection)."""

    name: str
    state: str
    fault: str | None
    pool: str | None
    rack: str | None
    profiles: list[str]
    expected: dict[str, Any]
    usable_gpus: int | None
    unusable_gpus: list[dict[str, Any]] | None
    baseline: str | None
    has_snapshot: bool
    fact_labels: dict[str, Any] | None
    role: str = "gpu"


_HOST_LABELS = (
    "SELECT h.name, h.state, h.fault, h.pool, h.rack, h.profiles, h.expected, h.vars,"
    " h.usable_gpus, h.unusable_gpus, h.latest_snapshot_id, l.value, p.baseline, h.role"
    " FROM hosts h"
    " LEFT JOIN fact_snapshots s ON s.id = h.latest_snapshot_id"
    " LEFT JOIN fact_label_sets l ON l.id = s.fact_labels_id"
    " LEFT JOIN pools p ON p.name = h.pool"
    " WHERE lower(h.name) = {p}"
)


def _json(value: Any) -> Any:
    """A JSON column's value: SQLite hands text, psycopg the decoded value."""
    return json.loads(value) if isinstance(value, str | bytes) else value


@contextmanager
def _connect(url: str) -> Iterator[tuple[Any, str] | None]:
    """(a read-only DB-API connection, its parameter marker) for ``url``, or None."""
    if url.startswith("sqlite:///"):
        import sqlite3

        path = url.removeprefix("sqlite:///")
        if not path or path.startswith(":") or "?" in path or "%" in path:
            yield None
            return
        file = Path(path)
        if not file.is_file() or file.stat().st_size == 0:
            yield None  # a brand-new database is created by the ordinary path
            return
        try:
            conn = sqlite3.connect(
                f"file:{quote(str(file.absolute()))}?mode=ro", uri=True, timeout=10
            )
        except sqlite3.Error:
            yield None
            return
        with closing(conn):
            yield conn, "?"
        return
    for scheme in ("postgresql+psycopg://", "postgresql://"):
        if url.startswith(scheme):
            import psycopg

            try:
                pg = psycopg.connect(
                    "postgresql://" + url.removeprefix(scheme), connect_timeout=10, autocommit=True
                )
            except (psycopg.Error, ValueError):
                yield None
                return
            with pg:
                pg.read_only = True
                yield pg, "%s"
            return
    yield None


@dataclass(frozen=True, slots=True)
class Read:
    """A read-only DB-API connection for plain-SQL reads (the fast read layer,
    :mod:`gpufleet.service.core.fastread`): ``marker`` is its parameter marker (``?`` on
    SQLite, ``%s`` on PostgreSQL)."""

    conn: Any
    marker: str
    postgres: bool

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """The rows of ``sql`` (``{p}`` in it stands for the parameter marker)."""
        cur = self.conn.cursor()
        try:
            cur.execute(sql.replace("{p}", self.marker), tuple(params))
            return [tuple(r) for r in cur.fetchall()]
        finally:
            cur.close()


@contextmanager
def open_read(url: str) -> Iterator[Read | None]:
    """A :class:`Read` of the database at ``url`` opened by the driver itself (no
    SQLAlchemy), or None when this lean read cannot answer: a URL it does not handle, a
    database that is missing, unreachable or not at this gpufleet's schema (the caller takes
    the ordinary path, which reports the cause)."""
    with _connect(url) as got:
        if got is None:
            yield None
            return
        conn, marker = got
        read = Read(conn, marker, marker == "%s")
        try:
            revs = [r[0] for r in read.rows("SELECT version_num FROM alembic_version")]
        except Exception:  # any driver error: the ordinary path reports it
            yield None
            return
        yield read if revs == [schema_head()] else None


@contextmanager
def engine_read(engine: Any) -> Iterator[Read]:
    """A :class:`Read` on a connection of an open SQLAlchemy ``engine`` (the store's, whose
    schema is checked when it opens): the ordinary start-up reads with the same SQL."""
    conn = engine.raw_connection()
    try:
        yield Read(conn, "%s" if engine.dialect.name == "postgresql" else "?",
                   engine.dialect.name == "postgresql")
    finally:
        try:
            conn.rollback()
        finally:
            conn.close()


def utc(value: Any) -> datetime | None:
    """A stored time as the store's ``UtcDateTime`` reads it: aware, a naive value being UTC
    (SQLite hands text, psycopg a datetime)."""
    if value is None:
        return None
    dt = datetime.fromisoformat(value) if isinstance(value, str) else value
    assert isinstance(dt, datetime)
    return as_utc(dt)


def json_value(value: Any) -> Any:
    """A JSON column's value: SQLite hands text, psycopg the decoded value."""
    return _json(value)


def host_label_row(url: str, name: str) -> HostLabelRow | None:
    """The one host named ``name`` (case-insensitive, as a name selector matches) with what
    its labels need, read from the database at ``url``; None when this lean read cannot
    answer (see the module's doc): the caller takes the ordinary path."""
    with open_read(url) as read:
        if read is None:
            return None
        try:
            rows = read.rows(_HOST_LABELS, (name.lower(),))
        except Exception:  # any driver error: the ordinary path reports it
            return None
    if len(rows) != 1:
        return None
    (
        host, state, fault, pool, rack, profiles, expected, host_vars,
        usable, unusable, snapshot_id, fact_labels, pool_baseline, role,
    ) = rows[0]  # fmt: skip
    return HostLabelRow(
        name=host,
        state=state,
        fault=fault,
        pool=pool,
        rack=rack,
        profiles=list(_json(profiles) or []),
        expected=dict(_json(expected) or {}),
        usable_gpus=usable,
        unusable_gpus=_json(unusable),
        baseline=baseline_name(_json(host_vars), pool_baseline),
        has_snapshot=snapshot_id is not None,
        fact_labels=_json(fact_labels),
        role=role,
    )
