"""Issue 26, the driver/CUDA gate on SQLite and PostgreSQL: ``capacity check --cuda`` and
``allocate --cuda`` leave out the hosts whose NVIDIA driver cannot serve that CUDA, with the
reason (seed 001: an image built for CUDA 12.4 on a node whose driver serves 12.2)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from tests.labproof import prove_lab
from tests.migrated import migrate

from gpufleet.domain.placement import Request
from gpufleet.errors import ConfigError
from gpufleet.lab.demo import enroll_lab
from gpufleet.service.allocation import allocation, capacity
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.validate import validate
from gpufleet.service.views.hosts import list_hosts


def lab(fleet: Fleet, tmp_path: Path) -> None:
    """Three validated 8x H100 hosts; gpu-02 runs driver 535.154.05 (CUDA up to 12.2, on a
    baseline of its own), the others the template's 590 driver."""
    fl = enroll_lab(
        fleet, tmp_path / "lab", 3, models=["h100-8x"],
        faults={"gpu-02": ["driver-drift:535.154.05"]},
    )
    prove_lab(fleet, fl, tmp_path)
    migrate(fleet, ["gpu-02"], "h100-535", reference="gpu-02")  # validated on its driver
    validate(fleet)
    assert {v.name: v.state for v in list_hosts(fleet)} == dict.fromkeys(
        ["gpu-01", "gpu-02", "gpu-03"], "available"
    )


def test_capacity_check_counts_only_drivers_serving_the_cuda(
    fleet: Fleet, tmp_path: Path
) -> None:
    lab(fleet, tmp_path)
    assert capacity.check(fleet, gpus=24, model="H100").ok  # no gate: all three
    short = capacity.check(fleet, gpus=24, model="H100", cuda="12.4")
    assert not short.ok and short.allocatable == 16 and short.missing == 8
    assert "gpu-02: driver 535.154.05 serves CUDA up to 12.2" in short.message
    assert short.cuda == "12.4"
    ok = capacity.check(fleet, gpus=24, model="H100", cuda="12.2")
    assert ok.ok and ok.allocatable == 24
    with pytest.raises(ConfigError, match="MAJOR\\.MINOR"):
        capacity.check(fleet, gpus=8, cuda="twelve")


def test_allocate_with_cuda_never_lands_on_an_old_driver(fleet: Fleet, tmp_path: Path) -> None:
    lab(fleet, tmp_path)
    got = allocation.allocate(
        fleet, Request(hosts=2, cuda="12.4"), owner="a", purpose="img-cu124",
        duration=timedelta(hours=1),
    )
    assert got.lease is not None and sorted(got.lease.hosts) == ["gpu-01", "gpu-03"]
    refused = allocation.allocate(
        fleet, Request(gpus=8, cuda="12.4"), owner="b", purpose="img-cu124",
        duration=timedelta(hours=1),
    )
    assert refused.lease is None and refused.refusal is not None
    assert "gpu-02: driver 535.154.05 serves CUDA up to 12.2" in refused.refusal.message
    # the same image built for 12.2 fits on gpu-02
    fits = allocation.allocate(
        fleet, Request(gpus=8, cuda="12.2"), owner="b", purpose="img-cu122",
        duration=timedelta(hours=1),
    )
    assert fits.lease is not None and fits.lease.hosts == ["gpu-02"]
    with pytest.raises(ConfigError, match="MAJOR\\.MINOR"):
        allocation.allocate(
            fleet, Request(gpus=8, cuda="12"), owner="b", purpose="x",
            duration=timedelta(hours=1),
        )
