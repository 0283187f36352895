"""Engine, sessions and migrations for SQLite (default) and PostgreSQL.

The URL comes from the settings (:mod:`gpufleet.config`: ``GPUFLEET_DATABASE_URL``, otherwise
``sqlite:///<home>/gpufleet.db``).
Sessions are short: load, close; do network I/O; open another to apply (no network I/O
inside a transaction).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, inspect, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import (
    ArgumentError,
    DatabaseError,
    DataError,
    IntegrityError,
    NoSuchModuleError,
    OperationalError,
    ProgrammingError,
)
from sqlalchemy.orm import Session, sessionmaker

from gpufleet.errors import StoreError, StoreUnavailable
from gpufleet.store.table_types import json_serializer

MIGRATIONS = Path(__file__).with_name("migrations")

#: The newest Alembic revision; a test keeps it equal to the migration scripts' head. Knowing
#: it lets every CLI call skip importing Alembic when the schema is already current.
SCHEMA_REVISION = "0028"


#: The tables the migrations create (besides ``alembic_version``): how a half-created gpufleet
#: schema is told from a foreign database.
OUR_TABLES = frozenset(
    {
        "hosts",
        "fact_snapshots",
        "gpus",
        "nics",
        "events",
        "collection_runs",
        "collection_results",
        "validations",
        "baselines",
        "pools",
    }
)

#: Every revision this gpufleet knows, oldest first.
KNOWN_REVISIONS = (
    "0001", "0002", "0003", "0004", "0005", "0006", "0007", "0008", "0009", "0010",
    "0012", "0015", "0014", "0011", "0016", "0017", "0018", "0023", "0024",
)

UPGRADE_HINT = "run `gpufleet db upgrade`"

#: A table of the job queue's schema (procrastinate, PostgreSQL), applied by ``db upgrade``.
QUEUE_TABLE = "procrastinate_jobs"


#: Driver messages (lowercased) of a database that is unreachable or busy right now: the same
#: call may succeed later unchanged (:class:`~gpufleet.errors.StoreUnavailable`, retryable).
UNAVAILABLE_MARKERS = (
    "connection refused",
    "could not connect",
    "connection failed",
    "no route to host",
    "network is unreachable",
    "timeout expired",
    "timed out",
    "database is locked",
    "lock timeout",  # PostgreSQL's "canceling statement due to lock timeout"
    "the database system is starting up",
    "the database system is shutting down",
    "too many clients",
    "server closed the connection",
)
#: Causes that no retry fixes, even when the driver words them as a connection failure.
PERMANENT_MARKERS = ("does not exist", "authentication failed", "password", "no pg_hba.conf entry")


def is_unavailable(message: str) -> bool:
    """True when a driver's ``message`` says the database is unreachable or busy for now."""
    low = message.lower()
    return not any(m in low for m in PERMANENT_MARKERS) and any(
        m in low for m in UNAVAILABLE_MARKERS
    )


#: How long (seconds) an SQLite connection waits for another process's write lock before
#: "database is locked" (:class:`~gpufleet.errors.StoreUnavailable`). SQLite's lock is not
#: fair: with many writers at once (several CLI invocations, the server, a worker) one may
#: wait for all the others, so this is generous; ``?timeout=N`` in the URL overrides it.
SQLITE_BUSY_TIMEOUT_S = 30.0


def sqlite_busy_timeout_s(query: Mapping[str, Any]) -> float:
    """The busy timeout an SQLite URL asks for (its ``timeout`` query parameter, seconds, as
    Python's ``sqlite3.connect`` reads it), else :data:`SQLITE_BUSY_TIMEOUT_S`."""
    raw = query.get("timeout")
    if raw is None:
        return SQLITE_BUSY_TIMEOUT_S
    value = raw[-1] if isinstance(raw, tuple) else raw
    try:
        seconds = float(value)
    except ValueError:
        raise ValueError(f"timeout={value!r} is not a number of seconds") from None
    if not 0 <= seconds <= 3600:
        raise ValueError(f"timeout={value!r} is outside 0-3600 seconds")
    return seconds


