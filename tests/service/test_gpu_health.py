"""GPU-level health on SQLite and PostgreSQL: a lab host with one GPU lost, in a pool whose
health policy keeps partial hosts, stays available as a 7-GPU host (labels, capacity and
placement count 7) and never serves an 8-GPU request; under the default policy it leaves
service."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from gpufleet.domain.placement import Request
from gpufleet.lab.demo import enroll_lab
from gpufleet.lab.fleet import LabFleet, apply_change
from gpufleet.service.allocation import allocation, capacity
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts import gpu_health
from gpufleet.service.hosts.validate import validate
from gpufleet.service.views.hosts import list_hosts
from gpufleet.service.views.summary import host_labels
from gpufleet.store.tables import Host, PartEvent


def _lab(fleet: Fleet, tmp_path: Path, n: int = 2) -> Path:
    d = tmp_path / "lab"
    enroll_lab(fleet, d, n, models=["h100-8x"], faults={})
    validate(fleet)
    return d


def _lose_gpu(d: Path, host: str) -> None:
    apply_change(LabFleet.load(d), host, add_faults=["gpu-missing"]).save(d)


def _states(fleet: Fleet) -> dict[str, str]:
    return {v.name: v.state for v in list_hosts(fleet)}


def test_partial_pool_keeps_a_7_gpu_host_out_of_8_gpu_requests(
    fleet: Fleet, tmp_path: Path
) -> None:
    d = _lab(fleet, tmp_path)
    pool = LabFleet.load(d).host("gpu-01").spec.pool
    policy = gpu_health.set_pool_health_policy(fleet, pool, gpu_fault="partial")
    assert policy.gpu_fault.value == "partial"
    _lose_gpu(d, "gpu-01")
    validate(fleet)  # collection sees 7 of 8 GPUs on the bus; the pool keeps partial hosts
    assert _states(fleet) == {"gpu-01": "available", "gpu-02": "available"}
    with fleet.db.session() as s:
        h = s.query(Host).filter_by(name="gpu-01").one()
        assert h.usable_gpus == 7
        assert [u["index"] for u in h.unusable_gpus or []] == [None]  # the driver lost it
        assert "lost by the driver" in (h.unusable_gpus or [{}])[0]["reason"]
    labels = {hl.host: hl.labels for hl in host_labels(fleet)}
    assert labels["gpu-01"]["nvidia.com/gpu.count"] == "7"
    assert labels["gpu-01"]["gpufleet.io/gpus.unusable"] == "1"
    assert labels["gpu-02"]["nvidia.com/gpu.count"] == "8"
    assert "gpufleet.io/gpus.unusable" not in labels["gpu-02"]
    report = capacity.capacity(fleet)
    assert report.totals["free"] == 15
    # an 8-GPU request goes to the whole host; with it taken, the 7-GPU host is refused
    one = allocation.allocate(
        fleet, Request(gpus=8), owner="a", purpose="p", duration=timedelta(hours=1)
    )
    assert one.lease is not None and one.lease.hosts == ["gpu-02"]
    two = allocation.allocate(
        fleet, Request(gpus=8), owner="b", purpose="q", duration=timedelta(hours=1)
    )
    assert two.lease is None and two.refusal is not None
    seven = allocation.allocate(
        fleet, Request(gpus=7), owner="c", purpose="r", duration=timedelta(hours=1)
    )
    assert seven.lease is not None and seven.lease.hosts == ["gpu-01"]
    assert seven.lease.gpus == 7


def test_default_policy_takes_the_host_out_and_ecc_gpu_is_named(
    fleet: Fleet, tmp_path: Path
) -> None:
    d = _lab(fleet, tmp_path)
    _lose_gpu(d, "gpu-01")
    validate(fleet)
    assert _states(fleet)["gpu-01"] == "quarantined"
    # an uncorrectable ECC GPU in a partial pool: named by index and serial, history kept
    pool = LabFleet.load(d).host("gpu-02").spec.pool
    gpu_health.set_pool_health_policy(fleet, pool, gpu_fault="partial")
    apply_change(LabFleet.load(d), "gpu-02", add_faults=["ecc-uncorrectable"]).save(d)
    validate(fleet)
    assert _states(fleet)["gpu-02"] == "available"
    with fleet.db.session() as s:
        h = s.query(Host).filter_by(name="gpu-02").one()
        assert h.usable_gpus == 7
        (bad,) = h.unusable_gpus or []
        assert bad["index"] is not None and bad["serial"]
        assert "uncorrectable ECC" in bad["reason"]
        ev = s.query(PartEvent).filter_by(serial=bad["serial"]).one()
        assert ev.kind == "unusable" and ev.host_name == "gpu-02"
    # the fault cleared (GPU replaced): every GPU usable again after validation
    apply_change(LabFleet.load(d), "gpu-02", clear_faults=["all"]).save(d)
    validate(fleet)
    with fleet.db.session() as s:
        h = s.query(Host).filter_by(name="gpu-02").one()
        assert h.usable_gpus is None and h.unusable_gpus is None
