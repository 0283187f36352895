"""Migration 0017 (issue 8): what the labels take from the facts, stored once per distinct
value (``fact_label_sets``) and referenced by the snapshots (``fact_labels_id``).

On both databases: the values survive 0016 -> 0017 -> 0016 -> 0017 unchanged (history
included) and the labels answer the same; equal values share one set, a changed one gets a
new set, an unchanged host writes nothing; two PostgreSQL sessions resolving the same new
value end with the same set; the fleet-wide labels read takes the set's id from the
snapshots' covering index (SQLite: the row, after its facts document, is not read;
PostgreSQL: an index-only scan), then reads the few sets once.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import event, func, inspect, select, text
from sqlalchemy.orm import Session

from gpufleet.domain.facts import HostFacts
from gpufleet.domain.labels import fact_labels
from gpufleet.lab.demo import enroll_lab
from gpufleet.lab.fleet import LabFleet, apply_change
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.collect import collect
from gpufleet.service.views.summary import host_labels
from gpufleet.store.db import MIGRATIONS, SCHEMA_REVISION
from gpufleet.store.repo import READ_COLUMNS_INDEX, label_set_digest, label_set_id
from gpufleet.store.tables import FactLabelSet, FactSnapshot, Host


def _lab(fleet: Fleet, tmp_path: Path, models: list[str]) -> Path:
    d = tmp_path / "lab"
    enroll_lab(fleet, d, len(models), models=models, faults={}, now=fleet.now())
    collect(fleet)
    return d


def _down(fleet: Fleet, revision: str) -> None:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with fleet.db.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, revision)


def _labels_json(fleet: Fleet) -> list[tuple[str, list[tuple[str, str]], list[str]]]:
    """The labels of every host, key order included (what ``labels --json`` prints)."""
    return [
        (x.host, list(x.labels.items()), [str(t) for t in x.taints]) for x in host_labels(fleet)
    ]


def _by_snapshot_0017(fleet: Fleet) -> dict[int, Any]:
    """Every snapshot's stored labels value at 0017 (None: none stored)."""
    with fleet.db.session() as s:
        return {
            sid: value
            for sid, value in s.execute(
                select(FactSnapshot.id, FactLabelSet.value).outerjoin(
                    FactLabelSet, FactLabelSet.id == FactSnapshot.fact_labels_id
                )
            )
        }


def _by_snapshot_0016(fleet: Fleet) -> dict[int, Any]:
    """Every snapshot's ``fact_labels`` column at 0016 (a JSON value, None when NULL)."""
    with fleet.db.engine.connect() as c:
        rows = c.execute(
            select(text("id"), text("fact_labels")).select_from(text("fact_snapshots"))
        ).all()
    return {sid: json.loads(v) if isinstance(v, str) else v for sid, v in rows}


