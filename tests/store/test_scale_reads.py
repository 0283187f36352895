"""Issue 8: reads that do not decode history, and snapshots written only on change.

On a lab fleet (three 8-GPU models, a host without GPUs, a host whose GPU went missing), on
both databases: every latest snapshot's derived columns equal what its full facts say; the
listing, labels and drift read without the facts document give exactly what the full facts
give; an unchanged host writes no new snapshot while a changed one does (and the change is
detected); PostgreSQL plans the filtered host list with indexes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import func, select, update

from gpufleet.domain.accelerators import UNKNOWN_MODEL, accelerator_versions, accelerators_of
from gpufleet.domain.drift import diff_against_baseline
from gpufleet.domain.events import EventKind
from gpufleet.domain.facts import HostFacts
from gpufleet.domain.health import Fault
from gpufleet.domain.labels import derive_labels, fact_labels
from gpufleet.domain.spec import ExpectedSpec
from gpufleet.domain.states import HostState
from gpufleet.lab.demo import enroll_lab
from gpufleet.lab.fleet import LabFleet, apply_change
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.core.select import select_hosts
from gpufleet.service.hosts.baselines import baseline_from_host, drift, save_baseline
from gpufleet.service.hosts.collect import collect, facts_digest
from gpufleet.service.views.hosts import list_hosts
from gpufleet.service.views.summary import fleet_summary, host_labels
from gpufleet.store.repo import (
    baseline_for_host,
    baseline_name_for_host,
    label_set_id,
    latest_facts_query,
)
from gpufleet.store.tables import Event, FactLabelSet, FactSnapshot, Host

FAULTS = {"gpu-05": ["gpu-missing"], "gpu-06": ["nvidia-smi-missing"]}


def _lab(fleet: Fleet, tmp_path: Path) -> Path:
    d = tmp_path / "lab"
    enroll_lab(fleet, d, 7, models=["a100-8x", "h100-8x", "v100s-8x"], faults=FAULTS)
    return d


def _partial(h: Host) -> dict[str, Any]:
    """GPU-level health's arguments of derive_labels (issue 10), when that schema is in."""
    if not hasattr(h, "usable_gpus"):
        return {}
    return {"usable_gpus": h.usable_gpus, "unusable_gpus": len(h.unusable_gpus or [])}


def _full(fleet: Fleet) -> dict[str, tuple[Host, FactSnapshot, HostFacts]]:
    """Every host with its latest snapshot and the facts decoded from the whole document."""
    with fleet.db.session() as s:
        rows = s.execute(
            select(Host, FactSnapshot).join(
                FactSnapshot, FactSnapshot.id == Host.latest_snapshot_id
            )
        ).all()
        return {h.name: (h, snap, HostFacts.model_validate(snap.facts)) for h, snap in rows}


def _stored_labels(fleet: Fleet) -> dict[str, Any]:
    """Each host's latest snapshot's stored ``fact_labels``: its label set's value (0017)."""
    with fleet.db.session() as s:
        rows = s.execute(
            select(Host.name, FactLabelSet.value)
            .join(FactSnapshot, FactSnapshot.id == Host.latest_snapshot_id)
            .outerjoin(FactLabelSet, FactLabelSet.id == FactSnapshot.fact_labels_id)
        ).all()
        return {name: value for name, value in rows}