def _sqlite_pragmas(busy_ms: int, dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute(f"PRAGMA busy_timeout={int(busy_ms)}")
    # WAL is stored in the file: switch only a new (empty) or gpufleet's own database, never
    # a foreign one that is about to be refused (it must be left exactly as it was).
    tables = {row[0] for row in cur.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if not tables or "alembic_version" in tables:
        cur.execute("PRAGMA journal_mode=WAL")
    cur.close()


def _first_line(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None) or exc
    return (str(orig).strip().splitlines() or [type(orig).__name__])[0]


@dataclass(frozen=True)
class SchemaStatus:
    """What ``gpufleet db status`` reports."""

    url: str
    dialect: str
    revision: str | None
    head: str
    state: str  # current | empty | older | newer | foreign | partial
    message: str
    #: The job queue's schema (procrastinate, PostgreSQL only): present | missing, or
    #: in-process (SQLite: the jobs run in the server process, nothing to install).
    queue: str = "in-process"


#: ``Session.info`` key of the clock of the session's database (:attr:`Database.clock`).
CLOCK_INFO = "gpufleet.clock"


def wall_clock() -> datetime:
    """The current time, UTC (a database's clock until a fleet sets its own)."""
    return datetime.now(UTC)


def session_now(s: Session) -> datetime:
    """The time by the clock of the database that made ``s``."""
    clock: Callable[[], datetime] = s.info.get(CLOCK_INFO, wall_clock)
    return clock()


class Database:
    """One database: engine, session factory, schema checks and explicit migration.

    Every infrastructure failure (unreachable server, wrong URL, corrupt, foreign, newer or
    older schema, read-only file, disk full) is a :class:`~gpufleet.errors.StoreError` whose
    message names the cause in one line.
    """

    def __init__(self, url: str) -> None:
        self.url = url
        try:
            parsed = make_url(url)
            self.safe_url = parsed.render_as_string(hide_password=True)
            kwargs: dict[str, Any] = {"json_serializer": json_serializer}
            busy_ms = 0
            if parsed.get_backend_name() == "sqlite":
                busy_ms = int(sqlite_busy_timeout_s(parsed.query) * 1000)
            if parsed.get_backend_name() == "postgresql":
                kwargs["pool_pre_ping"] = True
                kwargs["connect_args"] = {"connect_timeout": 10}
            self.engine: Engine = create_engine(parsed, **kwargs)
        except (ArgumentError, NoSuchModuleError, ImportError, ValueError) as exc:
            raise StoreError(f"invalid database URL '{_redact(url)}': {_first_line(exc)}") from exc
        if self.engine.dialect.name == "sqlite":
            event.listen(self.engine, "connect", functools.partial(_sqlite_pragmas, busy_ms))
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        #: The clock stamping the rows the store writes on its own (the placement summary's
        #: ``refreshed_at``); a :class:`~gpufleet.service.core.fleet.Fleet` sets its own.
        self.clock: Callable[[], datetime] = wall_clock
        # placement's per-rack summary is kept in step by this database's own sessions (here:
        # the module imports the tables, which a lean read never needs)
        from gpufleet.store import placement_index

        placement_index.install(self._sessions)

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    def begin_for_savepoints(self, s: Session) -> None:
        """Open ``s``'s transaction now where the driver would not (SQLite: pysqlite begins
        one only before a write, and releasing an outermost SAVEPOINT commits), so that
        the savepoints of a group of writes nest in one transaction. ``BEGIN IMMEDIATE``:
        the write lock is taken first (waiting as any writer does), so a read snapshot is
        never refused its upgrade to a write when another connection wrote meanwhile."""
        if self.engine.dialect.name != "sqlite":
            return
        conn = s.connection()
        dbapi = conn.connection.dbapi_connection
        if dbapi is not None and not dbapi.in_transaction:
            conn.exec_driver_sql("BEGIN IMMEDIATE")

    # ------------------------------------------------------------------ errors

    def store_error(self, exc: BaseException) -> StoreError:
        """The one-line :class:`StoreError` for a database failure (translated, not hidden):
        :class:`StoreUnavailable` (retryable) when the server is unreachable or the database
        is locked, see :func:`is_unavailable`."""
        line = _first_line(exc)
        low = line.lower()
        where = self.safe_url
        if "file is not a database" in low or "malformed" in low:
            msg = (
                f"database {where} is not a usable SQLite file (corrupt or not a database): {line}"
            )
        elif "readonly" in low or "read-only" in low or "read only" in low:
            msg = f"database {where} is read-only: {line}"
        elif "disk is full" in low or "no space left" in low or "disk full" in low:
            msg = f"database {where}: disk full: {line}"
        elif "unable to open database file" in low:
            msg = f"cannot open database file {where} (missing directory or no permission): {line}"
        elif "database is locked" in low:
            msg = f"database {where} is locked by another process (try again): {line}"
        elif isinstance(exc, OperationalError) and self.dialect == "postgresql":
            msg = f"cannot use database {where}: {line}"
        else:
            msg = f"database {where}: {line}"
        orig = getattr(exc, "orig", None) or exc
        if isinstance(exc, OperationalError) and is_unavailable(str(orig)):
            return StoreUnavailable(msg)
        return StoreError(msg)

    # ------------------------------------------------------------------ schema

    def current_revision(self) -> str | None:
        """The schema revision recorded in the database (None when there is none)."""
        try:
            with self.engine.connect() as conn:
                if not inspect(conn).has_table("alembic_version"):
                    return None
                return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
        except (OperationalError, DatabaseError) as exc:
            raise self.store_error(exc) from exc

    def _tables(self) -> set[str]:
        try:
            with self.engine.connect() as conn:
                return set(inspect(conn).get_table_names())
        except (OperationalError, DatabaseError) as exc:
            raise self.store_error(exc) from exc

    def status(self) -> SchemaStatus:
        """Where the schema stands against this gpufleet's migrations (reads only)."""
        rev = self.current_revision()
        tables = self._tables() - {"alembic_version"}

        queue = "in-process"
        if self.dialect == "postgresql":
            queue = "present" if QUEUE_TABLE in tables else "missing"

        def st(state: str, message: str) -> SchemaStatus:
            return SchemaStatus(
                self.safe_url, self.dialect, rev, SCHEMA_REVISION, state, message, queue
            )

        if rev == SCHEMA_REVISION:
            if queue == "missing":
                return st(
                    "current",
                    f"database schema {rev} is current; the job queue's schema is missing "
                    f"(workers and runs need it): {UPGRADE_HINT}",
                )
            return st("current", f"database schema {rev} is current")
        if rev is None:
            if not tables:
                return st("empty", f"database {self.safe_url} has no gpufleet schema yet")
            foreign = sorted(tables - OUR_TABLES)
            if foreign:
                return st(
                    "foreign",
                    f"database {self.safe_url} holds tables that are not gpufleet's "
                    f"({', '.join(foreign[:5])}) and no gpufleet schema revision: refusing to "
                    "migrate into it; point GPUFLEET_DATABASE_URL at an empty database",
                )
            return st(
                "partial",
                f"database {self.safe_url} holds a half-created gpufleet schema (tables "
                f"{', '.join(sorted(tables))} but no recorded revision): an interrupted first "
                "migration; drop those tables (or remove the SQLite file) and " + UPGRADE_HINT,
            )
        if rev in KNOWN_REVISIONS:
            return st(
                "older",
                f"database schema {rev} is older than this gpufleet ({SCHEMA_REVISION}): "
                + UPGRADE_HINT,
            )
        return st(
            "newer",
            f"database schema {rev} is unknown to this gpufleet (knows up to "
            f"{SCHEMA_REVISION}): written by a newer gpufleet, or not a gpufleet database; "
            "upgrade gpufleet",
        )

    def ensure_current(self, *, create_if_empty: bool | None = None) -> None:
        """Refuse to run on a schema other than this gpufleet's (:class:`StoreError`).

        A brand-new, empty SQLite database is created at the current schema (the embedded
        default needs no extra step); anything else (an older schema, any PostgreSQL) needs an
        explicit ``gpufleet db upgrade`` so that servers and workers never race to migrate.
        """
        if create_if_empty is None:
            create_if_empty = self.dialect == "sqlite"
        status = self.status()
        if status.state == "current":
            return
        if status.state == "empty" and create_if_empty:
            self.migrate()
            return
        if status.state == "empty":
            raise StoreError(f"{status.message}: {UPGRADE_HINT}")
        raise StoreError(status.message)

    def migrate(self, target: str = "head", *, queue: bool = False) -> None:
        """Bring the schema to ``target`` (newest by default) in ONE transaction, holding a
        migration lock (SQLite: ``BEGIN IMMEDIATE``; PostgreSQL: an advisory lock), so that
        it cannot half-apply and two processes never migrate at once. Refuses foreign,
        half-created and newer databases.

        ``queue`` (``gpufleet db upgrade``): on PostgreSQL, also install the job queue's own
        schema (procrastinate's tables and functions) in the same transaction when it is
        missing; SQLite runs its jobs in-process and needs none."""
        status = self.status()
        want_queue = queue and self.dialect == "postgresql" and status.queue == "missing"
        if target == "head" and status.state == "current" and not want_queue:
            return
        if status.state in ("foreign", "partial", "newer"):
            raise StoreError(status.message)
        from alembic import command
        from alembic.config import Config

        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS))
        try:
            with self.engine.connect() as conn:
                if self.dialect == "sqlite":
                    # pysqlite runs DDL outside a transaction unless one is begun explicitly.
                    conn.exec_driver_sql("BEGIN IMMEDIATE")
                else:
                    conn.execute(text("SELECT pg_advisory_xact_lock(7460210002)"))
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, target)
                if want_queue and not inspect(conn).has_table(QUEUE_TABLE):
                    from procrastinate.schema import SchemaManager

                    # The driver's own execute: the script is many statements, with % signs.
                    driver = conn.connection.driver_connection
                    assert driver is not None
                    driver.execute(SchemaManager.get_schema())
                conn.commit()
        except (OperationalError, DatabaseError) as exc:
            raise self.store_error(exc) from exc

    # ------------------------------------------------------------------ sessions

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A transaction: commits on success, rolls back on error. Infrastructure failures
        (disk full, read-only, unreachable, corrupt) become :class:`StoreError`."""
        try:
            with self._sessions() as s, s.begin():
                s.info[CLOCK_INFO] = self.clock
                yield s
        except OperationalError as exc:
            raise self.store_error(exc) from exc
        except DatabaseError as exc:
            if isinstance(exc, IntegrityError | DataError | ProgrammingError):
                raise
            raise self.store_error(exc) from exc

    def dispose(self) -> None:
        self.engine.dispose()


def _redact(url: str) -> str:
    """``url`` with any password replaced (for messages)."""
    import re

    return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url)
