"""A database that is busy or unreachable right now is :class:`StoreUnavailable` (retryable),
on SQLite and PostgreSQL; a permanent cause (a wrong role, an unopenable file) stays a plain
:class:`StoreError`."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from gpufleet.errors import StoreError, StoreUnavailable
from gpufleet.service.core.fleet import Fleet
from gpufleet.store.db import Database


def test_a_locked_database_is_unavailable_and_retryable(fleet: Fleet) -> None:
    """Another process holds the write lock (SQLite) or a table lock (PostgreSQL)."""
    other = create_engine(fleet.db.url)
    try:
        with other.connect() as holder:
            if fleet.db.dialect == "sqlite":
                holder.exec_driver_sql("BEGIN IMMEDIATE")
                wait, write = "PRAGMA busy_timeout=100", "UPDATE hosts SET name = name"
            else:
                holder.begin()
                holder.execute(text("LOCK TABLE hosts IN ACCESS EXCLUSIVE MODE"))
                wait, write = "SET LOCAL lock_timeout = '100ms'", "SELECT count(*) FROM hosts"
            with pytest.raises(StoreUnavailable) as info, fleet.db.session() as s:
                s.execute(text(wait))
                s.execute(text(write))
            holder.rollback()
    finally:
        other.dispose()
    err = info.value
    assert err.retryable and err.code == "store_unavailable" and isinstance(err, StoreError)
    expected = "database is locked" if fleet.db.dialect == "sqlite" else "lock timeout"
    assert expected in str(err)
    with fleet.db.session() as s:  # the lock is gone: the same call works
        assert s.execute(text("SELECT count(*) FROM hosts")).scalar() == 0


@pytest.mark.postgres
def test_refused_and_unreachable_servers_are_unavailable() -> None:
    refused = Database("postgresql+psycopg://gf:pw-not-shown@127.0.0.1:1/gpufleet")
    with pytest.raises(StoreUnavailable) as info:
        refused.status()
    assert info.value.retryable
    assert "refused" in str(info.value).lower() and "pw-not-shown" not in str(info.value)
    refused.dispose()
    # 192.0.2.0/24 is TEST-NET-1: nothing answers; the connect timeout (or no route) ends it.
    far = Database("postgresql+psycopg://gf@192.0.2.1:5432/gpufleet?connect_timeout=1")
    with pytest.raises(StoreUnavailable) as far_info:
        far.status()
    assert far_info.value.retryable
    far.dispose()


@pytest.mark.postgres
def test_a_wrong_role_is_a_permanent_store_error(pg_database_url: str) -> None:
    db = Database(pg_database_url.replace("postgres@", "no_such_role_gf@"))
    with pytest.raises(StoreError) as info:
        db.status()
    assert not isinstance(info.value, StoreUnavailable) and not info.value.retryable
    db.dispose()


def test_an_unopenable_sqlite_file_is_a_permanent_store_error(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'missing-dir' / 'x.db'}")
    with pytest.raises(StoreError) as info:
        db.status()
    assert not isinstance(info.value, StoreUnavailable)
    assert "cannot open database file" in str(info.value)
    db.dispose()


def test_sqlite_busy_timeout_defaults_to_30s_and_the_url_timeout_overrides_it(
    tmp_path: Path,
) -> None:
    """Many writers at once may wait for each other well past 10 s on a slow machine; the
    default waits 30 s, and ``?timeout=N`` (seconds, as ``sqlite3.connect`` reads it) sets it."""
    path = tmp_path / "busy.db"
    default = Database(f"sqlite:///{path}")
    short = Database(f"sqlite:///{path}?timeout=0.25")
    try:
        with default.engine.connect() as c:
            assert c.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30_000
        with short.engine.connect() as c:
            assert c.exec_driver_sql("PRAGMA busy_timeout").scalar() == 250
            c.exec_driver_sql("CREATE TABLE t (x INTEGER)")
            c.commit()
        with default.engine.connect() as holder:
            holder.exec_driver_sql("BEGIN IMMEDIATE")
            with (
                pytest.raises(StoreUnavailable, match="database is locked"),
                short.session() as s,
            ):
                s.execute(text("INSERT INTO t VALUES (1)"))
            holder.rollback()
    finally:
        default.dispose()
        short.dispose()


@pytest.mark.parametrize("bad", ["soon", "-1", "7200"])
def test_a_bad_sqlite_timeout_in_the_url_is_a_clear_store_error(tmp_path: Path, bad: str) -> None:
    with pytest.raises(StoreError, match=f"timeout={bad!r}"):
        Database(f"sqlite:///{tmp_path / 'x.db'}?timeout={bad}")
