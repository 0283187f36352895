"""Engine, sessions and migrations for SQLite (default) and PostgreSQL.

``GPUFLEET_DATABASE_URL`` selects the database; otherwise ``sqlite:///<home>/gpufleet.db``.
Sessions are short: load, close; do network I/O; open another to apply (no network I/O
inside a transaction).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

MIGRATIONS = Path(__file__).with_name("migrations")

#: The newest Alembic revision; a test keeps it equal to the migration scripts' head. Knowing
#: it lets every CLI call skip importing Alembic when the schema is already current.
SCHEMA_REVISION = "0002"


def default_home() -> Path:
    """``$GPUFLEET_HOME`` or ``~/.local/share/gpufleet``."""
    env = os.environ.get("GPUFLEET_HOME")
    return Path(env) if env else Path.home() / ".local" / "share" / "gpufleet"


def database_url(home: Path | None = None) -> str:
    """The configured database URL (``GPUFLEET_DATABASE_URL`` wins)."""
    url = os.environ.get("GPUFLEET_DATABASE_URL")
    if url:
        return url
    home = home or default_home()
    home.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{home / 'gpufleet.db'}"


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA busy_timeout=10000")
    cur.close()


class Database:
    """One database: engine, session factory, schema migration."""

    def __init__(self, url: str) -> None:
        self.url = url
        kwargs: dict[str, Any] = {}
        if url.startswith("postgresql"):
            kwargs["pool_pre_ping"] = True
        self.engine: Engine = create_engine(url, **kwargs)
        if self.engine.dialect.name == "sqlite":
            event.listen(self.engine, "connect", _sqlite_pragmas)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    def current_revision(self) -> str | None:
        """The schema revision recorded in the database (None when not migrated yet)."""
        try:
            with self.engine.connect() as conn:
                return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
        except DBAPIError:
            return None

    def migrate(self, target: str = "head") -> None:
        """Bring the schema to ``target`` (the newest Alembic revision by default)."""
        if target == "head" and self.current_revision() == SCHEMA_REVISION:
            return
        from alembic import command
        from alembic.config import Config

        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS))
        with self.engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, target)

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A transaction: commits on success, rolls back on error."""
        with self._sessions() as s, s.begin():
            yield s

    def dispose(self) -> None:
        self.engine.dispose()
