"""Capacity reads the fleet as its columns (issue 8): ``capacity`` and ``capacity check`` take
the snapshots' columns from the snapshot index on SQLite (the row, with its facts document's
overflow pages, is not read) and decode no host's facts unless the host carries another
vendor's accelerators; the answers are those of the facts, on both databases, with a host of
another vendor beside NVIDIA's, a partial host and one not collected yet."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from sqlalchemy import event

from gpufleet.lab.demo import enroll_lab
from gpufleet.service.allocation.capacity import capacity, check
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.collect import collect
from gpufleet.store.repo import READ_COLUMNS_INDEX
from gpufleet.store.tables import Host


def _lab(fleet: Fleet, tmp_path: Path) -> None:
    d = tmp_path / "lab"
    enroll_lab(fleet, d, 5, models=["a100-8x", "h100-8x", "ascend-910b3-8x"], faults={})
    collect(fleet, "gpu-01,gpu-02,gpu-03,gpu-04")  # gpu-05: no snapshot yet


def _statements(fleet: Fleet) -> list[tuple[str, Any]]:
    seen: list[tuple[str, Any]] = []

    def hook(conn: Any, cursor: Any, stmt: str, params: Any, context: Any, many: bool) -> None:
        seen.append((stmt, params))

    event.listen(fleet.db.engine, "before_cursor_execute", hook)
    return seen


def test_capacity_reads_snapshot_columns_from_the_index(fleet: Fleet, tmp_path: Path) -> None:
    _lab(fleet, tmp_path)
    with fleet.db.session() as s:  # a partial host: one GPU left out by GPU-level health
        h = s.query(Host).filter_by(name="gpu-02").one()
        h.usable_gpus = 7
    seen = _statements(fleet)
    rep = capacity(fleet)
    gate = check(fleet, gpus=8, model="A100")
    names = {r["model"] for r in rep.rows}
    assert "huawei 910B3" in names, rep.rows  # another vendor's host: its facts decoded
    assert any("A100" in m for m in names) and any("H100" in m for m in names)
    assert rep.totals["other"] == 8 + 7 + 8 + 8  # collected, not validated yet: 'other'
    assert gate.ok is False and gate.allocatable == 0  # nothing validated yet
    facts_reads = [st for st, _ in seen if "fact_snapshots.facts" in st]
    # only the Ascend host's facts are decoded (the other vendor's accelerators)
    assert len(facts_reads) == 1, facts_reads
    if fleet.db.dialect != "sqlite":
        return
    with fleet.db.engine.connect() as c:
        plans = []
        for st, params in seen:
            if "fact_snapshots" not in st or "fact_snapshots.facts" in st:
                continue
            if not st.lstrip().upper().startswith("SELECT"):
                continue
            rows = c.exec_driver_sql("EXPLAIN QUERY PLAN " + st, params).all()
            plans.append("\n".join(str(r[-1]) for r in rows))
    assert plans
    for plan in plans:  # every snapshot read of capacity takes the index, not the row
        snap = [ln for ln in plan.splitlines() if "fact_snapshots" in ln]
        assert all(f"COVERING INDEX {READ_COLUMNS_INDEX}" in ln for ln in snap), plan


def test_capacity_answers_as_before_without_the_index(fleet: Fleet, tmp_path: Path) -> None:
    """A schema before 0016 (no snapshot index) answers the same: the plain join."""
    _lab(fleet, tmp_path)
    want = dataclasses.asdict(capacity(fleet, at=None))
    want_gate = dataclasses.asdict(check(fleet, gpus=8))
    if fleet.db.dialect != "sqlite":
        return
    with fleet.db.engine.begin() as c:
        c.exec_driver_sql(f"DROP INDEX {READ_COLUMNS_INDEX}")
    got = dataclasses.asdict(capacity(fleet))
    assert {k: v for k, v in got.items() if k != "at"} == {
        k: v for k, v in want.items() if k != "at"
    }
    assert dataclasses.asdict(check(fleet, gpus=8)) == want_gate
