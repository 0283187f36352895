"""Schema migrations on both backends."""

from __future__ import annotations

from pathlib import Path

from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text

from gpufleet.store.db import MIGRATIONS, SCHEMA_REVISION, Database


def test_schema_revision_constant_is_the_migrations_head() -> None:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    assert ScriptDirectory.from_config(cfg).get_current_head() == SCHEMA_REVISION


def test_migrate_is_idempotent_on_sqlite(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'x.db'}")
    assert db.current_revision() is None
    db.migrate()
    db.migrate()
    assert db.current_revision() == SCHEMA_REVISION
    tables = set(inspect(db.engine).get_table_names())
    assert {
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
    } <= tables


def test_postgres_schema_is_current(pg_database_url: str) -> None:
    db = Database(pg_database_url)
    assert db.current_revision() == SCHEMA_REVISION
    cols = {c["name"]: c for c in inspect(db.engine).get_columns("fact_snapshots")}
    assert "JSONB" in str(cols["facts"]["type"]).upper()
    db.dispose()


def test_0002_renames_claim_columns_keeping_values(empty_url: str) -> None:
    """A host claimed under schema 0001 keeps its claim under the new column names."""
    db = Database(empty_url)
    db.migrate("0001")
    with db.engine.begin() as c:
        c.execute(
            text(
                "INSERT INTO hosts (name, address, port, groups, vars, expected, state,"
                " state_entered_at, health, profiles, lock_token, locked_until, created_at,"
                " updated_at) VALUES ('gpu-01', '10.0.0.1', 22, '[]', '{}', '{}', 'enrolled',"
                " :t, 'ok', '[]', 'tok-1', :t, :t, :t)"
            ),
            {"t": "2026-12-01 12:00:00+00:00"},
        )
    db.migrate()
    assert db.current_revision() == SCHEMA_REVISION
    cols = {c["name"] for c in inspect(db.engine).get_columns("hosts")}
    assert {"claim_token", "claimed_until"} <= cols
    assert not {"lock_token", "locked_until"} & cols
    with db.engine.connect() as c:
        assert c.execute(text("SELECT claim_token FROM hosts")).scalar() == "tok-1"
    db.dispose()
