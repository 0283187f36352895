"""Issue 8: ``labels`` of a selection derive the part the facts give once per distinct stored
value, expected fabric and partial GPU counts, and put each host's own labels before it.

On both databases, a lab fleet whose hosts share hardware but differ in what the cached part
depends on (expected IB ports, a partial host's usable GPUs) and in what it does not (state,
pool, baseline by pool or by the host's own variable, rack, fault, validated profiles):
each host's labels are those :func:`labels_of` gives for it alone from its stored
``fact_labels``, key by key in the same order (the JSON the API and ``labels --json`` print),
which are those :func:`derive_labels` gives from its full facts; and its taints too.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import TypeAdapter
from sqlalchemy import select

from gpufleet.api.schemas_summary import LabelsOut
from gpufleet.domain.facts import HostFacts
from gpufleet.domain.health import Fault
from gpufleet.domain.labels import derive_labels, derive_taints, usable_fact_labels
from gpufleet.domain.spec import ExpectedSpec
from gpufleet.domain.states import HostState
from gpufleet.lab.demo import enroll_lab
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.baselines import baseline_from_host, save_baseline
from gpufleet.service.hosts.collect import collect
from gpufleet.service.hosts.labels import labels_of
from gpufleet.service.views.summary import host_labels
from gpufleet.store.repo import baseline_name_for_host
from gpufleet.store.tables import FactLabelSet, FactSnapshot, Host, Pool

PROFILES = ["training-multinode", "inference", "test"]


def test_fleet_labels_equal_each_hosts_own_derivation_in_order(
    fleet: Fleet, tmp_path: Path
) -> None:
    enroll_lab(fleet, tmp_path / "lab", 6, models=["a100-8x", "a100-8x", "h100-8x"], faults={})
    collect(fleet)
    save_baseline(fleet, baseline_from_host(fleet, "gpu-01", "b1"))
    with fleet.db.session() as s:
        hosts = {h.name: h for h in s.scalars(select(Host))}
        for h in hosts.values():
            h.state, h.profiles = HostState.AVAILABLE, list(PROFILES)
        pool = hosts["gpu-01"].pool
        assert pool is not None
        s.scalars(select(Pool).where(Pool.name == pool)).one().baseline = "b1"
        hosts["gpu-02"].expected = {**hosts["gpu-02"].expected, "ib_ports": 99}  # fabric none
        hosts["gpu-03"].usable_gpus = 6  # a partial host
        hosts["gpu-03"].unusable_gpus = [{"index": 6}, {"index": 7}]
        hosts["gpu-04"].vars = {**hosts["gpu-04"].vars, "gpufleet_baseline": "own"}
        hosts["gpu-05"].state, hosts["gpu-05"].fault = HostState.QUARANTINED, Fault.GPU_LOST
        hosts["gpu-06"].state, hosts["gpu-06"].profiles = HostState.ALLOCATED, ["inference"]
    rows = host_labels(fleet)
    got = {x.host: x for x in rows}
    # the API's answer, written without a model per host, is the models' JSON byte for byte
    models = TypeAdapter(list[LabelsOut]).dump_json([LabelsOut.of(r) for r in rows])
    assert LabelsOut.json_of(rows) == models
    assert b'"taints":[{"key":"gpufleet.io/quarantined","value":"gpu_lost"' in models
    with fleet.db.session() as s:
        want = {}
        for h, snap, stored_value in s.execute(
            select(Host, FactSnapshot, FactLabelSet.value)
            .join(FactSnapshot, FactSnapshot.id == Host.latest_snapshot_id)
            .outerjoin(FactLabelSet, FactLabelSet.id == FactSnapshot.fact_labels_id)
        ):
            state = HostState(h.state)
            fault = Fault(h.fault) if h.fault else None
            labels = derive_labels(
                h.name,
                HostFacts.model_validate(snap.facts),
                state,
                h.pool,
                baseline_name_for_host(s, h),
                h.rack,
                h.profiles if state in (HostState.AVAILABLE, HostState.ALLOCATED) else [],
                ExpectedSpec.model_validate(h.expected),
                fault,
                usable_gpus=h.usable_gpus,
                unusable_gpus=len(h.unusable_gpus or []),
            )
            # one host at a time from its stored fact_labels (its label set's value, 0017):
            # the same labels in the same order (on PostgreSQL the stored JSONB keeps its own
            # key order, on SQLite the facts' order: then also the order derive_labels gives
            # from the full facts)
            stored = labels_of(
                h, usable_fact_labels(stored_value), baseline_name_for_host(s, h)
            )
            assert stored.labels == labels, h.name
            if fleet.db.dialect == "sqlite":
                assert list(stored.labels.items()) == list(labels.items()), h.name
            want[h.name] = (list(stored.labels.items()), [str(t) for t in stored.taints])
            assert want[h.name][1] == [str(t) for t in derive_taints(state, fault)]
            if state is HostState.ALLOCATED:  # issue 26: no lease found: closed to everyone
                want[h.name][1].append("gpufleet.io/lease=unknown:NoSchedule")
    assert sorted(got) == sorted(want) == [f"gpu-0{i}" for i in range(1, 7)]
    for name, (items, taints) in want.items():
        assert list(got[name].labels.items()) == items, name
        assert [str(t) for t in got[name].taints] == taints, name
    # what differs where it should: fabric, partial GPUs, baseline, fault, profiles
    assert got["gpu-01"].labels["gpufleet.io/fabric"] == "ib"
    assert got["gpu-02"].labels["gpufleet.io/fabric"] == "none"
    assert got["gpu-03"].labels["nvidia.com/gpu.count"] == "6"
    assert got["gpu-03"].labels["gpufleet.io/gpus.unusable"] == "2"
    assert "gpufleet.io/gpus.unusable" not in got["gpu-01"].labels
    assert got["gpu-04"].labels["gpufleet.io/baseline"] == "own"
    assert got["gpu-05"].labels["gpufleet.io/fault"] == "gpu_lost"
    assert "gpufleet.io/validated.inference" not in got["gpu-05"].labels
    assert [k for k in got["gpu-06"].labels if ".validated." in k or "/validated." in k] == [
        "gpufleet.io/validated.inference"
    ]
