"""Issue 26 (Kubernetes), items 1 and 2, on SQLite and PostgreSQL, against the API stand-in
kmock (see tests/export/test_k8s_sync.py) through the official client:

* a lease is enforced: the allocated host's node gets ``gpufleet.io/lease=<id>:NoSchedule``
  and the lease labels, ``sync status`` shows a lease the node does not enforce, release
  takes them away, and ``capacity --k8s`` never counts a leased host's GPUs as free;
* the second seed's incident: an inference pod holds all 8 GPUs of an A100 node and the
  gate ``capacity check --gpus 8 --model A100 --profile training-multinode`` said ``ok``;
  with ``--k8s`` it exits 1 with the numbers and notifies on-call (``capacity-short``
  event and webhook, through the outbox to a real HTTP receiver).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from tests.export.test_k8s_sync import Kmock
from tests.service.test_webhooks import Receiver

from gpufleet.domain.placement import Request
from gpufleet.domain.sync import Target
from gpufleet.lab.demo import enroll_lab, run_evidence, validated_baselines
from gpufleet.service.allocation import capacity, leases
from gpufleet.service.allocation.allocation import allocate
from gpufleet.service.core import webhooks
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.exports.capacity_gate import k8s_check
from gpufleet.service.exports.capacity_k8s import KubePods, k8s_capacity
from gpufleet.service.exports.k8s import k8s_sync
from gpufleet.service.exports.sync import Systems, sync_status
from gpufleet.service.hosts.collect import collect
from gpufleet.service.hosts.validate import validate
from gpufleet.store.tables import Event

pytestmark = pytest.mark.filterwarnings("ignore:read_binary is deprecated:DeprecationWarning")

PRODUCT = "NVIDIA-A100-SXM4-80GB"


def _node(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": PRODUCT}},
        "spec": {},
        "status": {"allocatable": {"nvidia.com/gpu": "8"},
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }


def _pod(name: str, node: str, gpus: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ml"},
            "spec": {"nodeName": node, "containers": [
                {"name": "c", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}]},
            "status": {"phase": "Running"}}


def a100_fleet(fleet: Fleet, where: Path) -> None:
    """Two 8x A100 hosts validated for training-multinode (DCGM and NCCL evidence, a
    validated pool baseline), as the lab's demo proves them."""
    lab = enroll_lab(fleet, where, 2, models=["a100-8x"], faults={})
    collect(fleet)
    validated_baselines(fleet, lab)
    run_evidence(fleet, lab)
    validate(fleet)


@pytest.fixture
def cluster() -> Iterator[Kmock]:
    km = Kmock([_node("gpu-01"), _node("gpu-02")])
    yield km
    km.close()


@pytest.fixture
def receiver(fleet: Fleet) -> Iterator[Receiver]:
    r = Receiver()
    yield r
    webhooks.stop(fleet)
    r.server.shutdown()
    r.server.server_close()


def _taints(api: KubePods, node: str) -> list[dict[str, Any]]:
    return list(api.list_nodes()[node]["spec"].get("taints") or [])


def test_lease_taint_labels_drift_and_capacity(
    fleet: Fleet, tmp_path: Path, cluster: Kmock
) -> None:
    a100_fleet(fleet, tmp_path / "lab")
    api = KubePods(cluster.kubeconfig(tmp_path / "kubeconfig"))
    got = allocate(fleet, Request(hosts=1), owner="alice@ml team", purpose="llm",
                   duration=timedelta(days=2),
                   selector="gpu-01")
    assert got.lease is not None
    lease_id = got.lease.id
    # before any sync the leased host's GPUs are already not free in the scheduler's view
    [row] = k8s_capacity(fleet, api=api).rows
    assert (row.free, row.unschedulable) == (8, 8)

    k8s_sync(fleet, api=api)
    node = api.list_nodes()["gpu-01"]
    assert {"key": "gpufleet.io/lease", "value": str(lease_id),
            "effect": "NoSchedule"} in node["spec"]["taints"]
    labels = node["metadata"]["labels"]
    assert labels["gpufleet.io/lease.id"] == str(lease_id)
    assert labels["gpufleet.io/lease.owner"] == "alice-ml-team"  # label-value safe
    assert labels["gpufleet.io/lease.ends"].endswith("Z")
    assert len(labels["gpufleet.io/lease.ends"]) == len("20261205T140000Z")
    assert _taints(api, "gpu-02") == []
    free = {tuple(sorted(r.selector.items())): r.free for r in k8s_capacity(fleet, api=api).rows}
    assert sum(free.values()) > 0 and all(
        v == 8 for v in free.values())  # gpu-02 only, in each of its label sets

    # someone removes the lease taint by hand: sync status shows the lease not enforced
    api.patch_node("gpu-01", {"spec": {"taints": []}})
    st = sync_status(fleet, [Target.K8S], Systems(k8s_api=api))
    [d] = [d for d in st.disagreements if "lease" in d.what]
    assert d.host == "gpu-01" and d.cause == "by-hand"
    assert f"lease {lease_id} not enforced" in d.what
    assert d.next_sync == f"add taint gpufleet.io/lease={lease_id}:NoSchedule"

    k8s_sync(fleet, api=api)
    leases.release(fleet, lease_id)
    st = sync_status(fleet, [Target.K8S], Systems(k8s_api=api))
    assert any(f"lease {lease_id} no longer holds the host" in d.what for d in st.disagreements)
    k8s_sync(fleet, api=api)
    assert not any(t["key"] == "gpufleet.io/lease" for t in _taints(api, "gpu-01"))
    assert "gpufleet.io/lease.id" not in api.list_nodes()["gpu-01"]["metadata"]["labels"]