def test_0017_round_trip_keeps_every_snapshots_labels(fleet: Fleet, tmp_path: Path) -> None:
    d = _lab(fleet, tmp_path, ["a100-8x", "h100-8x", "a100-8x", "v100s-8x"])
    apply_change(LabFleet.load(d), "gpu-02", driver="999.1.1").save(d)
    collect(fleet)  # gpu-02: a second snapshot, the first one is history
    with fleet.db.session() as s:
        facts = {
            sid: fact_labels(HostFacts.model_validate(doc))
            for sid, doc in s.execute(select(FactSnapshot.id, FactSnapshot.facts))
        }
    assert len(facts) == 5
    want = _by_snapshot_0017(fleet)
    assert want == facts  # every snapshot, the earlier one of gpu-02 included
    labels = _labels_json(fleet)
    try:
        _down(fleet, "0016")
        assert fleet.db.current_revision() == "0016"
        assert "fact_label_sets" not in inspect(fleet.db.engine).get_table_names()
        columns = {c["name"] for c in inspect(fleet.db.engine).get_columns("fact_snapshots")}
        assert "fact_labels" in columns and "fact_labels_id" not in columns
        assert _by_snapshot_0016(fleet) == want
        fleet.db.migrate()
        assert fleet.db.current_revision() == SCHEMA_REVISION
        assert _by_snapshot_0017(fleet) == want
        columns = {c["name"] for c in inspect(fleet.db.engine).get_columns("fact_snapshots")}
        assert "fact_labels_id" in columns and "fact_labels" not in columns
        with fleet.db.session() as s:  # one set per distinct value, its digest the writers'
            sets = s.execute(select(FactLabelSet.digest, FactLabelSet.value)).all()
        distinct = {label_set_digest(v) for v in want.values()}
        assert sorted(dg for dg, _ in sets) == sorted(distinct)
        assert all(dg == label_set_digest(v) for dg, v in sets)
        assert _labels_json(fleet) == labels
        _down(fleet, "0016")  # ... and once more
        assert _by_snapshot_0016(fleet) == want
    finally:
        fleet.db.migrate()
    assert _by_snapshot_0017(fleet) == want
    assert _labels_json(fleet) == labels
    # a snapshot without a value (written before 0015) stays without one both ways
    with fleet.db.session() as s:
        sid = s.scalar(select(Host.latest_snapshot_id).where(Host.name == "gpu-04"))
        s.execute(FactSnapshot.__table__.update().where(FactSnapshot.id == sid).values(
            fact_labels_id=None))  # fmt: skip
    try:
        _down(fleet, "0016")
        assert _by_snapshot_0016(fleet)[sid] is None
    finally:
        fleet.db.migrate()
    assert _by_snapshot_0017(fleet)[sid] is None
    # gpu-04's labels from its facts: the same (in the facts' key order: PostgreSQL's stored
    # JSONB has its own, bench/notes/lab-notebook.md)
    assert [(h, dict(items), t) for h, items, t in _labels_json(fleet)] == [
        (h, dict(items), t) for h, items, t in labels
    ]


def test_equal_labels_share_a_set_a_change_gets_a_new_one(fleet: Fleet, tmp_path: Path) -> None:
    d = _lab(fleet, tmp_path, ["a100-8x", "a100-8x", "h100-8x"])
    with fleet.db.session() as s:
        rows = {
            name: (sid, set_id, fact_labels(HostFacts.model_validate(doc)))
            for name, sid, set_id, doc in s.execute(
                select(
                    Host.name, FactSnapshot.id, FactSnapshot.fact_labels_id, FactSnapshot.facts
                ).join(FactSnapshot, FactSnapshot.id == Host.latest_snapshot_id)
            )
        }
        n_sets = s.scalar(select(func.count()).select_from(FactLabelSet))
    # the two A100 hosts have the same labels' facts: one set; the H100 its own
    assert rows["gpu-01"][2] == rows["gpu-02"][2] != rows["gpu-03"][2]
    assert rows["gpu-01"][1] == rows["gpu-02"][1] != rows["gpu-03"][1]
    assert n_sets == 2
    # gpu-02's driver changes: a new value, a new set; the others write nothing
    apply_change(LabFleet.load(d), "gpu-02", driver="999.1.1").save(d)
    collect(fleet)
    with fleet.db.session() as s:
        after = dict(
            s.execute(
                select(Host.name, FactSnapshot.fact_labels_id).join(
                    FactSnapshot, FactSnapshot.id == Host.latest_snapshot_id
                )
            ).all()
        )
        latest = dict(s.execute(select(Host.name, Host.latest_snapshot_id)).all())
        n_snaps = s.scalar(select(func.count()).select_from(FactSnapshot))
        sets = dict(s.execute(select(FactLabelSet.id, FactLabelSet.value)).all())
    assert n_snaps == 4 and len(sets) == 3
    assert after["gpu-01"] == rows["gpu-01"][1] and after["gpu-03"] == rows["gpu-03"][1]
    assert latest["gpu-01"] == rows["gpu-01"][0] and latest["gpu-03"] == rows["gpu-03"][0]
    assert after["gpu-02"] not in (rows["gpu-01"][1], rows["gpu-03"][1])
    assert sets[after["gpu-02"]]["labels"]["nvidia.com/cuda.driver-version.major"] == "999"
    # the first value again (the A100s' own): its existing set, none added
    with fleet.db.session() as s:
        again = label_set_id(s, rows["gpu-01"][2])
        assert again == rows["gpu-01"][1]
        assert s.scalar(select(func.count()).select_from(FactLabelSet)) == 3


