"""``gpufleet k8s sync`` through the official ``kubernetes`` client against **kmock**, on
SQLite and PostgreSQL.

No real kube-apiserver can be installed on these machines (no package for it in the registries
we can reach; see the shared real-components notes). These tests therefore run the client path
against ``kmock`` (PyPI), an in-memory Kubernetes API *emulator*: it stores objects and applies
JSON merge patches, but it does no validation and no strategic-merge semantics, so it proves the
requests gpufleet sends and the merge-patch result, not the API server's own rules. The patches
themselves are tested as pure data in tests/domain/test_k8s_patch.py.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kmock
import pytest

from gpufleet.domain.events import AlarmKind
from gpufleet.inventory import load_inventory
from gpufleet.lab.fleet import create_fleet, write_inventory
from gpufleet.service.core.alarms import open_alarms
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.exports.k8s import KubeNodes, k8s_sync
from gpufleet.service.hosts import operations
from gpufleet.service.hosts.enroll import enroll
from gpufleet.service.hosts.validate import validate
from gpufleet.store.repo import host_by_name

# kmock 0.8 reads its bundled resources with a deprecated importlib call.
pytestmark = pytest.mark.filterwarnings("ignore:read_binary is deprecated:DeprecationWarning")

FOREIGN_TAINT = {"key": "dedicated", "value": "big-jobs", "effect": "NoSchedule"}


def _node(name: str, gpus: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
        "spec": {"taints": [dict(FOREIGN_TAINT)]} if labels else {},
        "status": {
            "allocatable": {"cpu": "96", "nvidia.com/gpu": gpus},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


class Kmock:
    """kmock's emulator and server on a free port, on an event loop in a thread."""

    def __init__(
        self, nodes: list[dict[str, Any]], setup: Callable[[Any], None] | None = None
    ) -> None:
        """``setup``: called with the emulator once it runs (a test adds its own API
        server responses there: tests/export/test_k8s_drain.py's evictions)."""
        self._ready = threading.Event()
        self._nodes = nodes
        self._setup = setup
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self.url = ""
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        if not self._ready.wait(30) or self._error is not None:
            raise RuntimeError(f"kmock did not start: {self._error!r}")

    def _run(self) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            async with kmock.KubernetesEmulator() as k, kmock.Server(k) as srv:
                k.resources.load_bundled()
                for n in self._nodes:
                    k.objects["v1/nodes", None, n["metadata"]["name"]] = n
                if self._setup is not None:
                    self._setup(k)
                self.url = str(srv.url).rstrip("/")
                self._ready.set()
                await self._stop.wait()

        try:
            asyncio.run(main())
        except BaseException as exc:  # reported by __init__
            self._error = exc
            self._ready.set()

    def close(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def kubeconfig(self, path: Path) -> Path:
        path.write_text(
            "apiVersion: v1\nkind: Config\ncurrent-context: kmock\n"
            f"clusters:\n- name: kmock\n  cluster:\n    server: {self.url}\n"
            "contexts:\n- name: kmock\n  context:\n    cluster: kmock\n    user: u\n"
            "users:\n- name: u\n  user:\n    token: test\n"
        )
        return path


@pytest.fixture
def cluster() -> Iterator[Kmock]:
    km = Kmock([
        _node("gpu-01", "8", team="llm"),
        _node("gpu-02", "0"),  # device plugin broken: 8 became 0
        _node("gpu-03", "8"),
    ])
    yield km
    km.close()


def _lab(fleet: Fleet, d: Path, faults: dict[str, list[str]]) -> None:
    lf = create_fleet(3, models=["h100-8x"], faults=faults, now=fleet.now())
    lf.save(d)
    write_inventory(lf, d / "inventory.ini", transport="sim", lab_dir=d)


def _alarms(fleet: Fleet, host: str) -> list[str]:
    with fleet.db.session() as s:
        return [a.kind for a in open_alarms(s, [host_by_name(s, host).id])]


def test_quarantine_taints_foreign_keys_stay_resync_noop_recovery_and_gpu_alarm(
    fleet: Fleet, cluster: Kmock, tmp_path: Path
) -> None:
    d = tmp_path / "lab"
    d.mkdir()
    _lab(fleet, d, {})
    enroll(fleet, load_inventory(d / "inventory.ini"))
    validate(fleet)
    api = KubeNodes(cluster.kubeconfig(tmp_path / "kubeconfig"))

    first = k8s_sync(fleet, api=api, cordon_quarantined=True)
    assert {r.host for r in first.changed} == {"gpu-01", "gpu-02", "gpu-03"}
    nodes = api.list_nodes()
    assert nodes["gpu-01"]["metadata"]["labels"]["gpufleet.io/state"] == "available"
    assert "nvidia.com/gpu.product" not in nodes["gpu-01"]["metadata"]["labels"]  # not owned
    # allocatable 0 on a host gpufleet validated with 8 GPUs: reported and alarmed.
    assert [f.kind for f in first.findings] == [AlarmKind.K8S_GPUS_MISSING]
    assert _alarms(fleet, "gpu-02") == ["k8s-gpus-missing"]
    assert _alarms(fleet, "gpu-01") == []

    # gpu-01 breaks and is quarantined: tainted and cordoned at the next sync.
    _lab(fleet, d, {"gpu-01": ["ecc-uncorrectable"]})
    validate(fleet)
    sync = k8s_sync(fleet, api=api, cordon_quarantined=True)
    [changed] = sync.changed
    assert changed.host == "gpu-01"
    n1 = api.list_nodes()["gpu-01"]
    assert n1["spec"]["unschedulable"] is True
    keys = [t["key"] for t in n1["spec"]["taints"]]
    assert keys == ["dedicated", "gpufleet.io/quarantined"]
    assert n1["metadata"]["labels"]["team"] == "llm"  # foreign label stays
    assert n1["metadata"]["labels"]["gpufleet.io/state"] == "quarantined"
    assert FOREIGN_TAINT in n1["spec"]["taints"]
    # A second sync is a no-op, and opens no second alarm.
    again = k8s_sync(fleet, api=api, cordon_quarantined=True)
    assert again.changed == []
    assert api.list_nodes()["gpu-01"] == n1
    assert _alarms(fleet, "gpu-02") == ["k8s-gpus-missing"]

    # Repaired: back to validating -> still gpufleet-tainted (not ready) until it validates.
    _lab(fleet, d, {})
    operations.unquarantine(fleet, "gpu-01", "DIMM replaced")
    k8s_sync(fleet, api=api, cordon_quarantined=True)
    mid = api.list_nodes()["gpu-01"]
    assert [t["key"] for t in mid["spec"]["taints"]] == ["dedicated", "gpufleet.io/not-ready"]
    validate(fleet)
    k8s_sync(fleet, api=api, cordon_quarantined=True)
    healed = api.list_nodes()["gpu-01"]
    assert healed["spec"]["taints"] == [FOREIGN_TAINT]  # only gpufleet's taint removed
    assert healed["spec"].get("unschedulable") in (False, None)  # its own cordon lifted
    assert healed["metadata"]["labels"]["team"] == "llm"
    assert healed["metadata"]["labels"]["gpufleet.io/state"] == "available"
    assert k8s_sync(fleet, api=api, cordon_quarantined=True).changed == []


def test_never_uncordons_a_node_someone_else_cordoned(
    fleet: Fleet, cluster: Kmock, tmp_path: Path
) -> None:
    d = tmp_path / "lab"
    d.mkdir()
    _lab(fleet, d, {})
    enroll(fleet, load_inventory(d / "inventory.ini"))
    validate(fleet)
    api = KubeNodes(cluster.kubeconfig(tmp_path / "kubeconfig"))
    api.patch_node("gpu-03", {"spec": {"unschedulable": True}})  # an operator's cordon
    report = k8s_sync(fleet, api=api, cordon_quarantined=True)
    assert report.results[2].patch is not None and report.results[2].patch.cordon is None
    assert api.list_nodes()["gpu-03"]["spec"]["unschedulable"] is True


def test_dry_run_changes_nothing(fleet: Fleet, cluster: Kmock, tmp_path: Path) -> None:
    d = tmp_path / "lab"
    d.mkdir()
    _lab(fleet, d, {})
    enroll(fleet, load_inventory(d / "inventory.ini"))
    validate(fleet)
    api = KubeNodes(cluster.kubeconfig(tmp_path / "kubeconfig"))
    before = api.list_nodes()
    report = k8s_sync(fleet, api=api, dry_run=True)
    assert len(report.changed) == 3 and "+ label gpufleet.io/state=available" in (
        report.changed[0].patch.diff() if report.changed[0].patch else [])
    assert api.list_nodes() == before
    assert _alarms(fleet, "gpu-02") == []  # a dry run writes nothing
