"""Active tests run through a host's transport, stored, and used by validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.errors import ConfigError, NotFound
from gpufleet.lab.demo import enroll_lab
from gpufleet.service.evidence import run_active
from gpufleet.service.fleet import Fleet
from gpufleet.service.hosts import list_events
from gpufleet.service.validate import validate


def lab(fleet: Fleet, tmp_path: Path) -> None:
    enroll_lab(fleet, tmp_path / "lab", 2, models=["h100-8x"], faults={"gpu-02": ["unreachable"]})


def test_active_tests_run_stored_and_used(fleet: Fleet, tmp_path: Path) -> None:
    lab(fleet, tmp_path)
    runs = {r.host: r for r in run_active(fleet, None, "dcgm", level=2)}
    assert runs["gpu-01"].ok and "level 2, 8 GPUs" in runs["gpu-01"].summary
    assert not runs["gpu-02"].ok and runs["gpu-02"].summary.startswith("unreachable")
    nccl = run_active(fleet, "gpu-01", "nccl")[0]
    assert nccl.result is not None and nccl.result["avg_bus_bw_gbps"] == pytest.approx(68.4048)
    stored = [e for e in list_events(fleet, "gpu-01", kind="evidence")]
    assert [e["data"]["kind"] for e in stored] == ["nccl", "dcgm_diag"]
    v = {x.host: x for x in validate(fleet, "gpu-01").verdicts}["gpu-01"]
    assert v.state == "available" and "training-multinode" in v.profiles
    # The operator's profile overlay raises the NCCL floor above the measured 68.4 GB/s.
    overlay = tmp_path / "profiles.yaml"
    overlay.write_text("profiles:\n  training-multinode:\n    checks:\n"
                       "      nccl: {min_busbw_gbps: 100}\n")
    fleet.settings.profiles_file = overlay
    v = validate(fleet, "gpu-01").verdicts[0]
    assert v.state == "available"
    assert "training-multinode" not in v.profiles and "training-single" in v.profiles
    with pytest.raises(ConfigError):
        run_active(fleet, None, "memtest")
    with pytest.raises(NotFound):
        run_active(fleet, "nope-*", "dcgm")
