"""Migrations 0016, 0017 (issue 8): the snapshot columns fleet-wide reads take, in one index
(0017 adds the label set's id, ``fact_labels_id``).

The index is created and dropped on both databases; on SQLite the host list and the
summary's read take the snapshots' columns from the index alone (a covering index: the row,
with its facts document's overflow pages, is not read), and give the rows the plain join
gives; on a database without the index (a schema before 0016) they still answer.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import inspect, text

from gpufleet.lab.demo import enroll_lab
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.core.select import select_hosts
from gpufleet.service.hosts.collect import collect
from gpufleet.service.views.hosts import list_hosts, list_query
from gpufleet.service.views.summary import fleet_summary
from gpufleet.store.db import MIGRATIONS, SCHEMA_REVISION, Database
from gpufleet.store.repo import READ_COLUMNS_INDEX, latest_columns
from gpufleet.store.tables import FactSnapshot, Host

INDEX = "ix_fact_snapshots_read_columns"


def _indexes(db: Database) -> dict[str, list[str | None]]:
    return {
        str(i["name"]): list(i["column_names"])
        for i in inspect(db.engine).get_indexes("fact_snapshots")
    }


def _down(db: Database, revision: str) -> None:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with db.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, revision)


def test_0016_adds_the_read_columns_index_and_goes_back(empty_url: str) -> None:
    assert READ_COLUMNS_INDEX == INDEX
    db = Database(empty_url)
    db.migrate("0011")
    assert INDEX not in _indexes(db)
    db.migrate("0016")
    assert db.current_revision() == "0016"
    assert _indexes(db)[INDEX] == ["id", "gpu_count", "gpu_model", "driver", "cuda"]
    db.migrate()
    assert db.current_revision() == SCHEMA_REVISION
    assert _indexes(db)[INDEX] == [
        "id", "gpu_count", "gpu_model", "driver", "cuda", "fact_labels_id"
    ]  # fmt: skip
    _down(db, "0016")
    assert _indexes(db)[INDEX] == ["id", "gpu_count", "gpu_model", "driver", "cuda"]
    _down(db, "0011")
    assert INDEX not in _indexes(db)
    assert db.current_revision() == "0011"
    db.migrate()
    assert INDEX in _indexes(db)
    db.dispose()


def _lab(fleet: Fleet, tmp_path: Path) -> None:
    enroll_lab(fleet, tmp_path / "lab", 5, models=["a100-8x", "h100-8x", "v100s-8x"], faults={})
    collect(fleet, "gpu-01,gpu-02,gpu-03,gpu-04")  # gpu-05: no snapshot yet


def _plan(fleet: Fleet, stmt: object) -> str:
    with fleet.db.session() as s:
        compiled = stmt.compile(dialect=s.get_bind().dialect)  # type: ignore[attr-defined]
        return "\n".join(
            str(r[-1])
            for r in s.connection().exec_driver_sql(
                "EXPLAIN QUERY PLAN " + str(compiled), tuple(compiled.params.values())
            )
        )


def test_reads_take_the_snapshot_columns_from_the_index(fleet: Fleet, tmp_path: Path) -> None:
    _lab(fleet, tmp_path)
    want = list_hosts(fleet)
    assert [(v.name, v.gpu_count) for v in want] == [
        ("gpu-01", 8), ("gpu-02", 8), ("gpu-03", 8), ("gpu-04", 8), ("gpu-05", None)
    ]  # fmt: skip
    with fleet.db.session() as s:
        plain = [tuple(r) for r in s.execute(list_query(indexed=False))]
        indexed = [tuple(r) for r in s.execute(list_query())]
        model = [tuple(r) for r in s.execute(list_query(model="h100"))]
        columns = [
            tuple(r)
            for r in latest_columns(s, select_hosts(None), Host.name, FactSnapshot.gpu_model)
        ]
    assert indexed == plain
    assert [r[0] for r in model] == ["gpu-02"]
    assert columns == [(r[0], r[14]) for r in plain]
    if fleet.db.dialect != "sqlite":
        return
    # SQLite reads the snapshot columns from the covering index, not the row
    assert f"USING COVERING INDEX {INDEX}" in _plan(fleet, list_query()), _plan(fleet, list_query())
    assert f"INDEX {INDEX}" not in _plan(fleet, list_query(indexed=False))
    # without the index (a schema before 0016) the reads still answer, the same
    summary = fleet_summary(fleet)
    with fleet.db.engine.begin() as c:
        c.execute(text(f"DROP INDEX {INDEX}"))
    assert list_hosts(fleet) == want
    assert fleet_summary(fleet).gpus_total == summary.gpus_total == 32