def test_two_writers_of_one_new_value_end_with_one_set(fleet: Fleet) -> None:
    """Two transactions resolve the same new value at once: the second one's insert waits
    for the first (PostgreSQL) or finds its row (SQLite, one writer at a time), and both get
    the one set."""
    value = {"v": 1, "labels": {"nvidia.com/gpu.product": "X"}, "gpus": 1}
    first = Session(fleet.db.engine)
    got: dict[str, int] = {}
    try:
        got["first"] = label_set_id(first, value)  # inserted, not committed yet
        if fleet.db.dialect == "postgresql":

            def second() -> None:
                with Session(fleet.db.engine) as s2:
                    got["second"] = label_set_id(s2, value)
                    s2.commit()

            t = threading.Thread(target=second)
            t.start()
            time.sleep(0.5)
            assert t.is_alive()  # waiting on the first transaction's row
            first.commit()
            t.join(10)
            assert not t.is_alive()
        else:
            first.commit()
            with Session(fleet.db.engine) as s2:
                got["second"] = label_set_id(s2, value)
                s2.commit()
    finally:
        first.close()
    assert got["first"] == got["second"]
    with fleet.db.session() as s:
        assert s.scalar(select(func.count()).select_from(FactLabelSet)) == 1
        # the insert that finds the digest taken does nothing (no error, no second row)
        assert label_set_id(s, dict(reversed(list(value.items())))) == got["first"]
        assert s.scalar(select(func.count()).select_from(FactLabelSet)) == 1


def test_labels_read_takes_the_set_id_from_the_covering_index(fleet: Fleet, tmp_path: Path) -> None:
    _lab(fleet, tmp_path, ["a100-8x", "h100-8x", "a100-8x"])
    statements: list[tuple[str, Any]] = []

    def seen(conn: Any, cursor: Any, statement: str, params: Any, *_: Any) -> None:
        statements.append((statement, params))

    event.listen(fleet.db.engine, "before_cursor_execute", seen)
    try:
        got = host_labels(fleet)
    finally:
        event.remove(fleet.db.engine, "before_cursor_execute", seen)
    assert [x.host for x in got] == ["gpu-01", "gpu-02", "gpu-03"]
    assert "nvidia.com/gpu.product" in got[0].labels
    # one fleet-wide read of the snapshots (their set ids, no facts), one of the 2 sets
    snapshot_reads = [(st, p) for st, p in statements if "fact_snapshots" in st]
    set_reads = [st for st, _ in statements if "fact_label_sets" in st]
    assert len(snapshot_reads) == 1 and len(set_reads) == 1, statements
    statement, params = snapshot_reads[0]
    assert "fact_labels_id" in statement and "fact_label_sets" not in statement
    assert "facts" not in statement.replace("fact_labels_id", "")
    if fleet.db.dialect == "postgresql":  # an index-only scan, once the pages are all-visible
        with fleet.db.engine.execution_options(isolation_level="AUTOCOMMIT").connect() as c:
            c.exec_driver_sql("VACUUM ANALYZE fact_snapshots")
            c.exec_driver_sql("SET enable_seqscan = off")  # a 3-host table: scan it, else
            plan = "\n".join(r[0] for r in c.exec_driver_sql("EXPLAIN " + statement, params))
        assert f"Index Only Scan using {READ_COLUMNS_INDEX} on fact_snapshots" in plan, plan
        return
    with fleet.db.engine.connect() as c:
        plan = "\n".join(
            str(r[-1]) for r in c.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, params)
        )
    assert f"fact_snapshots USING COVERING INDEX {READ_COLUMNS_INDEX}" in plan, plan
