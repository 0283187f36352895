"""Drain before you touch, everywhere (issue 26, item 3), on SQLite and PostgreSQL, against
kmock with the API server's eviction response (tests/export/kmock_eviction.py): the
remediation a health rule runs by itself (the pool's ``auto_remediate``), ``retire`` and a
``service-request`` drain the host first like a manual remediation or maintenance does; a
PodDisruptionBudget that allows no disruption refuses the action (nothing done), and
``no_drain`` is recorded on the action's event."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from tests.export.conftest import slurm_lab_fleet
from tests.export.test_k8s_drain import (  # noqa: F401 (cluster: the fixture)
    _pod,
    _pods,
    allow_one,
    cluster,
    train_under_budget,
)
from tests.export.test_k8s_sync import Kmock

from gpufleet.domain.remediation import Action
from gpufleet.errors import DrainBlocked
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts import operations
from gpufleet.service.hosts.drain import KubeDrain
from gpufleet.service.views.hosts import list_events
from gpufleet.store.repo import host_by_name

pytestmark = pytest.mark.filterwarnings("ignore:read_binary is deprecated:DeprecationWarning")

SKIPPED = {"skipped": "--no-drain", "ok": None}


def _on_cluster(fleet: Fleet, tmp_path: Path, km: Kmock) -> client.PolicyV1Api:
    """The fleet drains on kmock; ``train-0`` runs on gpu-01 under a budget that allows no
    disruption (the returned API lets it allow one)."""
    kubeconfig = km.kubeconfig(tmp_path / "kubeconfig")
    fleet.settings = fleet.settings.model_copy(
        update={"k8s_kubeconfig": kubeconfig, "k8s_drain_timeout_s": 0.5})
    return train_under_budget(KubeDrain(kubeconfig))


def _state(fleet: Fleet, host: str) -> str:
    with fleet.db.session() as s:
        return str(host_by_name(s, host).state)


def test_health_rule_remediation_drains_first(
    fleet: Fleet, tmp_path: Path, cluster: Kmock  # noqa: F811
) -> None:
    from gpufleet.lab.demo import enroll_lab
    from gpufleet.service.health import remediation
    from gpufleet.service.hosts import gpu_health
    from gpufleet.service.hosts.validate import validate

    enroll_lab(fleet, tmp_path / "lab", 1, models=["a100-8x"], faults={})
    validate(fleet)
    with fleet.db.session() as s:
        pool = host_by_name(s, "gpu-01").pool
    gpu_health.set_pool_health_policy(fleet, pool, auto_remediate=["xid-79"])
    pdb = _on_cluster(fleet, tmp_path, cluster)
    with pytest.raises(DrainBlocked, match="ml/train-0: Cannot evict pod"):
        remediation.auto_remediate(fleet, "gpu-01", "xid-79")
    assert list_events(fleet, "gpu-01", kind="remediation") == []  # the reset never ran
    assert _pods(KubeDrain(fleet.settings.k8s_kubeconfig), "gpu-01") == ["train-0"]
    allow_one(pdb)
    auto = remediation.auto_remediate(fleet, "gpu-01", "xid-79")
    assert auto is not None and auto.ok and auto.drain is not None
    assert auto.drain["evicted"] == ["ml/train-0"]
    [ev] = list_events(fleet, "gpu-01", kind="remediation")
    assert ev["data"]["rule"] == "xid-79" and ev["data"]["drain"]["evicted"] == ["ml/train-0"]


def test_retire_and_service_request_drain_first_no_drain_recorded(
    fleet: Fleet, tmp_path: Path, cluster: Kmock  # noqa: F811
) -> None:
    from gpufleet.service.health import remediation

    slurm_lab_fleet(fleet, tmp_path / "lab")  # gpu-01..03, validated, available
    pdb = _on_cluster(fleet, tmp_path, cluster)
    with pytest.raises(DrainBlocked, match="train-pdb"):
        operations.retire(fleet, "gpu-01", "decommissioned")
    assert _state(fleet, "gpu-01") == "available"  # refused: nothing happened
    with pytest.raises(DrainBlocked, match="train-pdb"):
        remediation.remediate(fleet, "gpu-01", Action.SERVICE_REQUEST, ticket="RMA-26")
    assert _state(fleet, "gpu-01") == "available"

    assert operations.retire(fleet, "gpu-01", "decommissioned", no_drain=True) == "retired"
    assert _pods(KubeDrain(fleet.settings.k8s_kubeconfig), "gpu-01") == ["train-0"]
    [ev] = [e for e in list_events(fleet, "gpu-01", kind="transition")
            if e["data"].get("to") == "retired"]
    assert ev["data"]["drain"] == SKIPPED

    allow_one(pdb)
    KubeDrain(fleet.settings.k8s_kubeconfig).api.create_namespaced_pod(
        "ml", _pod("train-1", "gpu-02", "train"))
    got = remediation.remediate(fleet, "gpu-02", Action.SERVICE_REQUEST, ticket="RMA-27")
    assert got.ok and got.state == "maintenance" and got.drain is not None
    assert got.drain["evicted"] == ["ml/train-1"]
    [ev] = list_events(fleet, "gpu-02", kind="remediation")
    drain: dict[str, Any] = ev["data"]["drain"]
    assert drain["evicted"] == ["ml/train-1"] and drain["node"] == "gpu-02"
    assert operations.retire(fleet, "gpu-03", "old") == "retired"  # no pod: nothing to evict