def test_seed_incident_gate_exits_short_and_notifies(
    fleet: Fleet, tmp_path: Path, cluster: Kmock, receiver: Receiver
) -> None:
    fleet.settings = fleet.settings.model_copy(update={"webhook_url": receiver.url})
    a100_fleet(fleet, tmp_path / "lab")
    api = KubePods(cluster.kubeconfig(tmp_path / "kubeconfig"))
    k8s_sync(fleet, api=api)
    api.api.create_namespaced_pod("ml", _pod("infer", "gpu-01", 8))  # the seed's incident
    api.api.create_namespaced_pod("ml", _pod("batch", "gpu-02", 6))
    args: dict[str, Any] = dict(gpus=8, model="A100", profile="training-multinode")

    assert capacity.check(fleet, **args).ok  # gpufleet's own view: 16 allocatable
    r = k8s_check(fleet, api=api, **args)
    assert not r.ok
    assert (r.needed, r.allocatable, r.missing) == (8, 2, 6)
    assert r.message.startswith(
        "not enough GPUs where work runs: Kubernetes has 2 of 8 needed free for nodeSelector "
        "nvidia.com/gpu.product~A100,gpufleet.io/validated.training-multinode=true "
        "(16 allocatable on 2 nodes, 14 requested by pods: gpu-01 8/8 requested, gpu-02 6/8 "
        "requested); gpufleet counts 16 allocatable"), r.message
    assert r.k8s is not None and r.k8s["free"] == 2

    capacity.notify_short(fleet, r)
    assert webhooks.outbox(fleet).flush(30)
    [body] = [p for p in receiver.payloads() if p["kind"] == "capacity-short"]
    assert body["data"]["missing"] == 6 and body["data"]["k8s"]["free"] == 2
    with fleet.db.session() as s:
        [ev] = s.scalars(select(Event).where(Event.kind == "capacity-short")).all()
        assert ev.data["allocatable"] == 2

    # enough once the batch pod ends: 8 free on gpu-02 (the other node stays full)
    api.api.delete_namespaced_pod("batch", "ml")
    assert k8s_check(fleet, api=api, **args).ok


def test_cli_capacity_check_k8s_exit_1(tmp_path: Path, cluster: Kmock) -> None:
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    fleet = Fleet.open(home=tmp_path / "home", url=url, actor="pytest")
    kubeconfig = cluster.kubeconfig(tmp_path / "kubeconfig")
    try:
        a100_fleet(fleet, tmp_path / "lab")
        k8s_sync(fleet, api=KubePods(kubeconfig))  # the nodes carry gpufleet's labels
    finally:
        fleet.db.dispose()
    KubePods(kubeconfig).api.create_namespaced_pod("ml", _pod("infer", "gpu-01", 8))
    KubePods(kubeconfig).api.create_namespaced_pod("ml", _pod("batch", "gpu-02", 6))
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    env.update(GPUFLEET_HOME=str(tmp_path / "home"), GPUFLEET_DATABASE_URL=url)
    gate = [sys.executable, "-m", "gpufleet.cli.main", "capacity", "check", "--gpus", "8",
            "--model", "A100", "--profile", "training-multinode"]

    def run(*more: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*gate, *more], env=env, capture_output=True, text=True,
                              timeout=120)

    assert run().returncode == 0  # what the seed saw: ok, 16 allocatable
    r = run("--k8s", "--kubeconfig", str(kubeconfig), "--json")
    assert r.returncode == 1, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert (doc["ok"], doc["allocatable"], doc["missing"]) == (False, 2, 6)
    assert doc["k8s"]["requested"] == 14
    assert "Kubernetes has 2 of 8 needed free" in doc["message"]
