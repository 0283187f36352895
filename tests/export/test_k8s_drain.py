"""Drain before you touch (issue 26, item 3, Kubernetes), on SQLite and PostgreSQL: a host
going into maintenance has its pods evicted through the Eviction API first, through the
official client against kmock with the API server's eviction response
(tests/export/kmock_eviction.py): a PodDisruptionBudget that allows no disruption blocks
the drain, which is reported pod by pod and refuses the maintenance; once the budget allows
it the pods go and the event records the drain; ``--no-drain`` is recorded too."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from sqlalchemy import select
from tests.export.conftest import slurm_lab_fleet
from tests.export.kmock_eviction import serve_evictions
from tests.export.test_k8s_sync import Kmock

from gpufleet.errors import DrainBlocked
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts import operations
from gpufleet.service.hosts.drain import KubeDrain, drain_configured
from gpufleet.store.repo import host_by_name
from gpufleet.store.tables import Event

pytestmark = pytest.mark.filterwarnings("ignore:read_binary is deprecated:DeprecationWarning")


def _node(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {}},
            "spec": {"taints": [{"key": "team", "value": "llm", "effect": "NoSchedule"}]},
            "status": {"allocatable": {"nvidia.com/gpu": "8"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def _pod(name: str, node: str, app: str, owner: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ml", "labels": {"app": app}}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner, "name": app,
                                    "uid": "u-" + app}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"nodeName": node, "containers": [{"name": "c"}]},
            "status": {"phase": "Running"}}


def train_under_budget(api: KubeDrain, node: str = "gpu-01") -> client.PolicyV1Api:
    """``train-0`` runs on ``node`` under ``train-pdb``, a budget that allows no disruption
    (the API returned lets a test allow one: :func:`allow_one`)."""
    api.api.create_namespaced_pod("ml", _pod("train-0", node, "train"))
    pdb = client.PolicyV1Api(api.api_client)
    pdb.create_namespaced_pod_disruption_budget("ml", {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "train-pdb", "namespace": "ml"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "train"}}},
        "status": {"disruptionsAllowed": 0, "currentHealthy": 1}})
    return pdb


def allow_one(pdb: client.PolicyV1Api) -> None:
    """``train-pdb`` allows one disruption now (a replica came up elsewhere)."""
    pdb.patch_namespaced_pod_disruption_budget("train-pdb", "ml",
                                               {"status": {"disruptionsAllowed": 1}})


@pytest.fixture
def cluster() -> Iterator[Kmock]:
    km = Kmock([_node("gpu-01"), _node("gpu-02")], setup=serve_evictions)
    yield km
    km.close()


def _pods(api: KubeDrain, node: str) -> list[str]:
    return sorted(p["metadata"]["name"] for p in api.pods_on_node(node))


def _drain_data(fleet: Fleet, host: str) -> dict[str, Any]:
    with fleet.db.session() as s:
        h = host_by_name(s, host)
        ev = s.scalars(select(Event).where(Event.host_id == h.id, Event.kind == "transition")
                       .order_by(Event.id.desc())).first()
        assert ev is not None and ev.data["to"] == "maintenance", ev
        drain: dict[str, Any] = ev.data["k8s_drain"]
        return drain


def test_maintenance_evicts_pods_pdb_blocks_then_allows(
    fleet: Fleet, tmp_path: Path, cluster: Kmock
) -> None:
    slurm_lab_fleet(fleet, tmp_path / "lab")  # gpu-01..03, validated, available
    kubeconfig = cluster.kubeconfig(tmp_path / "kubeconfig")
    assert not drain_configured(fleet.settings)  # no cluster: maintenance does not drain
    fleet.settings = fleet.settings.model_copy(
        update={"k8s_kubeconfig": kubeconfig, "k8s_drain_timeout_s": 0.5})
    assert drain_configured(fleet.settings)
    api = KubeDrain(kubeconfig)
    pdb = train_under_budget(api)
    for pod in (_pod("infer-0", "gpu-01", "infer"),
                _pod("dcgm-exporter-x", "gpu-01", "dcgm", owner="DaemonSet"),
                _pod("other-0", "gpu-02", "other")):
        api.api.create_namespaced_pod("ml", pod)

    with pytest.raises(DrainBlocked) as blocked:
        operations.maintenance_on(fleet, "gpu-01", "bios update")
    msg = str(blocked.value)
    assert msg.startswith("drain of node gpu-01 blocked after"), msg
    assert ("ml/train-0: Cannot evict pod as it would violate the pod's disruption budget. "
            "(The disruption budget train-pdb needs 1 healthy pods and has 1 currently)") in msg
    assert "the action did not run (--no-drain overrides)" in msg
    assert blocked.value.report.evicted == ["ml/infer-0"]
    assert _pods(api, "gpu-01") == ["dcgm-exporter-x", "train-0"]  # infer-0 evicted
    assert _pods(api, "gpu-02") == ["other-0"]  # another node's pods are never touched
    with fleet.db.session() as s:
        assert host_by_name(s, "gpu-01").state == "available"  # refused: nothing happened
    node = api.read_node("gpu-01")
    assert node is not None  # the drain's taint is taken back, the team's taint stays
    assert node["spec"]["taints"] == [{"key": "team", "value": "llm", "effect": "NoSchedule"}]

    # the budget allows one disruption now (a replica came up elsewhere)
    allow_one(pdb)
    assert operations.maintenance_on(fleet, "gpu-01", "bios update") == "maintenance"
    assert _pods(api, "gpu-01") == ["dcgm-exporter-x"]  # the DaemonSet's pod stays
    drain = _drain_data(fleet, "gpu-01")
    assert drain["ok"] is True and drain["evicted"] == ["ml/train-0"]
    assert drain["left"] == ["ml/dcgm-exporter-x"] and drain["node"] == "gpu-01"
    node = api.read_node("gpu-01")
    assert node is not None and {"key": "gpufleet.io/draining", "value": "maintenance",
                                 "effect": "NoSchedule"} in node["spec"]["taints"]

    # --no-drain: the pods stay, the event says so
    assert operations.maintenance_on(fleet, "gpu-02", "fan", no_drain=True) == "maintenance"
    assert _pods(api, "gpu-02") == ["other-0"]
    assert _drain_data(fleet, "gpu-02") == {"skipped": "--no-drain", "ok": None}

    # a host whose node is not in the cluster has nothing to drain
    assert operations.maintenance_on(fleet, "gpu-03", "psu") == "maintenance"
    assert _drain_data(fleet, "gpu-03")["skipped"] == "no such node in the cluster"


def test_campaign_drains_each_host_before_its_action(
    fleet: Fleet, tmp_path: Path, cluster: Kmock
) -> None:
    """A campaign wave: each host's pods are evicted before the action; a host a budget
    keeps from draining fails untouched (it leaves maintenance, validated again), with the
    budget's answer as its reason; the drain is recorded on a campaign event."""
    from gpufleet.domain.campaign import ActionKind, HostStep
    from gpufleet.service.campaigns.campaign import CampaignSpec, create_campaign, run_campaign
    from gpufleet.service.hosts.baselines import baseline_from_host, save_baseline
    from gpufleet.service.views.hosts import list_events

    slurm_lab_fleet(fleet, tmp_path / "lab")
    save_baseline(fleet, baseline_from_host(fleet, "gpu-02", "b-new"))
    kubeconfig = cluster.kubeconfig(tmp_path / "kubeconfig")
    fleet.settings = fleet.settings.model_copy(
        update={"k8s_kubeconfig": kubeconfig, "k8s_drain_timeout_s": 0.5})
    api = KubeDrain(kubeconfig)
    api.api.create_namespaced_pod("ml", _pod("train-0", "gpu-01", "train"))
    api.api.create_namespaced_pod("ml", _pod("infer-0", "gpu-02", "infer"))
    client.PolicyV1Api(api.api_client).create_namespaced_pod_disruption_budget("ml", {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "train-pdb", "namespace": "ml"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "train"}}},
        "status": {"disruptionsAllowed": 0, "currentHealthy": 1}})
    create_campaign(fleet, CampaignSpec(
        name="c1", target_baseline="b-new", selector="gpu-01,gpu-02",
        action_kind=ActionKind.COMMAND, action="true", ticket="T-26", canary=0,
        waves="100%", max_failures=2))
    done = run_campaign(fleet, "c1")
    step = {h.host: (h.step, h.reason) for w in done.waves for h in w}
    assert step["gpu-01"][0] == HostStep.FAILED
    assert (step["gpu-01"][1] or "").startswith("not drained: drain of node gpu-01 blocked")
    assert "The disruption budget train-pdb needs 1 healthy pods" in (step["gpu-01"][1] or "")
    assert _pods(api, "gpu-01") == ["train-0"]
    assert _pods(api, "gpu-02") == []  # evicted before the action ran
    [ev] = [e for e in list_events(fleet, "gpu-02", kind="campaign") if "drain" in e["data"]]
    assert ev["data"]["drain"]["evicted"] == ["ml/infer-0"]
    assert ev["data"]["ticket"] == "T-26"


