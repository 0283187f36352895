"""The remediation ladder reaches the hardware (issue 24, item 8), on a real sshd lab host
whose BMC is the sushy-tools dynamic emulator, both databases: a named service is restarted
in-band and verified; a reboot of a host that does not answer SSH falls back to a power cycle
through the BMC and waits for the host to come back (each rung recorded with its outcome);
with the BMC's identity alarm open the power cycle is refused (exit 5 when asked directly).
Fails on 84be469 (no restart-service, no BMC fallback: the reboot just failed)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from tests.bmc.conftest import BMC_PASSWORD, BMC_USER
from tests.bmc.redfishlab import Emulator, system_uuid
from tests.sshlab_fixtures import SshLabFactory

from gpufleet.domain.remediation import Action
from gpufleet.errors import IdentityMismatch, UsageError
from gpufleet.inventory import load_inventory
from gpufleet.lab.fleet import create_fleet
from gpufleet.lab.renderers import render_sections
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.health import remediation
from gpufleet.service.hosts import bmc
from gpufleet.service.hosts.enroll import enroll
from gpufleet.service.hosts.validate import validate
from gpufleet.service.views.hosts import list_events

pytestmark = [pytest.mark.xdist_group("redfish"), pytest.mark.sshlab]
SYSTEM = 3


def test_restart_service_then_bmc_power_cycle_when_ssh_is_down(
    fleet: Fleet, sshlab_factory: SshLabFactory, tmp_path: Path, dynamic_bmc: Emulator
) -> None:
    pw = tmp_path / "bmc.pw"
    pw.write_text(BMC_PASSWORD + "\n")
    (lh,) = create_fleet(1, models=["a100-8x"], faults={}).hosts
    name = lh.name
    lab = sshlab_factory()
    t = lab.add_host(name, render_sections(lh))
    lab.start()
    (tmp_path / "hosts.ini").write_text(
        f"[gpu]\n{name} ansible_host={t.address} ansible_port={t.port} ansible_user={t.user} "
        f"gpufleet_bmc_address={dynamic_bmc.url} gpufleet_bmc_system={system_uuid(SYSTEM)}\n"
        f"\n[gpu:vars]\nansible_ssh_private_key_file={lab.client_key}\ngpufleet_gpu_count=8\n"
        f"gpufleet_bmc_username={BMC_USER}\ngpufleet_bmc_password_file={pw}\n"
    )
    enroll(fleet, load_inventory(tmp_path / "hosts.ini"))
    assert [v.state for v in validate(fleet).verdicts] == ["available"]

    # the first rung: restart a named service, verified
    with pytest.raises(UsageError, match="needs --service"):
        remediation.remediate(fleet, name, Action.RESTART_SERVICE)
    got = remediation.remediate(fleet, name, Action.RESTART_SERVICE, service="kubelet")
    assert got.ok and [(s.action, s.outcome) for s in got.steps] == [("restart-service", "ok")]
    assert "kubelet restarted, active" in got.steps[0].detail
    assert "systemctl restart kubelet" in lab.calls(name)
    assert [v.state for v in validate(fleet).verdicts] == ["available"]

    # SSH down: the in-band reboot cannot run, the BMC power-cycles the machine, which
    # comes back (its sshd starts a few seconds later, as after a boot)
    lab.stop_host(name)
    boot = threading.Timer(5.0, lab.start_host, [name])
    boot.start()
    try:
        got = remediation.remediate(fleet, name, Action.REBOOT, timeout_s=10, reboot_wait_s=40)
    finally:
        boot.join()
    assert [(s.action, s.outcome) for s in got.steps] == [
        ("reboot", "failed"), ("power-cycle", "ok")], got.steps
    assert "connect" in got.steps[0].detail.lower()
    assert "power cycled through the BMC (power On)" in got.steps[1].detail
    assert "the host answers again" in got.steps[1].detail
    assert got.ok and got.state == "validating"
    msgs = [e["message"] for e in list_events(fleet, name, limit=100)]
    assert any(m.startswith("power cycle: On") for m in msgs), msgs
    assert any(m.startswith("power-cycle ok:") for m in msgs), msgs
    rungs = [(r["action"], r["outcome"]) for r in remediation.ladder(fleet, name)]
    assert rungs == [("restart-service", "ok"), ("reboot", "failed"), ("power-cycle", "ok")]
    assert [v.state for v in validate(fleet).verdicts] == ["available"]

    # the BMC now says another machine: the fallback is refused, naming the alarm
    bmc.set_bmc(fleet, name, uuid="11111111-2222-3333-4444-555555555555")
    (st,) = bmc.bmc_status(fleet, name)
    assert any(a.startswith("bmc-identity") for a in st.alarms)
    with pytest.raises(IdentityMismatch, match="open bmc-identity alarm") as exc:
        remediation.remediate(fleet, name, Action.POWER_CYCLE)
    assert exc.value.exit_code == 5
    lab.stop_host(name)
    got = remediation.remediate(fleet, name, Action.REBOOT, timeout_s=10, reboot_wait_s=5)
    assert [(s.action, s.outcome) for s in got.steps] == [
        ("reboot", "failed"), ("power-cycle", "refused")]
    assert "bmc-identity alarm" in got.steps[1].detail and not got.ok
