"""The Kubernetes cross-check alarms carry their recommended step and its evidence (issue 24,
item 8), through the real ``kubernetes`` client against kmock (see test_k8s_sync.py), on
SQLite and PostgreSQL: a node whose device plugin advertises 0 GPUs while gpufleet's own last
facts saw all 8 healthy says "restart the device plugin, not the GPUs"; a NotReady node whose
host gpufleet last saw with a GPU missing points at the GPU/driver fault. Fails on 84be469
(no recommendation, no evidence)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from tests.export.test_k8s_sync import Kmock, _lab, _node

from gpufleet.domain.events import AlarmKind
from gpufleet.domain.k8s import HostEvidence, recommend
from gpufleet.domain.placement import Request
from gpufleet.inventory import load_inventory
from gpufleet.service.allocation import allocation
from gpufleet.service.core.alarms import list_alarms
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.exports.k8s import KubeNodes, k8s_sync
from gpufleet.service.hosts.collect import collect
from gpufleet.service.hosts.enroll import enroll
from gpufleet.service.hosts.validate import validate

pytestmark = pytest.mark.filterwarnings("ignore:read_binary is deprecated:DeprecationWarning")


def test_recommend_is_the_plugin_when_gpufleet_saw_every_gpu() -> None:
    ok = HostEvidence(True, "gpufleet's last facts saw all 8 GPUs healthy")
    step, why = recommend(AlarmKind.K8S_GPUS_MISSING, "gpu-02", ok)
    assert step.startswith("restart the device plugin, not the GPUs") and "8 GPUs" in why
    assert "--service kubelet" in recommend(AlarmKind.K8S_NODE_NOT_READY, "gpu-02", ok)[0]
    bad = HostEvidence(False, "saw 7 of 8 GPUs")
    assert recommend(AlarmKind.K8S_GPUS_MISSING, "h", bad)[0].startswith("the GPU/driver fault")
    down = HostEvidence(True, "x", ssh_down=True)
    assert recommend(AlarmKind.K8S_NODE_NOT_READY, "h", down)[0].startswith("power-cycle")
    assert recommend(AlarmKind.K8S_GPUS_MISSING, "h", HostEvidence())[0].startswith("collect")


def test_cross_check_alarms_carry_step_and_evidence(fleet: Fleet, tmp_path: Path) -> None:
    not_ready = _node("gpu-03", "8")
    not_ready["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    cluster = Kmock([_node("gpu-01", "8"), _node("gpu-02", "0"), not_ready])
    try:
        d = tmp_path / "lab"
        d.mkdir()
        _lab(fleet, d, {})
        enroll(fleet, load_inventory(d / "inventory.ini"))
        validate(fleet)
        # gpu-03 is leased, then loses a GPU: collection records it (the lease runs on)
        got = allocation.allocate(fleet, Request(hosts=1), owner="a", purpose="p",
                                  duration=timedelta(hours=1), selector="gpu-03")
        assert got.lease is not None
        _lab(fleet, d, {"gpu-03": ["gpu-missing"]})
        collect(fleet, "gpu-03")
        api = KubeNodes(cluster.kubeconfig(tmp_path / "kubeconfig"))
        k8s_sync(fleet, api=api)
    finally:
        cluster.close()
    alarms = {(a.host, a.kind): a for a in list_alarms(fleet)}
    plugin = alarms[("gpu-02", "k8s-gpus-missing")]
    assert "recommended: restart the device plugin, not the GPUs" in plugin.message
    assert "saw all 8 GPUs healthy" in plugin.message
    assert plugin.data["recommended"].startswith("restart the device plugin")
    assert "--service device-plugin" in plugin.data["recommended"]
    fault = alarms[("gpu-03", "k8s-node-not-ready")]
    assert "recommended: the GPU/driver fault" in fault.message
    assert "saw 7 of 8 GPUs" in fault.data["evidence"], fault.data
