"""The database schema as a use case: where it stands, and the explicit upgrade.

Servers and workers never migrate on their own (they would race); an operator runs
``gpufleet db upgrade`` once. Only a brand-new, empty SQLite database is created at the
current schema by :meth:`gpufleet.service.core.fleet.Fleet.open`.
"""

from __future__ import annotations

from gpufleet.config import Settings
from gpufleet.errors import LocalIOError
from gpufleet.store.db import Database, SchemaStatus


def _database(settings: Settings) -> Database:
    if settings.db_url().startswith("sqlite"):
        try:
            settings.home.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise LocalIOError(
                path=f"GPUFLEET_HOME {settings.home}",
                cause=f"cannot create the state directory: {exc.strerror or exc}",
            ) from exc
    return Database(settings.db_url())


def schema_status(settings: Settings) -> SchemaStatus:
    """Where the configured database's schema stands (reads only)."""
    db = _database(settings)
    try:
        return db.status()
    finally:
        db.dispose()


def upgrade(settings: Settings) -> tuple[SchemaStatus, SchemaStatus]:
    """Migrate the configured database to this gpufleet's schema (one transaction, under a
    migration lock); returns the status before and after. Foreign, half-created and newer
    databases are refused (:class:`~gpufleet.errors.StoreError`). On PostgreSQL the job
    queue's schema (procrastinate) is installed too when missing."""
    db = _database(settings)
    try:
        before = db.status()
        db.migrate(queue=True)
        return before, db.status()
    finally:
        db.dispose()