def _assert_derived(fleet: Fleet, full: dict[str, tuple[Host, FactSnapshot, HostFacts]]) -> None:
    """Every snapshot's derived columns are what its full facts say: the accelerator
    columns from every vendor's accelerators (issue 15), an NVIDIA-only host's exactly
    what nvidia-smi gave (as before issue 15)."""
    stored = _stored_labels(fleet)
    for name, (_h, snap, facts) in full.items():
        accs = accelerators_of(facts)
        mems = [a.memory_total_mib for a in accs if a.memory_total_mib is not None]
        dmi = facts.dmi.uuid if facts.dmi else None
        assert snap.gpu_count == len(accs), name
        assert snap.gpu_model == (
            ", ".join(sorted({a.model for a in accs if a.model != UNKNOWN_MODEL})) or None
        ), name
        assert snap.gpu_memory_mib == (min(mems) if mems else None), name
        drivers = [v.driver for _, v in sorted(accelerator_versions(facts).items()) if v.driver]
        assert snap.driver == (facts.driver_version or next(iter(drivers), None)), name
        if not facts.accelerators:  # NVIDIA only (or nothing): nvidia-smi's values
            gpus = facts.gpus
            nv_mems = [g.memory_total_mib for g in gpus if g.memory_total_mib is not None]
            assert snap.gpu_count == len(gpus), name
            assert snap.gpu_model == (
                ", ".join(sorted({g.product_name for g in gpus if g.product_name})) or None
            ), name
            assert snap.gpu_memory_mib == (min(nv_mems) if nv_mems else None), name
            assert snap.driver == facts.driver_version, name
        assert snap.cuda == facts.cuda_version, name
        assert snap.kernel == facts.kernel, name
        assert snap.os == (facts.os.pretty_name if facts.os else None), name
        assert snap.dmi_uuid == (dmi.upper() if dmi else None), name
        assert snap.content_hash == facts_digest(facts.model_dump(mode="json")), name
        assert stored[name] == fact_labels(facts), name  # migrations 0015, 0017


MIXED = ["h100-8x", "ascend-910b3-8x", "ascend-910b3-8x", "mi100-4x", "ascend-910b3-8x"]


def test_derived_columns_of_a_mixed_fleet_count_every_vendor(
    fleet: Fleet, tmp_path: Path
) -> None:
    """Issue 15: an Ascend or AMD host's snapshot counts its NPUs / GPUs, names their model,
    smallest memory and driver; the host list shows them (no facts decoded)."""
    faults = {"gpu-03": ["npu-alarm:5"], "gpu-05": ["npu-missing:3"]}
    enroll_lab(fleet, tmp_path / "lab", 5, models=MIXED, faults=faults, now=fleet.now())
    collect(fleet)
    full = _full(fleet)
    assert len(full) == 5
    _assert_derived(fleet, full)
    got = {n: (s.gpu_count, s.gpu_model, s.driver) for n, (_, s, _) in full.items()}
    assert got == {
        "gpu-01": (8, "NVIDIA H100 80GB HBM3", full["gpu-01"][2].driver_version),
        "gpu-02": (8, "910B3", "23.0.7"),
        "gpu-03": (8, "910B3", "23.0.7"),
        "gpu-04": (4, "Instinct MI100", "6.3.6"),
        "gpu-05": (7, "910B3", "23.0.7"),
    }
    assert full["gpu-01"][2].driver_version is not None
    assert full["gpu-02"][1].gpu_memory_mib == 65536
    assert full["gpu-04"][1].gpu_memory_mib == 32752  # rocm-smi: 34342961152 bytes
    listed = {v.name: (v.gpu_count, v.gpu_model, v.driver) for v in list_hosts(fleet)}
    assert listed == got


