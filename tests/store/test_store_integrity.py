"""Store integrity: explicit upgrades, and one precise StoreError per infrastructure cause.

Every case runs against a real SQLite file or the real PostgreSQL server; nothing is mocked
except where a failure cannot be provoked otherwise (an exception raised *inside* a migration
to show that the first migration cannot half-apply).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import event, inspect, text

from gpufleet.errors import StoreError, StoreUnavailable
from gpufleet.service.core.fleet import Fleet
from gpufleet.store.db import SCHEMA_REVISION, Database
from gpufleet.store.tables import Base


def _tables(db: Database) -> set[str]:
    return set(inspect(db.engine).get_table_names())


def test_brand_new_sqlite_is_created_at_the_current_schema(tmp_path: Path) -> None:
    f = Fleet.open(home=tmp_path / "home", url=f"sqlite:///{tmp_path / 'new.db'}")
    assert f.db.current_revision() == SCHEMA_REVISION
    f.db.dispose()


def test_empty_postgres_needs_an_explicit_upgrade(empty_url: str, tmp_path: Path) -> None:
    if not empty_url.startswith("postgresql"):
        return  # SQLite is the case above
    with pytest.raises(StoreError, match=r"has no gpufleet schema yet: run `gpufleet db upgrade`"):
        Fleet.open(home=tmp_path / "home", url=empty_url)
    db = Database(empty_url)
    assert _tables(db) == set()  # nothing was created behind the operator's back
    db.migrate()
    Fleet.open(home=tmp_path / "home", url=empty_url).db.dispose()
    db.dispose()


def test_older_schema_is_refused_until_upgraded(empty_url: str, tmp_path: Path) -> None:
    db = Database(empty_url)
    db.migrate("0001")
    with pytest.raises(StoreError) as exc:
        Fleet.open(home=tmp_path / "home", url=empty_url)
    assert str(exc.value) == (
        f"database schema 0001 is older than this gpufleet ({SCHEMA_REVISION}): "
        "run `gpufleet db upgrade`"
    )
    assert exc.value.exit_code == 2
    assert db.current_revision() == "0001"  # not migrated implicitly
    db.migrate()
    assert db.status().state == "current"
    db.dispose()


def test_newer_schema_is_refused(empty_url: str) -> None:
    db = Database(empty_url)
    db.migrate()
    with db.engine.begin() as c:
        c.execute(text("UPDATE alembic_version SET version_num = '0099'"))
    with pytest.raises(StoreError, match=r"schema 0099 is unknown to this gpufleet .*newer"):
        db.ensure_current()
    with pytest.raises(StoreError, match="0099"):
        db.migrate()
    db.dispose()


def test_foreign_database_is_never_migrated_into(empty_url: str) -> None:
    db = Database(empty_url)
    with db.engine.begin() as c:
        c.execute(text("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)"))
    for call in (db.ensure_current, db.migrate):
        with pytest.raises(StoreError, match=r"tables that are not gpufleet's \(customers\)"):
            call()
    assert _tables(db) == {"customers"}
    db.dispose()


def test_half_created_schema_is_named(empty_url: str) -> None:
    db = Database(empty_url)
    with db.engine.begin() as c:
        c.execute(text("CREATE TABLE hosts (id INTEGER PRIMARY KEY)"))
    with pytest.raises(StoreError, match=r"half-created gpufleet schema .*interrupted first"):
        db.ensure_current()
    db.dispose()


def test_first_migration_cannot_half_apply(empty_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure late in the migration (here raised from 0002's first op) leaves no table."""
    from alembic import op

    def boom(*a: Any, **k: Any) -> None:
        raise RuntimeError("power cut")

    monkeypatch.setattr(op, "alter_column", boom)
    db = Database(empty_url)
    with pytest.raises(RuntimeError, match="power cut"):
        db.migrate()
    assert _tables(db) == set()
    assert db.status().state == "empty"
    monkeypatch.undo()
    db.migrate()
    assert db.status().state == "current"
    db.dispose()


def test_corrupt_sqlite_file(tmp_path: Path) -> None:
    path = tmp_path / "gpufleet.db"
    path.write_bytes(b"this is not an sqlite database\n" * 200)
    with pytest.raises(StoreError) as exc:
        Fleet.open(home=tmp_path, url=f"sqlite:///{path}")
    assert "not a usable SQLite file" in str(exc.value)
    assert "file is not a database" in str(exc.value)


def test_read_only_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "gpufleet.db"
    Database(f"sqlite:///{path}").migrate()
    ro = Database(f"sqlite:///file:{path}?mode=ro&uri=true")
    assert ro.status().state == "current"
    with pytest.raises(StoreError, match="is read-only"), ro.session() as s:
        s.execute(text("INSERT INTO pools (name, expected) VALUES ('p', '{}')"))
    ro.dispose()


def test_disk_full_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "gpufleet.db"
    db = Database(f"sqlite:///{path}")
    db.migrate()

    def tiny(dbapi_conn: sqlite3.Connection, _rec: Any) -> None:
        dbapi_conn.execute("PRAGMA max_page_count = 60")  # a full disk, as SQLite sees it

    event.listen(db.engine, "connect", tiny)
    db.engine.dispose()
    with pytest.raises(StoreError, match="disk full"), db.session() as s:
        for i in range(2000):
            s.execute(
                text("INSERT INTO pools (name, expected) VALUES (:n, '{}')"),
                {"n": f"pool-{i}-" + "x" * 100},
            )
    db.dispose()


def test_unreachable_and_wrong_urls() -> None:
    down = Database("postgresql+psycopg://gpufleet:s3cret@127.0.0.1:1/fleet")
    with pytest.raises(StoreUnavailable) as exc:  # refused: retryable
        down.ensure_current()
    assert exc.value.retryable
    msg = str(exc.value)
    assert "cannot use database" in msg and "127.0.0.1:1" in msg and "s3cret" not in msg
    with pytest.raises(StoreError, match="invalid database URL 'mysqlx://u:\\*\\*\\*@h/db'"):
        Database("mysqlx://u:pw@h/db")
    with pytest.raises(StoreError, match="invalid database URL"):
        Database("not a url")


def test_migrations_match_the_models(empty_url: str) -> None:
    """Alembic's autogenerate finds nothing to add: the migrations build exactly the models
    (this is how the PostgreSQL foreign key hosts.latest_snapshot_id was found missing)."""
    db = Database(empty_url)
    db.migrate()
    with db.engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True})
        diff = compare_metadata(ctx, Base.metadata)
    assert diff == []
    db.dispose()
