"""``gpufleet capacity --k8s``: the Kubernetes scheduler's view of GPU headroom per label set,
next to gpufleet's.

Per selected host that is a node (name from ``GPUFLEET_KUBE_NODE_NAME``): the node's
allocatable ``nvidia.com/gpu`` minus the GPUs requested by the pods bound to it (read with the
field selector ``spec.nodeName``; pods that ended, ``Succeeded``/``Failed``, hold nothing).
A pod's request is what the scheduler counts: the sum over its containers, or the largest
init container's when that is more (requests default to limits for extended resources).
Nodes are grouped by the labels a ``nodeSelector`` would use, as the node carries them now:
``nvidia.com/gpu.product``, ``gpufleet.io/pool`` and each ``gpufleet.io/validated.<profile>``
(a node with several profiles is counted in each, as ``gpufleet capacity`` does). Headroom
(``free``) counts only nodes a new pod can land on: Ready, not cordoned, no gpufleet taint,
and not leased in gpufleet (issue 26: an allocated host's node carries the lease taint once
synced; before that its GPUs are still not free to anyone else); GPUs of the others are shown
as ``unschedulable``. ``gpufleet_free`` is the GPUs of those
hosts that gpufleet has available (the GPUs it validated). A quantity that cannot be read
fails the command (never a guessed 0).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from gpufleet.domain.facts import HostFacts
from gpufleet.domain.k8s import GPU_RESOURCE, OWN_PREFIX, node_name
from gpufleet.domain.states import HostState
from gpufleet.errors import ConfigError
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.core.select import is_explicit, nothing_matches, select_hosts
from gpufleet.service.exports.k8s import KubeNodes
from gpufleet.store.repo import hosts_with_latest_facts

PRODUCT_LABEL = "nvidia.com/gpu.product"
POOL_LABEL = f"{OWN_PREFIX}pool"
PROFILE_PREFIX = f"{OWN_PREFIX}validated."
ENDED_PHASES = ("Succeeded", "Failed")


class PodNodeApi(Protocol):
    """What the scheduler view needs of a Kubernetes API."""

    def list_nodes(self) -> dict[str, dict[str, Any]]:
        """Every node as the API's JSON, by name."""
        ...

    def pods_on_node(self, node: str) -> list[dict[str, Any]]:
        """The pods bound to ``node`` (field selector ``spec.nodeName``), as JSON."""
        ...


class KubePods(KubeNodes):
    """:class:`PodNodeApi` over the official ``kubernetes`` client."""

    def pods_on_node(self, node: str) -> list[dict[str, Any]]:
        resp = self._call(
            f"list pods on node {node}",
            self.api.list_pod_for_all_namespaces,
            field_selector=f"spec.nodeName={node}",
            _preload_content=False,
        )
        items = json.loads(resp.data).get("items") or []
        # the selector is the server's job; checked again so a server ignoring it cannot
        # charge another node's pods to this one
        return [p for p in items if (p.get("spec") or {}).get("nodeName") == node]


def gpu_quantity(value: object, where: str) -> int:
    """A ``nvidia.com/gpu`` quantity (a whole number); ConfigError naming ``where``."""
    text = str(value).strip()
    if not text.isdigit():
        raise ConfigError(setting="k8s", cause=f"{where}: {GPU_RESOURCE} {value!r} is not a "
                          "whole number of GPUs")
    return int(text)


def _container_gpus(c: Mapping[str, Any], where: str) -> int:
    res = c.get("resources") or {}
    for part in ("requests", "limits"):  # for extended resources requests default to limits
        v = (res.get(part) or {}).get(GPU_RESOURCE)
        if v is not None:
            return gpu_quantity(v, f"{where} container {c.get('name')}")
    return 0


def pod_gpus(pod: Mapping[str, Any]) -> int:
    """GPUs a pod holds on its node as the scheduler counts them (0 once it has ended)."""
    meta = pod.get("metadata") or {}
    where = f"pod {meta.get('namespace', '')}/{meta.get('name', '?')}"
    if (pod.get("status") or {}).get("phase") in ENDED_PHASES:
        return 0
    spec = pod.get("spec") or {}
    main = sum(_container_gpus(c, where) for c in spec.get("containers") or [])
    init = max((_container_gpus(c, where) for c in spec.get("initContainers") or []), default=0)
    return max(main, init)