def test_remediation_drains_first_no_drain_recorded(
    fleet: Fleet, tmp_path: Path, cluster: Kmock
) -> None:
    """A reboot (sim transport) waits for the drain: blocked, nothing runs (no step, no
    record); ``--no-drain`` runs it and its events say so; drained, they carry the drain."""
    from gpufleet.domain.remediation import Action
    from gpufleet.lab.demo import enroll_lab
    from gpufleet.service.health import remediation
    from gpufleet.service.hosts.validate import validate
    from gpufleet.service.views.hosts import list_events

    enroll_lab(fleet, tmp_path / "lab", 1, models=["a100-8x"], faults={})
    validate(fleet)
    kubeconfig = cluster.kubeconfig(tmp_path / "kubeconfig")
    fleet.settings = fleet.settings.model_copy(
        update={"k8s_kubeconfig": kubeconfig, "k8s_drain_timeout_s": 0.5})
    api = KubeDrain(kubeconfig)
    pdb = train_under_budget(api)

    with pytest.raises(DrainBlocked, match="ml/train-0: Cannot evict pod"):
        remediation.remediate(fleet, "gpu-01", Action.REBOOT, reboot_wait_s=5)
    assert list_events(fleet, "gpu-01", kind="remediation") == []  # nothing ran
    got = remediation.remediate(fleet, "gpu-01", Action.REBOOT, reboot_wait_s=5,
                                no_drain=True)
    assert got.ok and got.drain == {"skipped": "--no-drain", "ok": None}
    [ev] = list_events(fleet, "gpu-01", kind="remediation")
    assert ev["data"]["drain"] == {"skipped": "--no-drain", "ok": None}
    assert _pods(api, "gpu-01") == ["train-0"]

    allow_one(pdb)
    validate(fleet)
    got = remediation.remediate(fleet, "gpu-01", Action.REBOOT, reboot_wait_s=5)
    assert got.ok and got.drain is not None and got.drain["evicted"] == ["ml/train-0"]
    assert _pods(api, "gpu-01") == []


def test_cli_maintenance_on_blocked_exit_6_then_no_drain(tmp_path: Path, cluster: Kmock) -> None:
    import os
    import subprocess
    import sys

    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    fleet = Fleet.open(home=tmp_path / "home", url=url, actor="pytest")
    try:
        slurm_lab_fleet(fleet, tmp_path / "lab")
    finally:
        fleet.db.dispose()
    kubeconfig = cluster.kubeconfig(tmp_path / "kubeconfig")
    api = KubeDrain(kubeconfig)
    train_under_budget(api)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    env.update(GPUFLEET_HOME=str(tmp_path / "home"), GPUFLEET_DATABASE_URL=url,
               GPUFLEET_KUBECONFIG=str(kubeconfig), GPUFLEET_KUBE_DRAIN_TIMEOUT="0.5",
               COLUMNS="200")
    cmd = [sys.executable, "-m", "gpufleet.cli.main", "maintenance", "on", "gpu-01",
           "--reason", "bios"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 6, r.stdout + r.stderr
    out = " ".join((r.stdout + r.stderr).split())
    assert "drain of node gpu-01 blocked" in out and "train-pdb" in out, out
    r = subprocess.run([*cmd, "--no-drain"], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert _pods(api, "gpu-01") == ["train-0"]
