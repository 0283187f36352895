"""A NotReady node's alarm carries the BMC's view and the recommended step (issue 24, item 8):
the real ``kubernetes`` client against kmock (see tests/export/test_k8s_sync.py) and the
sushy-tools static emulator (public-tower: On, health OK) as the host's BMC, both databases.
The BMC is read once, when the alarm opens, not at every sync. Fails on 84be469."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.bmc.conftest import BMC_PASSWORD, BMC_USER
from tests.bmc.redfishlab import Emulator
from tests.export.test_k8s_sync import Kmock, _lab, _node

from gpufleet.inventory import load_inventory
from gpufleet.service.core.alarms import list_alarms
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.exports.k8s import KubeNodes, k8s_sync
from gpufleet.service.hosts import bmc
from gpufleet.service.hosts.enroll import enroll
from gpufleet.service.hosts.validate import validate

pytestmark = [
    pytest.mark.xdist_group("redfish"),
    pytest.mark.filterwarnings("ignore:read_binary is deprecated:DeprecationWarning"),
]


def test_not_ready_alarm_carries_the_bmc_view_once(
    fleet: Fleet, tmp_path: Path, static_bmc: Emulator
) -> None:
    d = tmp_path / "lab"
    d.mkdir()
    _lab(fleet, d, {})
    enroll(fleet, load_inventory(d / "inventory.ini"))
    validate(fleet)
    pw = tmp_path / "bmc.pw"
    pw.write_text(BMC_PASSWORD + "\n")
    bmc.set_bmc(fleet, "gpu-02", address=static_bmc.url, username=BMC_USER,
                password_file=str(pw))
    not_ready = _node("gpu-02", "8")
    not_ready["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    cluster = Kmock([_node("gpu-01", "8"), not_ready, _node("gpu-03", "8")])
    try:
        api = KubeNodes(cluster.kubeconfig(tmp_path / "kubeconfig"))
        k8s_sync(fleet, api=api)
        reads = len(bmc.bmc_history(fleet, "gpu-02"))
        k8s_sync(fleet, api=api)  # the alarm is open: no second read
        assert len(bmc.bmc_history(fleet, "gpu-02")) == reads == 1
    finally:
        cluster.close()
    (alarm,) = [a for a in list_alarms(fleet) if a.kind == "k8s-node-not-ready"]
    assert alarm.host == "gpu-02"
    assert "recommended: restart the kubelet" in alarm.message
    assert "BMC says power On, health OK" in alarm.message
    assert alarm.data["bmc"]["power_state"] == "On"