def schedulable(node: Mapping[str, Any]) -> bool:
    """Ready, not cordoned, no gpufleet taint: a new GPU pod can land here."""
    spec = node.get("spec") or {}
    if spec.get("unschedulable") is True:
        return False
    if any(str(t.get("key", "")).startswith(OWN_PREFIX) for t in spec.get("taints") or []):
        return False
    conds = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def label_sets(labels: Mapping[str, str]) -> list[dict[str, str]]:
    """The nodeSelector label sets a node belongs to (one per validated profile)."""
    base = {k: labels[k] for k in (PRODUCT_LABEL, POOL_LABEL) if k in labels}
    profiles = sorted(k for k, v in labels.items() if k.startswith(PROFILE_PREFIX) and v == "true")
    return [{**base, p: "true"} for p in profiles] or [base]


@dataclass
class K8sCapacityRow:
    """The scheduler's GPUs for one label set."""

    selector: dict[str, str]
    nodes: int = 0
    allocatable: int = 0
    requested: int = 0
    free: int = 0
    unschedulable: int = 0
    gpufleet_free: int = 0

    def as_json(self) -> dict[str, Any]:
        return {"selector": self.selector, "nodes": self.nodes, "allocatable": self.allocatable,
                "requested": self.requested, "free": self.free,
                "unschedulable": self.unschedulable, "gpufleet_free": self.gpufleet_free}


@dataclass(frozen=True)
class K8sNodeGpus:
    """One node as the scheduler counts it (issue 26: the capacity gate reads these)."""

    host: str
    node: str
    labels: dict[str, str]
    allocatable: int
    requested: int
    free: int  # 0 when no new pod can land on it


@dataclass
class K8sCapacity:
    """Rows per label set; selected hosts with no node; the nodes counted."""

    rows: list[K8sCapacityRow]
    missing: list[str]
    nodes: list[K8sNodeGpus] = field(default_factory=list)


def k8s_capacity(
    fleet: Fleet,
    selector: str | None = None,
    *,
    api: PodNodeApi | None = None,
    kubeconfig: Path | None = None,
) -> K8sCapacity:
    """The scheduler's view of the selected hosts' nodes (see the module docstring)."""
    settings = fleet.settings
    with fleet.db.session() as s:
        rows = hosts_with_latest_facts(s, select_hosts(selector))
        hosts = {h.name: (h.address, HostState(h.state), _gpus(snap)) for h, snap in rows}
    if not hosts and is_explicit(selector):
        raise nothing_matches(selector)
    if api is None:
        api = KubePods(kubeconfig or settings.k8s_kubeconfig)
    nodes = api.list_nodes()  # no transaction open while the API is asked
    out: dict[tuple[tuple[str, str], ...], K8sCapacityRow] = {}
    missing: list[str] = []
    counted: list[K8sNodeGpus] = []
    for host in sorted(hosts):
        address, state, gpus = hosts[host]
        if state is HostState.RETIRED:
            continue
        name = node_name(settings.k8s_node_name, host, address)
        node = nodes.get(name)
        if node is None:
            missing.append(host)
            continue
        alloc_raw = ((node.get("status") or {}).get("allocatable") or {}).get(GPU_RESOURCE, "0")
        alloc = gpu_quantity(alloc_raw, f"node {name} allocatable")
        used = sum(pod_gpus(p) for p in api.pods_on_node(name))
        ok = schedulable(node) and state is not HostState.ALLOCATED
        labels = dict((node.get("metadata") or {}).get("labels") or {})
        counted.append(
            K8sNodeGpus(host, name, labels, alloc, used, max(alloc - used, 0) if ok else 0)
        )
        for sel in label_sets(labels):
            key = tuple(sorted(sel.items()))
            row = out.setdefault(key, K8sCapacityRow(dict(key)))
            row.nodes += 1
            row.allocatable += alloc
            row.requested += used
            if ok:
                row.free += max(alloc - used, 0)
            else:
                row.unschedulable += alloc
            if state is HostState.AVAILABLE:
                row.gpufleet_free += gpus
    return K8sCapacity([out[k] for k in sorted(out)], missing, counted)


def _gpus(snap: Any) -> int:
    facts = HostFacts.model_validate(snap.facts) if snap is not None else None
    return len(facts.gpus) if facts is not None and facts.nvidia_smi else 0


def selector_text(sel: Mapping[str, str]) -> str:
    """``k=v,k=v`` (a nodeSelector as kubectl's -l takes it)."""
    return ",".join(f"{k}={v}" for k, v in sorted(sel.items())) or "-"

