"""``remediate`` over the ``sim`` transport on SQLite and PostgreSQL: the lab's gpu-process
fault holds the GPU (refused, or stopped under ``holders: stop``), reset-fails makes the reset
fail (bug report, then the reboot fallback), a clean reset sends the host to validation, which
passes; the auto-remediation hook runs only for the rules the pool names."""

from __future__ import annotations

from pathlib import Path

from gpufleet.domain.remediation import Action
from gpufleet.lab.demo import enroll_lab
from gpufleet.lab.fleet import LabFleet, apply_change
from gpufleet.lab.templates import fault_gpu_index
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.health import remediation
from gpufleet.service.hosts import gpu_health
from gpufleet.service.hosts.validate import validate


def _lab(fleet: Fleet, tmp_path: Path) -> tuple[Path, str]:
    d = tmp_path / "lab"
    fl = enroll_lab(fleet, d, 1, models=["a100-8x"], faults={})
    validate(fleet)
    return d, fl.hosts[0].spec.pool


def test_sim_reset_ladder(fleet: Fleet, tmp_path: Path) -> None:
    d, pool = _lab(fleet, tmp_path)
    i = fault_gpu_index(LabFleet.load(d).host("gpu-01"))
    apply_change(LabFleet.load(d), "gpu-01", add_faults=["gpu-process"]).save(d)
    got = remediation.remediate(fleet, "gpu-01", Action.RESET_GPU, gpu=i)
    assert [st.outcome for st in got.steps] == ["refused"] and got.state == "available"
    assert "compute /usr/bin/python (pid 58130)" in got.steps[0].detail
    # an A100 8x is an NVSwitch system: resetting another GPU resets the whole domain, so
    # the process on GPU i still refuses it
    other = (i + 1) % 8
    got = remediation.remediate(fleet, "gpu-01", Action.RESET_GPU, gpu=other)
    assert got.steps[0].outcome == "refused" and got.steps[0].gpus == []
    assert "compute /usr/bin/python (pid 58130)" in got.steps[0].detail
    gpu_health.set_pool_health_policy(fleet, pool, holders="stop")
    got = remediation.remediate(fleet, "gpu-01", Action.RESET_GPU, gpu=i)
    assert got.ok and got.state == "validating"
    assert got.steps[0].detail.startswith("NVSwitch system: the whole reset domain")
    assert "stopped compute /usr/bin/python (pid 58130)" in got.steps[0].detail
    apply_change(LabFleet.load(d), "gpu-01", clear_faults=["all"]).save(d)
    assert [v.state for v in validate(fleet).verdicts] == ["available"]

    apply_change(LabFleet.load(d), "gpu-01", add_faults=["reset-fails"]).save(d)
    got = remediation.remediate(fleet, "gpu-01", Action.RESET_GPU, reboot_wait_s=5)
    assert [(st.action, st.outcome) for st in got.steps] == [
        ("reset-gpu", "failed"),
        ("reboot", "ok"),
    ]
    assert "nvidia-smi -r failed (rc 255)" in got.steps[0].detail
    assert got.steps[0].bug_report == "/var/log/nvidia-bug-report-gpufleet-1.log.gz"
    assert got.state == "validating"

    # the hook the health rules call: only rules the pool names run the first rung
    apply_change(LabFleet.load(d), "gpu-01", clear_faults=["all"]).save(d)
    validate(fleet)
    assert remediation.auto_remediate(fleet, "gpu-01", "xid-79") is None
    gpu_health.set_pool_health_policy(fleet, pool, auto_remediate=["xid-79"])
    auto = remediation.auto_remediate(fleet, "gpu-01", "xid-79")
    assert auto is not None and auto.ok
    assert remediation.ladder(fleet, "gpu-01")[-1]["rule"] == "xid-79"
    # the ladder (hosts show) is read by the fast read layer: the rows as the ORM reads them
    from sqlalchemy import select

    from gpufleet.service.views.hosts import show_host
    from gpufleet.store.tables import Remediation

    with fleet.db.session() as s:
        rows = s.scalars(select(Remediation).order_by(Remediation.started_at, Remediation.id))
        want = [
            {"id": r.id, "at": r.started_at, "action": r.action, "outcome": r.outcome,
             "gpus": list(r.gpus), "ticket": r.ticket, "eta": r.eta, "rule": r.rule,
             "detail": r.detail, "actor": r.actor}
            for r in rows
        ]  # fmt: skip
    assert len(want) >= 4
    assert remediation.ladder(fleet, "gpu-01") == want
    assert show_host(fleet, "gpu-01").remediations == want
