"""``gpufleet capacity check --k8s`` (issue 26): the capacity gate counting only GPUs free
where work runs.

gpufleet's own answer (:func:`gpufleet.service.allocation.capacity.check`: validated,
available, not leased) is necessary but not enough: a pod may hold a node's GPUs that
gpufleet has as available (the second seed's incident: an inference pod on all 8 GPUs of an
A100 node, and the gate said ``ok``). With ``--k8s`` the gate also asks the scheduler
(:func:`gpufleet.service.exports.capacity_k8s.k8s_capacity`: allocatable ``nvidia.com/gpu``
minus the pods' requests, nodes a new pod can land on only) and counts the nodes a release's
nodeSelector would pick: ``nvidia.com/gpu.product`` containing the model
(case-insensitive, as gpufleet matches models) and ``gpufleet.io/validated.<profile>=true``.
It passes only when both views have the GPUs; a short answer names both numbers and the
nodes. Selected hosts with no node count nothing (never assumed free).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from gpufleet.service.allocation.capacity import CapacityCheck, check
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.exports.capacity_k8s import (
    PRODUCT_LABEL,
    PROFILE_PREFIX,
    K8sNodeGpus,
    PodNodeApi,
    k8s_capacity,
)


def node_selector(model: str | None, profile: str | None) -> str:
    """The nodeSelector the gate counts, as text (``~`` reads "contains")."""
    parts = []
    if model:
        parts.append(f"{PRODUCT_LABEL}~{model}")
    if profile:
        parts.append(f"{PROFILE_PREFIX}{profile}=true")
    return ",".join(parts) or "-"


def selected(n: K8sNodeGpus, model: str | None, profile: str | None) -> bool:
    """The node carries the labels a release's nodeSelector asks for."""
    if model and model.lower() not in n.labels.get(PRODUCT_LABEL, "").lower():
        return False
    return not profile or n.labels.get(f"{PROFILE_PREFIX}{profile}") == "true"


def k8s_check(
    fleet: Fleet,
    *,
    gpus: int,
    model: str | None = None,
    profile: str | None = None,
    headroom: float = 0.0,
    selector: str | None = None,
    cuda: str | None = None,
    api: PodNodeApi | None = None,
    kubeconfig: Path | None = None,
) -> CapacityCheck:
    """gpufleet's gate, then the scheduler's (see the module docstring)."""
    r = check(fleet, gpus=gpus, model=model, profile=profile, headroom=headroom,
              selector=selector, cuda=cuda)
    kube = k8s_capacity(fleet, selector, api=api, kubeconfig=kubeconfig)
    nodes = [n for n in kube.nodes if selected(n, model, profile)]
    free = sum(n.free for n in nodes)
    sel = node_selector(model, profile)
    view: dict[str, Any] = {
        "node_selector": sel,
        "free": free,
        "allocatable": sum(n.allocatable for n in nodes),
        "requested": sum(n.requested for n in nodes),
        "nodes": [{"host": n.host, "node": n.node, "allocatable": n.allocatable,
                   "requested": n.requested, "free": n.free} for n in nodes],
        "missing": kube.missing,
    }
    ok = r.ok and free >= r.needed
    allocatable = min(r.allocatable, free)
    if r.ok and not ok:
        busy = ", ".join(f"{n.node} {n.requested}/{n.allocatable} requested"
                         for n in nodes if n.requested) or "none requested"
        message = (
            f"not enough GPUs where work runs: Kubernetes has {free} of {r.needed} needed "
            f"free for nodeSelector {sel} ({view['allocatable']} allocatable on {len(nodes)} "
            f"nodes, {view['requested']} requested by pods: {busy}); gpufleet counts "
            f"{r.allocatable} allocatable"
        )
    else:
        message = f"{r.message}; Kubernetes has {free} free for nodeSelector {sel}"
    return dataclasses.replace(
        r, ok=ok, allocatable=allocatable, missing=max(0, r.needed - allocatable),
        message=message, k8s=view,
    )
