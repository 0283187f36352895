"""The ``host-unreachable`` alarm of a host with a BMC carries what the BMC says (issue 24,
item 2): a real sshd host whose sshd is stopped, its BMC the sushy-tools emulators, both
databases. Powered On and healthy: "SSH down but BMC says On, health OK: OS hung or host
network down"; powered Off (dynamic emulator): "power Off". Fails on 84be469 (no alarm)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.bmc.conftest import BMC_PASSWORD, BMC_USER
from tests.bmc.redfishlab import Emulator, system_uuid
from tests.sshlab_fixtures import SshLabFactory

from gpufleet.domain.bmc import PowerAction
from gpufleet.inventory import load_inventory
from gpufleet.lab.fleet import create_fleet
from gpufleet.lab.renderers import render_sections
from gpufleet.service.core.alarms import list_alarms
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts import bmc
from gpufleet.service.hosts.collect import collect
from gpufleet.service.hosts.enroll import enroll
from gpufleet.service.hosts.validate import validate
from gpufleet.service.views.hosts import show_host

pytestmark = [pytest.mark.xdist_group("redfish"), pytest.mark.sshlab]


def test_the_unreachable_alarm_carries_the_bmc_view(
    fleet: Fleet, sshlab_factory: SshLabFactory, tmp_path: Path,
    static_bmc: Emulator, dynamic_bmc: Emulator,
) -> None:
    pw = tmp_path / "bmc.pw"
    pw.write_text(BMC_PASSWORD + "\n")
    lab = sshlab_factory()
    lines = []
    bmcs = [f"gpufleet_bmc_address={static_bmc.url}",
            f"gpufleet_bmc_address={dynamic_bmc.url} gpufleet_bmc_system={system_uuid(5)}"]
    hosts = create_fleet(2, models=["a100-8x"], faults={}).hosts
    for lh, where in zip(hosts, bmcs, strict=True):
        t = lab.add_host(lh.name, render_sections(lh))
        lines.append(f"{lh.name} ansible_host={t.address} ansible_port={t.port} "
                     f"ansible_user={t.user} {where}")
    lab.start()
    (tmp_path / "hosts.ini").write_text(
        "[gpu]\n" + "\n".join(lines) + "\n\n[gpu:vars]\n"
        f"ansible_ssh_private_key_file={lab.client_key}\ngpufleet_gpu_count=8\n"
        f"gpufleet_bmc_username={BMC_USER}\ngpufleet_bmc_password_file={pw}\n"
    )
    enroll(fleet, load_inventory(tmp_path / "hosts.ini"))
    assert [v.state for v in validate(fleet).verdicts] == ["available", "available"]
    on, off = hosts[0].name, hosts[1].name
    assert bmc.power(fleet, off, PowerAction.OFF, settle_s=20).power_state == "Off"
    lab.stop_host(on)
    lab.stop_host(off)
    for _ in range(2):
        collect(fleet, timeout_s=10)
    alarms = {a.host: a for a in list_alarms(fleet) if a.kind == "host-unreachable"}
    assert set(alarms) == {on, off}
    a_on, a_off = alarms[on], alarms[off]
    assert "BMC says power On, health OK" in a_on.message
    assert "SSH down but BMC says On, health OK: OS hung or host network down" in a_on.message
    assert "SEL entr" in a_on.message
    assert a_on.data["bmc"]["power_state"] == "On"
    assert "BMC says power Off" in a_off.message and "powered off" in a_off.message
    # the recommended step follows what the BMC says (issue 24, item 2 and the ladder's
    # "BMC power cycle when the host is unreachable")
    assert a_on.data["action"] == "power-cycle"
    step = f"recommended: power-cycle (gpufleet remediate {on} --action power-cycle)"
    assert step in a_on.message
    assert a_off.data["action"] == "power-on"
    assert f"recommended: power-on (gpufleet bmc power on {off})" in a_off.message
    for name in (on, off):
        v = show_host(fleet, name).view
        assert (v.state, v.fault) == ("validating", "unreachable")
