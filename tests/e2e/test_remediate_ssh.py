"""``gpufleet remediate`` on a real sshd lab host, both databases: a GPU reset refuses while a
process uses the GPU (nothing is reset), runs once it is gone and the host re-validates; a
reset that fails collects an nvidia-bug-report and falls back to a reboot (policy); a service
request puts the host in maintenance with the ticket and ETA, shown by ``summary``; the
ladder and the GPU's parts history keep every rung."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select
from tests.sshlab_fixtures import SshLabFactory

from gpufleet.domain.facts import HostFacts
from gpufleet.domain.remediation import Action
from gpufleet.inventory import load_inventory
from gpufleet.lab.fleet import create_fleet
from gpufleet.lab.renderers import render_sections
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.health import parts, remediation
from gpufleet.service.hosts import gpu_health
from gpufleet.service.hosts.enroll import enroll
from gpufleet.service.hosts.validate import validate
from gpufleet.service.views.summary import fleet_summary
from gpufleet.store.tables import FactSnapshot, Host, Remediation

pytestmark = pytest.mark.sshlab


def test_reset_refuses_while_held_runs_then_revalidates_and_service_request_eta(
    fleet: Fleet, sshlab_factory: SshLabFactory, tmp_path: Path
) -> None:
    (lh,) = create_fleet(1, models=["a100-8x"], faults={}).hosts
    lab = sshlab_factory()
    t = lab.add_host(lh.name, render_sections(lh))
    lab.start()
    (tmp_path / "hosts.ini").write_text(
        "[gpu]\n"
        f"{lh.name} ansible_host={t.address} ansible_port={t.port} ansible_user={t.user} "
        "gpufleet_pool=train\n\n[gpu:vars]\n"
        f"ansible_ssh_private_key_file={lab.client_key}\ngpufleet_gpu_count=8\n"
    )
    enroll(fleet, load_inventory(tmp_path / "hosts.ini"))
    assert [v.state for v in validate(fleet).verdicts] == ["available"]
    with fleet.db.session() as s:
        h = s.scalars(select(Host)).one()
        snap = s.get(FactSnapshot, h.latest_snapshot_id)
        assert snap is not None
        gpu0 = HostFacts.model_validate(snap.facts).gpus[0]
    assert gpu0.uuid and gpu0.serial

    # a training process holds GPU 0: refused, nothing reset, the host stays available
    lab.set_remediation(lh.name, compute_apps=[f"4242, python3, {gpu0.uuid}"], open_pids=[4242])
    got = remediation.remediate(fleet, lh.name, Action.RESET_GPU, gpu=0)
    assert not got.ok and [st.outcome for st in got.steps] == ["refused"]
    assert "compute python3 (pid 4242)" in got.steps[0].detail
    assert got.state == "available"
    assert not any(c.startswith("nvidia-smi -r") for c in lab.calls(lh.name))

    # the process is gone: reset, verified, the host goes to validation and passes again
    lab.set_remediation(lh.name)
    got = remediation.remediate(fleet, lh.name, Action.RESET_GPU, gpu=0)
    assert got.ok, got.steps
    assert "reset and verified" in got.steps[0].detail
    assert "nvidia-smi -r -i 0" in lab.calls(lh.name)
    assert got.state == "validating"
    assert [v.state for v in validate(fleet).verdicts] == ["available"]

    # the reset fails: bug report collected, then the reboot the policy falls back to
    lab.set_remediation(lh.name, reset_fails="Unable to reset GPU 00000000:07:00.0")
    got = remediation.remediate(fleet, lh.name, Action.RESET_GPU, gpu=0, reboot_wait_s=30)
    assert [(st.action, st.outcome) for st in got.steps] == [
        ("reset-gpu", "failed"),
        ("reboot", "ok"),
    ]
    assert got.steps[0].bug_report and got.steps[0].bug_report.endswith(".gz")
    calls = lab.calls(lh.name)
    assert any(c.startswith("nvidia-bug-report.sh --output-file") for c in calls)
    assert "systemctl reboot" in calls
    # without the fallback the failed reset is the last rung
    gpu_health.set_pool_health_policy(fleet, "train", fallback_reboot=False)
    validate(fleet)
    got = remediation.remediate(fleet, lh.name, Action.RESET_GPU, gpu=0)
    assert [st.action for st in got.steps] == ["reset-gpu"] and not got.ok

    # the policy stops holders instead of refusing
    gpu_health.set_pool_health_policy(fleet, "train", holders="stop")
    lab.set_remediation(lh.name, compute_apps=[f"4242, python3, {gpu0.uuid}"], open_pids=[4242])
    validate(fleet)
    got = remediation.remediate(fleet, lh.name, Action.RESET_GPU, gpu=0)
    assert got.ok and got.steps[0].detail.startswith("stopped compute python3 (pid 4242)")

    # a service request: maintenance with the ticket and the expected-back time in summary
    eta = fleet.now() + timedelta(days=3)
    got = remediation.remediate(
        fleet, lh.name, Action.SERVICE_REQUEST, gpu=0, ticket="RMA-123", eta=eta
    )
    assert got.ok and got.state == "maintenance"
    back = fleet_summary(fleet).back
    assert back == [{"host": lh.name, "state": "maintenance", "eta": eta.isoformat()}]

    # the ladder the host climbed, and the GPU's history by serial
    rungs = [(r["action"], r["outcome"]) for r in remediation.ladder(fleet, lh.name)]
    assert rungs == [
        ("reset-gpu", "refused"),
        ("reset-gpu", "ok"),
        ("reset-gpu", "failed"),
        ("reboot", "ok"),
        ("reset-gpu", "failed"),
        ("reset-gpu", "ok"),
        ("service-request", "ok"),
    ]
    with fleet.db.session() as s:
        tickets = select(Remediation.ticket).where(Remediation.ticket.is_not(None))
        assert s.scalars(tickets).all() == ["RMA-123"]
    hist = parts.show_part(fleet, gpu0.serial)
    kinds = [e["kind"] for e in hist.events]
    assert kinds.count("reset-gpu") == 4 and "rma" in kinds and "reboot" in kinds
    assert hist.locations[0]["host"] == lh.name and hist.locations[0]["index"] == 0
