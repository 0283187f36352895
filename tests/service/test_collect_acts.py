"""Collection acts on what it sees (A.5-A.7), on SQLite and PostgreSQL, through the sim lab:

- evidence (DCGM / NCCL / gpu-burn) counts only for the hardware it tested: a detected or
  declared change since it was recorded drops it;
- a new critical fault on an ``available`` host takes it out in the same ``collect`` run;
- a changed host key quarantines and taints the host;
- (the same machine under two names: tests/e2e/test_one_machine_ssh.py, real sshd).
"""

from __future__ import annotations

from pathlib import Path

from gpufleet.collect.transport import Outcome
from gpufleet.domain.changes import DeclaredChangeKind
from gpufleet.lab.demo import enroll_lab, validated_baselines
from gpufleet.lab.fleet import LabFleet, apply_change
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts import operations
from gpufleet.service.hosts.collect import collect
from gpufleet.service.hosts.evidence import run_active
from gpufleet.service.hosts.validate import validate
from gpufleet.service.views.hosts import list_events, show_host
from gpufleet.service.views.summary import host_labels


def lab(fleet: Fleet, tmp_path: Path, n: int = 2) -> Path:
    d = tmp_path / "lab"
    fl = enroll_lab(fleet, d, n, models=["h100-8x"], faults={})
    collect(fleet)
    validated_baselines(fleet, fl)  # training asks for the pool's validated baseline (issue 24)
    return d


def available(fleet: Fleet, name: str) -> None:
    v = {x.host: x for x in validate(fleet, name).verdicts}[name]
    assert v.state == "available", v


def require_dcgm(fleet: Fleet, tmp_path: Path) -> None:
    overlay = tmp_path / "profiles.yaml"
    overlay.write_text(
        "profiles:\n  training-single:\n    checks:\n      dcgm_diag: {require: true}\n"
    )
    fleet.settings.profiles_file = overlay


# ------------------------------------------------------------------------- A.5 evidence


def test_evidence_before_a_declared_change_no_longer_counts(fleet: Fleet, tmp_path: Path) -> None:
    lab(fleet, tmp_path)
    require_dcgm(fleet, tmp_path)
    available(fleet, "gpu-01")
    assert "training-single" not in show_host(fleet, "gpu-01").view.profiles  # no DCGM yet
    assert run_active(fleet, "gpu-01", "dcgm", level=2)[0].ok
    available(fleet, "gpu-01")
    assert "training-single" in show_host(fleet, "gpu-01").view.profiles
    # The operator upgrades the driver: the DCGM run tested the old one.
    operations.record_change(fleet, "gpu-01", DeclaredChangeKind.DRIVER_UPGRADE, "CHG-1")
    v = validate(fleet, "gpu-01").verdicts[0]
    assert v.state == "available"
    assert "training-single" not in v.profiles and "inference" in v.profiles
    # A fresh run on the changed host counts again.
    assert run_active(fleet, "gpu-01", "dcgm", level=2)[0].ok
    assert "training-single" in validate(fleet, "gpu-01").verdicts[0].profiles


def test_evidence_before_a_detected_change_no_longer_counts(fleet: Fleet, tmp_path: Path) -> None:
    d = lab(fleet, tmp_path)
    require_dcgm(fleet, tmp_path)
    assert run_active(fleet, "gpu-01", "dcgm", level=2)[0].ok
    available(fleet, "gpu-01")
    assert "training-single" in show_host(fleet, "gpu-01").view.profiles
    # A GPU is swapped (RMA): the next collection sees the new board.
    apply_change(LabFleet.load(d), "gpu-01", gpu_swap=True).save(d)
    v = validate(fleet, "gpu-01").verdicts[0]
    assert any(e["kind"] == "change-detected" for e in list_events(fleet, "gpu-01"))
    assert "training-single" not in v.profiles
    # gpu-02 changed nothing: its own evidence still counts.
    assert run_active(fleet, "gpu-02", "dcgm", level=2)[0].ok
    available(fleet, "gpu-02")
    available(fleet, "gpu-02")
    assert "training-single" in show_host(fleet, "gpu-02").view.profiles


# ------------------------------------------------------------- A.6 critical faults at once


def _collect_one(fleet: Fleet, name: str) -> None:
    rep = collect(fleet, name)
    assert [r.host for r in rep.results] == [name]


def test_fatal_xid_on_available_host_quarantines_in_the_collect_run(
    fleet: Fleet, tmp_path: Path
) -> None:
    d = lab(fleet, tmp_path)
    available(fleet, "gpu-01")
    apply_change(LabFleet.load(d), "gpu-01", add_faults=["xid:79"], now=fleet.now()).save(d)
    rep = collect(fleet)
    r = {x.host: x for x in rep.results}["gpu-01"]
    assert r.outcome is Outcome.OK
    assert r.actions and r.actions[0].startswith("quarantined: xid: fatal")
    view = show_host(fleet, "gpu-01").view
    assert view.state == "quarantined" and view.fault == "fatal_xid"
    assert show_host(fleet, "gpu-02").view.state == "enrolled"  # untouched
    taints = {t.key: t.value for t in host_labels(fleet, "gpu-01")[0].taints}
    assert taints.get("gpufleet.io/quarantined") == "fatal_xid"


def test_uncorrectable_ecc_and_lost_gpu_quarantine_at_collect(fleet: Fleet, tmp_path: Path) -> None:
    d = lab(fleet, tmp_path)
    available(fleet, "gpu-01")
    available(fleet, "gpu-02")
    fl = apply_change(LabFleet.load(d), "gpu-01", add_faults=["ecc-uncorrectable"])
    apply_change(fl, "gpu-02", add_faults=["gpu-missing"]).save(d)
    collect(fleet)
    one, two = show_host(fleet, "gpu-01").view, show_host(fleet, "gpu-02").view
    assert (one.state, one.fault) == ("quarantined", "ecc_uncorrectable")
    assert (two.state, two.fault) == ("quarantined", "gpu_lost")
    assert two.status_reason and "gpu_count" in two.status_reason


def test_non_critical_change_waits_for_validate(fleet: Fleet, tmp_path: Path) -> None:
    """A down IB port is not a hardware fault: collection leaves the verdict to validate."""
    d = lab(fleet, tmp_path)
    available(fleet, "gpu-01")
    apply_change(LabFleet.load(d), "gpu-01", add_faults=["ib-down"]).save(d)
    r = collect(fleet, "gpu-01").results[0]
    assert r.actions == []
    assert show_host(fleet, "gpu-01").view.state == "available"


def test_changed_host_key_takes_host_out_and_taints_it(fleet: Fleet, tmp_path: Path) -> None:
    d = lab(fleet, tmp_path)
    available(fleet, "gpu-01")
    apply_change(LabFleet.load(d), "gpu-01", add_faults=["host-key-changed"]).save(d)
    r = collect(fleet, "gpu-01").results[0]
    assert r.outcome is Outcome.HOST_KEY_CHANGED
    view = show_host(fleet, "gpu-01").view
    assert view.state == "quarantined" and view.fault == "host_key_changed"
    assert view.profiles == []
    labels = host_labels(fleet, "gpu-01")[0]
    assert {t.key: t.value for t in labels.taints}["gpufleet.io/quarantined"] == "host_key_changed"
    kinds = [e["kind"] for e in list_events(fleet, "gpu-01")]
    assert "alarm" in kinds
