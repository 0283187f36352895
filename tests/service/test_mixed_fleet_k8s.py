"""A mixed lab fleet (8x H100, 8x Ascend 910B3, 4x AMD MI100) synced to Kubernetes (issue 15),
on SQLite and PostgreSQL, through the official client against kmock (see
tests/export/test_k8s_sync.py): gpufleet's and the vendors' labels side by side, the vendors'
labels owned only when told, each vendor's extended resource cross-checked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.export.test_k8s_sync import Kmock
from tests.service.test_mixed_fleet_exports import mixed_fleet

from gpufleet.domain.events import AlarmKind
from gpufleet.service.core.alarms import open_alarms
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.exports.k8s import KubeNodes, k8s_sync
from gpufleet.store.repo import host_by_name


@pytest.fixture
def mixed(fleet: Fleet, tmp_path: Path) -> Fleet:
    return mixed_fleet(fleet, tmp_path / "lab")


def _k8s_node(name: str, allocatable: dict[str, str], **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
        "status": {"allocatable": {"cpu": "96", **allocatable},
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }


def _alarms(fleet: Fleet, host: str) -> list[tuple[str, str]]:
    with fleet.db.session() as s:
        return [(a.kind, a.message) for a in open_alarms(s, [host_by_name(s, host).id])]


@pytest.mark.filterwarnings("ignore:read_binary is deprecated:DeprecationWarning")  # kmock 0.8
def test_k8s_sync_cross_checks_each_vendors_extended_resource(
    mixed: Fleet, tmp_path: Path
) -> None:
    cluster = Kmock([
        _k8s_node("gpu-01", {"nvidia.com/gpu": "8"}),
        # the Ascend device plugin advertises 7 of the 8 NPUs gpufleet sees healthy
        _k8s_node("gpu-02", {"huawei.com/Ascend910": "7"}),
        _k8s_node("gpu-03", {"amd.com/gpu": "4"}),
    ])
    try:
        api = KubeNodes(cluster.kubeconfig(tmp_path / "kubeconfig"))
        report = k8s_sync(mixed, api=api)
        assert [(f.host, f.kind) for f in report.findings] == [
            ("gpu-02", AlarmKind.K8S_GPUS_MISSING)]
        assert _alarms(mixed, "gpu-02") == [(
            "k8s-gpus-missing",
            "node gpu-02: allocatable huawei.com/Ascend910 is 7, gpufleet validated 8 "
            "accelerators on gpu-02; recommended: restart the device plugin, not the GPUs "
            "(gpufleet remediate gpu-02 --action restart-service --service device-plugin) "
            "(gpufleet's last facts (2026-12-01 12:00 UTC) saw all 8 accelerators healthy)",
        )]
        assert _alarms(mixed, "gpu-01") == [] and _alarms(mixed, "gpu-03") == []
        api.patch_node("gpu-02", {"status": {"allocatable": {"huawei.com/Ascend910": "8"}}})
        assert k8s_sync(mixed, api=api).findings == []
        assert _alarms(mixed, "gpu-02") == []  # closed once the node agrees
    finally:
        cluster.close()
