"""``gpufleet capacity --k8s``: the scheduler's GPUs per nodeSelector label set (allocatable
``nvidia.com/gpu`` minus the requests of the pods bound to each node), on SQLite and
PostgreSQL.

The Kubernetes API is **kmock** (PyPI), an in-memory emulator: no real kube-apiserver can be
installed here. kmock ignores field selectors (it returns every pod for
``spec.nodeName=...``), which this test therefore also proves gpufleet does not trust blindly:
a pod bound to another node is never charged to this one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.export.conftest import slurm_lab_fleet
from tests.export.test_k8s_sync import Kmock
from tests.export.test_slurm_lab import quarantine

from gpufleet.errors import ConfigError
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.exports.capacity_k8s import KubePods, k8s_capacity, pod_gpus
from gpufleet.service.exports.k8s import k8s_sync

pytestmark = pytest.mark.filterwarnings("ignore:read_binary is deprecated:DeprecationWarning")

PRODUCT = "NVIDIA-H100-80GB-HBM3"  # as GPU Feature Discovery labels the node


def _node(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": PRODUCT}},
        "spec": {},
        "status": {"allocatable": {"nvidia.com/gpu": "8"},
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }


def _pod(name: str, node: str, containers: list[dict[str, Any]],
         init: list[dict[str, Any]] | None = None, phase: str = "Running") -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeName": node, "containers": containers}
    if init:
        spec["initContainers"] = init
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ml"}, "spec": spec,
            "status": {"phase": phase}}


def _gpu(n: str, part: str = "requests") -> dict[str, Any]:
    return {"name": f"c{n}", "resources": {part: {"nvidia.com/gpu": n}}}


@pytest.fixture
def cluster() -> Iterator[Kmock]:
    km = Kmock([_node("gpu-01"), _node("gpu-02"), _node("gpu-03")])
    yield km
    km.close()


def test_scheduler_view_per_label_set(fleet: Fleet, tmp_path: Path, cluster: Kmock) -> None:
    slurm_lab_fleet(fleet, tmp_path / "lab")  # 3 validated 8x H100 hosts, gpu-01..03
    api = KubePods(cluster.kubeconfig(tmp_path / "kubeconfig"))
    quarantine(fleet, "gpu-03", "Xid 79")
    k8s_sync(fleet, api=api)  # labels the nodes, taints gpu-03
    for pod in (
        _pod("train", "gpu-01", [_gpu("3"), {"name": "sidecar"}]),
        _pod("infer", "gpu-01", [_gpu("2", "limits")]),  # requests default to limits
        _pod("done", "gpu-01", [_gpu("8")], phase="Succeeded"),  # ended: holds nothing
        _pod("prep", "gpu-02", [_gpu("1")], init=[_gpu("4")]),  # init container 4 > 1
    ):
        api.api.create_namespaced_pod("ml", pod)

    kube = k8s_capacity(fleet, api=api)
    assert kube.missing == []
    validated = [r for r in kube.rows
                 if any(k.startswith("gpufleet.io/validated.") for k in r.selector)]
    [plain] = [r for r in kube.rows if r not in validated]
    assert validated, kube.rows
    for row in kube.rows:
        assert row.selector["nvidia.com/gpu.product"] == PRODUCT
        assert "gpufleet.io/pool" in row.selector
    for row in validated:  # gpu-01 and gpu-02: a nodeSelector on a validated profile
        assert (row.nodes, row.allocatable, row.requested) == (2, 16, 9)
        assert (row.free, row.unschedulable) == (7, 0)  # gpu-01: 8-5, gpu-02: 8-4
        assert row.gpufleet_free == 16  # gpufleet has both available
    # gpu-03, quarantined: no validated.* label, tainted by gpufleet: no headroom
    assert (plain.nodes, plain.allocatable, plain.requested) == (1, 8, 0)
    assert (plain.free, plain.unschedulable, plain.gpufleet_free) == (0, 8, 0)

    # one host selected: only its node, and the other nodes' pods are not charged to it
    [one] = k8s_capacity(fleet, "gpu-02", api=api).rows[:1]
    assert (one.nodes, one.requested, one.free) == (1, 4, 4)


def test_unreadable_quantity_fails_closed() -> None:
    with pytest.raises(ConfigError, match=r"pod ml/bad container c1\.5.*not a whole number"):
        pod_gpus(_pod("bad", "gpu-01", [_gpu("1.5")]))
    assert pod_gpus(_pod("none", "gpu-01", [{"name": "cpu-only"}])) == 0


def test_cli_capacity_k8s_json(tmp_path: Path, cluster: Kmock) -> None:
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    fleet = Fleet.open(home=tmp_path / "home", url=url, actor="pytest")
    try:
        slurm_lab_fleet(fleet, tmp_path / "lab")
    finally:
        fleet.db.dispose()
    api = KubePods(cluster.kubeconfig(tmp_path / "kubeconfig"))
    api.api.create_namespaced_pod("ml", _pod("train", "gpu-01", [_gpu("8")]))
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    env.update(GPUFLEET_HOME=str(tmp_path / "home"), GPUFLEET_DATABASE_URL=url)
    r = subprocess.run(
        [sys.executable, "-m", "gpufleet.cli.main", "capacity", "--k8s", "--json",
         "--kubeconfig", str(tmp_path / "kubeconfig")],
        env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert doc["totals"]["free"] == 24  # gpufleet's own view is unchanged
    [row] = doc["k8s"]["rows"]  # nodes not yet labelled by a sync: one set, the GFD product
    assert row["selector"] == {"nvidia.com/gpu.product": PRODUCT}
    assert (row["allocatable"], row["requested"], row["free"]) == (24, 8, 16)
