"""Migration 0014 (issue 10): ``host_samples.driver_age_s`` (grace after a driver reload) and
``webhook_deliveries`` as an outbox (``next_at``, ``claim``, ``claimed_until``,
``delivered_at``); rows written before it keep their values, and it goes back down cleanly."""

from __future__ import annotations

from alembic import command
from alembic.config import Config
from sqlalchemy import inspect, text

from gpufleet.store.db import MIGRATIONS, Database

T = {"t": "2026-12-01 12:00:00+00:00"}


def _columns(db: Database, table: str) -> set[str]:
    return {c["name"] for c in inspect(db.engine).get_columns(table)}


def test_0014_adds_the_outbox_and_driver_age_and_goes_back(empty_url: str) -> None:
    db = Database(empty_url)
    db.migrate("0015")
    with db.engine.begin() as c:
        c.execute(
            text(
                "INSERT INTO webhook_deliveries (at, kind, payload, attempts, delivered, status)"
                " VALUES (:t, 'alarm-opened', '{}', 2, true, 200)"
            ),
            T,
        )
    db.migrate()
    assert {"next_at", "claim", "claimed_until", "delivered_at"} <= _columns(
        db, "webhook_deliveries"
    )
    assert "driver_age_s" in _columns(db, "host_samples")
    assert "ix_webhook_deliveries_next_at" in {
        i["name"] for i in inspect(db.engine).get_indexes("webhook_deliveries")
    }
    with db.engine.connect() as c:  # an old delivered row is finished: never sent again
        row = c.execute(
            text("SELECT attempts, delivered, next_at, claim FROM webhook_deliveries")
        ).one()
    assert (row[0], bool(row[1]), row[2], row[3]) == (2, True, None, None)
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with db.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0015")
    assert "next_at" not in _columns(db, "webhook_deliveries")
    assert "driver_age_s" not in _columns(db, "host_samples")
    with db.engine.connect() as c:
        assert c.execute(text("SELECT count(*) FROM webhook_deliveries")).scalar() == 1
    db.migrate()
    assert "driver_age_s" in _columns(db, "host_samples")
    db.dispose()
