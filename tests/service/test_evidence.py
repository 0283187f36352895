"""Active tests run through a host's transport, stored, and used by validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.errors import ConfigError, NotFound
from gpufleet.lab.demo import enroll_lab, validated_baselines
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.collect import collect
from gpufleet.service.hosts.evidence import run_active
from gpufleet.service.hosts.validate import validate
from gpufleet.service.views.hosts import list_events


def lab(fleet: Fleet, tmp_path: Path, model: str = "a100-8x") -> None:
    fl = enroll_lab(fleet, tmp_path / "lab", 2, models=[model],
                    faults={"gpu-02": ["unreachable"]})
    collect(fleet)
    validated_baselines(fleet, fl)  # the training profiles ask for one (issue 24 item 5)


def test_active_tests_run_stored_and_used(fleet: Fleet, tmp_path: Path) -> None:
    lab(fleet, tmp_path)
    runs = {r.host: r for r in run_active(fleet, None, "dcgm", level=2)}
    assert runs["gpu-01"].ok and "level 2, 8 GPUs" in runs["gpu-01"].summary
    assert not runs["gpu-02"].ok and runs["gpu-02"].summary.startswith("unreachable")
    nccl = run_active(fleet, "gpu-01", "nccl")[0]
    assert nccl.result is not None and nccl.result["avg_bus_bw_gbps"] == pytest.approx(68.4048)
    stored = [e for e in list_events(fleet, "gpu-01", kind="evidence")]
    assert [e["data"]["kind"] for e in stored] == ["nccl", "dcgm_diag"]
    # The real 8x A100 run peaks at 235 GB/s: above the A100 SXM floor (210).
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


def test_an_all_reduce_below_the_model_floor_is_not_multinode(
    fleet: Fleet, tmp_path: Path
) -> None:
    """The same A100 run replayed on an H100 host: far below the H100 SXM floor (315 GB/s);
    on main 84be469 any NCCL result (or none) made it training-multinode."""
    lab(fleet, tmp_path, "h100-8x")
    run_active(fleet, "gpu-01", "dcgm", level=2)
    run_active(fleet, "gpu-01", "nccl")
    v = validate(fleet, "gpu-01").verdicts[0]
    assert v.state == "available"
    assert "training-single" in v.profiles and "training-multinode" not in v.profiles
    assert v.held_out["training-multinode"] == [
        "nccl: NCCL all-reduce peak busbw 235.26 GB/s below the H100 SXM5 floor 315 GB/s"]
    assert "diag_failed" in v.faults
    with pytest.raises(ConfigError):
        run_active(fleet, None, "memtest")
    with pytest.raises(NotFound):
        run_active(fleet, "nope-*", "dcgm")
