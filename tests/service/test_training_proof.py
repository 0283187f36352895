"""Issue 24 item 5 on SQLite and PostgreSQL, on lab hosts answering with real captures: the
training profiles ask for proof (a validated baseline, DCGM, NCCL at the model's floor), a
change makes the proof stale with a reason that names it, and a partial host's gres.conf
lists exactly its usable GPUs' device minors. All fail on main 84be469 (which granted
training-multinode with no evidence and no baseline, and wrote File=/dev/nvidia[0-6])."""

from __future__ import annotations

import json
from pathlib import Path

from gpufleet.domain.changes import DeclaredChangeKind
from gpufleet.lab.demo import enroll_lab, run_evidence, validated_baselines
from gpufleet.lab.fleet import LabFleet
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.exports.slurm import slurm_config
from gpufleet.service.hosts import gpu_health
from gpufleet.service.hosts.operations import record_change
from gpufleet.service.hosts.validate import HostVerdict, validate
from gpufleet.service.views.hosts import show_host


def _verdicts(fleet: Fleet) -> dict[str, HostVerdict]:
    return {v.host: v for v in validate(fleet).verdicts}


def test_training_needs_proof_and_a_change_makes_it_stale(fleet: Fleet, tmp_path: Path) -> None:
    d = tmp_path / "lab"
    lab = enroll_lab(fleet, d, 2, models=["a100-8x"], faults={})
    v = _verdicts(fleet)["gpu-01"]
    # No baseline, no evidence: available for the single-host, non-training profiles only.
    assert v.state == "available" and v.profiles == ["inference", "test"]
    assert v.held_out["training-single"] == [
        "dcgm_diag: no DCGM diag at level 1 or deeper or gpu-burn result (required)",
        "baseline: no baseline assigned",
    ]
    assert v.held_out["training-multinode"] == [
        "dcgm_diag: no DCGM diag at level 2 or deeper result (required)",
        "baseline: no baseline assigned",
        "nccl: no NCCL all-reduce result (required)",
    ]
    validated_baselines(fleet, lab)
    assert all(r.ok for r in run_evidence(fleet, lab))  # DCGM level 2 + the real A100 NCCL
    v = _verdicts(fleet)["gpu-01"]
    assert v.profiles == ["inference", "test", "training-multinode", "training-single"]
    assert v.held_out == {}

    # A declared driver change: the evidence tested something else and no longer counts.
    record_change(fleet, "gpu-01", DeclaredChangeKind.DRIVER_UPGRADE, "CI-4711")
    day = fleet.now().date().isoformat()
    by = _verdicts(fleet)
    v = by["gpu-01"]
    assert v.state == "available" and v.profiles == ["inference", "test"]
    since = f"since the driver change on {day} (required)"
    assert v.held_out["training-multinode"] == [
        f"dcgm_diag: no DCGM diag at level 2 or deeper result {since}",
        f"nccl: no NCCL all-reduce result {since}",
    ]
    assert by["gpu-02"].profiles == ["inference", "test", "training-multinode",
                                     "training-single"]
    # The reason is on the host's page and in its JSON.
    page = show_host(fleet, "gpu-01")
    why = page.view.status_reason or ""
    assert "not training-multinode: dcgm_diag: " in why
    assert f"nccl: no NCCL all-reduce result {since}" in why
    # Proof again after the change: back in the training profiles.
    assert all(r.ok for r in run_evidence(fleet, LabFleet.load(d)))
    assert "training-multinode" in _verdicts(fleet)["gpu-01"].profiles


def test_a_partial_host_gres_lists_its_usable_minors(fleet: Fleet, tmp_path: Path) -> None:
    """Xid 79 on GPU 3 of an 8x A100 host whose pool keeps partial hosts: 7 usable GPUs,
    never training-multinode, gres.conf File= the minors 0-2,4-7 (main: [0-6])."""
    d = tmp_path / "lab"
    lab = enroll_lab(fleet, d, 2, models=["a100-8x"], faults={"gpu-01": ["xid:79:3"]},
                     now=fleet.now())
    gpu_health.set_pool_health_policy(fleet, lab.host("gpu-01").spec.pool, gpu_fault="partial")
    validate(fleet)
    validated_baselines(fleet, lab)
    assert all(r.ok for r in run_evidence(fleet, lab))
    by = _verdicts(fleet)
    v = by["gpu-01"]
    assert v.state == "available"
    assert v.profiles == ["inference", "test", "training-single"]
    assert v.held_out["training-multinode"] == [
        "all_gpus_usable: partial host: GPU 3 unusable: fatal Xid 79"]
    assert "training-multinode" in by["gpu-02"].profiles
    conf, gres = slurm_config(fleet)
    assert "NodeName=gpu-01 Name=gpu Type=a100 File=/dev/nvidia[0-2,4-7]" in gres
    assert "NodeName=gpu-02 Name=gpu Type=a100 File=/dev/nvidia[0-7]" in gres
    assert "NodeName=gpu-01 " in conf and "Gres=gpu:a100:7" in conf
    assert "validated_training-multinode" not in conf.split("NodeName=gpu-02")[0]
    json.dumps(v.held_out)  # plain data for --json