def test_derived_columns_and_reads_equal_the_full_facts(fleet: Fleet, tmp_path: Path) -> None:
    d = _lab(fleet, tmp_path)
    collect(fleet)
    save_baseline(fleet, baseline_from_host(fleet, "gpu-01", "b1"))
    with fleet.db.session() as s:  # every host judged against b1: drift on other models
        for h in s.scalars(select(Host)):
            h.vars = {**h.vars, "gpufleet_baseline": "b1"}
    apply_change(LabFleet.load(d), "gpu-02", driver="999.1.1").save(d)
    collect(fleet)

    full = _full(fleet)
    assert len(full) == 7
    _assert_derived(fleet, full)
    assert full["gpu-06"][1].gpu_count == 0 and full["gpu-05"][1].gpu_count == 7

    # listing: what the full facts give
    for v in list_hosts(fleet):
        _, snap, facts = full[v.name]
        assert (v.gpu_count, v.gpu_model, v.driver, v.cuda) == (
            len(facts.gpus), snap.gpu_model, facts.driver_version, facts.cuda_version
        )
    # labels: exactly what the full facts give
    want_labels = {}
    with fleet.db.session() as s:
        for name, (h, _, facts) in full.items():
            h = s.merge(h)
            state = HostState(h.state)
            want_labels[name] = derive_labels(
                h.name,
                facts,
                state,
                h.pool,
                baseline_name_for_host(s, h),
                h.rack,
                h.profiles if state in (HostState.AVAILABLE, HostState.ALLOCATED) else [],
                ExpectedSpec.model_validate(h.expected),
                Fault(h.fault) if h.fault else None,
                **_partial(h),
            )
        want_drift = {}
        for name, (h, _, facts) in full.items():
            base = baseline_for_host(s, s.merge(h))
            assert base is not None
            if items := diff_against_baseline(facts, base):
                want_drift[name] = items
    assert {x.host: x.labels for x in host_labels(fleet)} == want_labels
    # ... from the stored fact_labels alone: the facts documents cannot be read
    with fleet.db.session() as s:
        s.execute(update(FactSnapshot).values(facts={}))
    assert {x.host: x.labels for x in host_labels(fleet)} == want_labels
    # ... and from the facts where fact_labels is missing or of another version
    with fleet.db.session() as s:
        other_version = label_set_id(s, {"v": -1})
        for name, (_, snap, _) in full.items():
            s.execute(
                update(FactSnapshot)
                .where(FactSnapshot.id == snap.id)
                .values(facts=snap.facts, fact_labels_id=other_version if name < "gpu-04" else None)
            )
    assert {x.host: x.labels for x in host_labels(fleet)} == want_labels
    rep = drift(fleet)
    assert rep.by_host == want_drift
    assert "gpu-02" in rep.by_host  # the driver change is drift against b1
    assert list(rep.by_host) == sorted(rep.by_host)
    summary = fleet_summary(fleet)
    assert summary.gpus_total == sum(len(f.gpus) for _, _, f in full.values())


def test_unchanged_host_writes_no_snapshot_changed_one_does(fleet: Fleet, tmp_path: Path) -> None:
    d = _lab(fleet, tmp_path)
    collect(fleet)
    first = {n: snap.id for n, (_, snap, _) in _full(fleet).items()}
    apply_change(LabFleet.load(d), "gpu-03", driver="999.1.1").save(d)
    rep = collect(fleet)
    after = {n: snap.id for n, (_, snap, _) in _full(fleet).items()}
    by = {r.host: r for r in rep.results}
    for name in first:
        if name == "gpu-03":
            assert after[name] != first[name]
            assert any("driver" in c for c in by[name].changes)
        else:  # seen unchanged: the result points at the same snapshot
            assert after[name] == first[name] and by[name].snapshot_id == first[name]
            assert by[name].changes == []
    with fleet.db.session() as s:
        assert s.scalar(select(func.count(FactSnapshot.id))) == 8
        changed = s.scalars(
            select(Event.host_name).where(Event.kind == EventKind.CHANGE_DETECTED)
        ).all()
        seen = s.scalars(select(Host.last_collected_at)).all()
    assert changed == ["gpu-03"]
    assert all(t is not None for t in seen)
    # forgetting the hash (a snapshot from before migration 0006) stores a new one once
    with fleet.db.session() as s:
        s.execute(update(FactSnapshot).values(content_hash=None))
    collect(fleet)
    with fleet.db.session() as s:
        assert s.scalar(select(func.count(FactSnapshot.id))) == 15


def test_postgresql_plans_the_filtered_host_list_with_indexes(
    fleet: Fleet, tmp_path: Path
) -> None:
    _lab(fleet, tmp_path)
    collect(fleet)
    stmt = latest_facts_query(
        select_hosts("state:enrolled"), Host.state == HostState.ENROLLED, facts=False
    )
    with fleet.db.session() as s:
        if s.get_bind().dialect.name != "postgresql":
            # SQLite: the same query runs and finds the hosts (no planner assertion there)
            assert len(s.execute(stmt).all()) == 7
            return
        compiled = stmt.compile(dialect=s.get_bind().dialect)
        conn = s.connection()
        conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
        plan = "\n".join(
            r[0] for r in conn.exec_driver_sql("EXPLAIN " + str(compiled), compiled.params)
        )
    assert "ix_hosts_state" in plan, plan
    # the snapshot by its id: the primary key, or the read columns' index (0016) led by it
    assert "fact_snapshots_pkey" in plan or "ix_fact_snapshots_read_columns" in plan, plan
    assert "Seq Scan on fact_snapshots" not in plan, plan
    assert "fact_snapshots.facts" not in str(compiled), "the facts document is not read"


def test_migration_0015_backfills_the_latest_snapshots_fact_labels(
    fleet: Fleet, tmp_path: Path
) -> None:
    """A database collected before 0015 gets its hosts' latest snapshots' ``fact_labels``
    on upgrade (equal to what the facts give), and labels read them."""
    from alembic import command
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    from gpufleet.store.db import MIGRATIONS, SCHEMA_REVISION

    _lab(fleet, tmp_path)
    collect(fleet)
    want = {x.host: x.labels for x in host_labels(fleet)}
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    before = ScriptDirectory.from_config(cfg).get_revision("0015").down_revision
    assert isinstance(before, str)
    with fleet.db.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, before)
    fleet.db.migrate()
    assert fleet.db.current_revision() == SCHEMA_REVISION
    full = _full(fleet)
    assert len(full) == 7
    stored = _stored_labels(fleet)
    for name, (_, _snap, facts) in full.items():
        assert stored[name] == fact_labels(facts), name
    assert {x.host: x.labels for x in host_labels(fleet)} == want


def test_migration_0011_recomputes_the_accelerator_columns(fleet: Fleet, tmp_path: Path) -> None:
    """A database whose Ascend/AMD snapshots were stored with nvidia-smi's columns alone (0
    GPUs, no model, memory nor driver) gets them recomputed on upgrade; NVIDIA rows keep
    theirs."""
    from alembic import command
    from alembic.config import Config

    from gpufleet.store.db import MIGRATIONS, SCHEMA_REVISION

    models = ["h100-8x", "ascend-910b3-8x", "mi100-4x"]
    enroll_lab(fleet, tmp_path / "lab", 3, models=models, faults={}, now=fleet.now())
    collect(fleet)
    want = {n: (s.gpu_count, s.gpu_model, s.gpu_memory_mib, s.driver)
            for n, (_, s, _) in _full(fleet).items()}
    assert want["gpu-02"] == (8, "910B3", 65536, "23.0.7")
    assert want["gpu-03"] == (4, "Instinct MI100", 32752, "6.3.6")
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with fleet.db.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0014")
    with fleet.db.session() as s:  # what collection wrote before issue 15's columns
        for name in ("gpu-02", "gpu-03"):
            s.execute(
                update(FactSnapshot)
                .where(FactSnapshot.id == full_id(s, name))
                .values(gpu_count=0, gpu_model=None, gpu_memory_mib=None, driver=None)
            )
    assert {v.name: v.gpu_count for v in list_hosts(fleet)} == {
        "gpu-01": 8, "gpu-02": 0, "gpu-03": 0}
    fleet.db.migrate()
    assert fleet.db.current_revision() == SCHEMA_REVISION
    got = {n: (s.gpu_count, s.gpu_model, s.gpu_memory_mib, s.driver)
           for n, (_, s, _) in _full(fleet).items()}
    assert got == want
    assert {v.name: v.gpu_count for v in list_hosts(fleet)} == {
        "gpu-01": 8, "gpu-02": 8, "gpu-03": 4}


def full_id(s: Any, name: str) -> int:
    """The latest snapshot id of host ``name``."""
    sid = s.scalar(select(Host.latest_snapshot_id).where(Host.name == name))
    assert isinstance(sid, int)
    return sid
