"""Drain before you touch (issue 26, Kubernetes): before maintenance, a remediation step or
a campaign action changes a host, the pods running on its node are evicted through the
Eviction API (``POST .../pods/NAME/eviction``, ``policy/v1`` ``Eviction``), which honours
PodDisruptionBudgets: the API answers ``429 Too Many Requests`` while a budget allows no
disruption, and the eviction is asked again until ``GPUFLEET_KUBE_DRAIN_TIMEOUT``.

Steps (no transaction is open meanwhile): the node gets gpufleet's taint
``gpufleet.io/draining=<what>:NoSchedule`` (nothing new lands; the next ``k8s sync``
replaces it with the state's own taint), then each pod bound to the node (field selector
``spec.nodeName``, checked again here) is evicted, as ``kubectl drain --ignore-daemonsets``
does: pods that ended, DaemonSet pods and mirror (static) pods are left; then it waits until
the evicted pods are gone. A drain that does not finish in time takes its taint back and is
refused (:class:`DrainBlocked`, exit 6, HTTP 409) naming each pod left and why (the
budget's answer); the action does not run. ``--no-drain`` skips it; either way the event
of the action records what the drain did (``data["drain"]``).

Only where a cluster is configured (:func:`drain_configured`: ``GPUFLEET_KUBECONFIG`` set
or ``k8s`` among ``GPUFLEET_SYNC_TARGETS``, as the k8s sync); a host whose node is not in
the cluster has nothing to drain.

:func:`drain_first` is the one entry point of an action on one host (remediation, by hand or
by a health rule; retire; reimage; maintenance through the API): the Slurm drain
(:mod:`gpufleet.service.hosts.slurm_drain`) where work runs in Slurm, then this one.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Protocol

from gpufleet.collect.slurm import SlurmClient
from gpufleet.config import Settings
from gpufleet.domain.k8s import OWN_PREFIX, node_name
from gpufleet.domain.labels import sanitize_label_value
from gpufleet.domain.sync import Target, parse_targets
from gpufleet.errors import DrainBlocked, GpufleetError, KubeApiError, LocalIOError
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.kube import KubeClient
from gpufleet.service.hosts.slurm_drain import drain_and_wait, work_runs_in_slurm
from gpufleet.store.repo import host_by_name

DRAIN_TAINT_KEY = f"{OWN_PREFIX}draining"
ENDED_PHASES = ("Succeeded", "Failed")
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
#: Why a drain did nothing where no cluster is configured.
NO_CLUSTER = "no Kubernetes cluster configured"
#: How long :func:`drain_first` waits for a host's Slurm jobs unless told (``--drain-timeout``).
SLURM_DRAIN_TIMEOUT = timedelta(minutes=30)


class DrainApi(Protocol):
    """What a drain needs of a Kubernetes API."""

    def read_node(self, name: str) -> dict[str, Any] | None:
        """The node as the API's JSON; None when there is no such node."""
        ...

    def patch_node(self, name: str, body: dict[str, Any]) -> None:
        """A JSON merge patch of one node."""
        ...

    def pods_on_node(self, node: str) -> list[dict[str, Any]]:
        """The pods bound to ``node``."""
        ...

    def evict(self, namespace: str, name: str) -> None:
        """Ask the Eviction API to evict one pod; :class:`KubeApiError` (``status`` 429: a
        disruption budget refuses it now; 404: already gone)."""
        ...


class KubeDrain(KubeClient):
    """:class:`DrainApi` over the official ``kubernetes`` client."""

    def read_node(self, name: str) -> dict[str, Any] | None:
        try:
            resp = self._call(f"read node {name}", self.api.read_node, name,
                              _preload_content=False)
        except KubeApiError as exc:
            if exc.status == 404:
                return None
            raise
        node: dict[str, Any] = json.loads(resp.data)
        return node

    def patch_node(self, name: str, body: dict[str, Any]) -> None:
        self._call(f"patch node {name}", self.api.patch_node, name, body,
                   field_manager="gpufleet", _content_type="application/merge-patch+json")

    def pods_on_node(self, node: str) -> list[dict[str, Any]]:
        resp = self._call(f"list pods on node {node}", self.api.list_pod_for_all_namespaces,
                          field_selector=f"spec.nodeName={node}", _preload_content=False)
        items = json.loads(resp.data).get("items") or []
        return [p for p in items if (p.get("spec") or {}).get("nodeName") == node]

    def evict(self, namespace: str, name: str) -> None:
        body = {"apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": name, "namespace": namespace}}
        self._call(f"evict pod {namespace}/{name}", self.api.create_namespaced_pod_eviction,
                   name, namespace, body, _preload_content=False)


def drain_configured(settings: Settings) -> bool:
    """A cluster is configured: a kubeconfig is set, or k8s is a sync target."""
    try:
        targets = parse_targets(settings.sync_targets)
    except ValueError:
        targets = ()
    return settings.k8s_kubeconfig is not None or Target.K8S in targets


@dataclass
class DrainReport:
    """What a drain did to one host's node."""

    host: str
    node: str
    skipped: str | None = None  # why nothing was drained (--no-drain, no node, no cluster)
    evicted: list[str] = field(default_factory=list)  # namespace/name
    left: list[str] = field(default_factory=list)  # DaemonSet and mirror pods, left running
    blocked: dict[str, str] = field(default_factory=dict)  # pod -> why it is still there
    waited_s: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.blocked

    def text(self) -> str:
        if self.skipped:
            return f"drain of node {self.node} skipped: {self.skipped}"
        if self.blocked:
            why = "; ".join(f"{p}: {w}" for p, w in sorted(self.blocked.items()))
            return (f"drain of node {self.node} blocked after {self.waited_s:.0f} s: "
                    f"{len(self.blocked)} pod(s) not evicted ({why})")
        return (f"node {self.node} drained: {len(self.evicted)} pod(s) evicted"
                + (f", {len(self.left)} DaemonSet/static left" if self.left else ""))

    def as_json(self) -> dict[str, Any]:
        return {"node": self.node, "skipped": self.skipped, "evicted": self.evicted,
                "left": self.left, "blocked": self.blocked, "waited_s": round(self.waited_s, 1),
                "ok": self.ok}


def _key(pod: dict[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _stays(pod: dict[str, Any]) -> bool:
    """A pod a drain leaves: a DaemonSet's (it would come back) or a static mirror pod."""
    meta = pod.get("metadata") or {}
    if MIRROR_ANNOTATION in (meta.get("annotations") or {}):
        return True
    return any(o.get("kind") == "DaemonSet" for o in meta.get("ownerReferences") or [])


def _running(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if (p.get("status") or {}).get("phase") not in ENDED_PHASES]


def _set_taint(api: DrainApi, node: dict[str, Any], what: str | None) -> None:
    name = node["metadata"]["name"]
    taints = [t for t in (node.get("spec") or {}).get("taints") or []
              if t.get("key") != DRAIN_TAINT_KEY]
    if what is not None:
        taints.append({"key": DRAIN_TAINT_KEY, "value": what, "effect": "NoSchedule"})
    api.patch_node(name, {"spec": {"taints": taints}})


def drain(
    fleet: Fleet,
    host: str,
    what: str,
    *,
    api: DrainApi | None = None,
    timeout_s: float | None = None,
    poll_s: float = 1.0,
    sleep: Callable[[float], None] = time.sleep,
) -> DrainReport:
    """Evict the pods of ``host``'s node (see the module docstring); ``what`` (maintenance,
    remediation, campaign) is the drain taint's value. Raises :class:`DrainBlocked`."""
    with fleet.db.session() as s:
        h = host_by_name(s, host)
        node_id = node_name(fleet.settings.k8s_node_name, h.name, h.address)
    report = DrainReport(host, node_id)
    if api is None:
        if not drain_configured(fleet.settings):
            report.skipped = NO_CLUSTER
            return report
        api = KubeDrain(fleet.settings.k8s_kubeconfig)
    node = api.read_node(node_id)
    if node is None:
        report.skipped = "no such node in the cluster"
        return report
    limit = fleet.settings.k8s_drain_timeout_s if timeout_s is None else timeout_s
    _set_taint(api, node, sanitize_label_value(what))
    start = time.monotonic()
    while True:
        pods = _running(api.pods_on_node(node_id))
        report.left = sorted(_key(p) for p in pods if _stays(p))
        todo = [p for p in pods if not _stays(p)]
        report.waited_s = time.monotonic() - start
        report.blocked = {}
        if not todo:
            return report
        asked = False
        for pod in todo:
            key = _key(pod)
            if key in report.evicted or (pod.get("metadata") or {}).get("deletionTimestamp"):
                report.blocked[key] = "evicted, still terminating"
                continue
            ns, _, name = key.partition("/")
            try:
                api.evict(ns, name)
            except KubeApiError as exc:
                if exc.status == 404:  # gone meanwhile
                    continue
                if exc.status != 429:
                    raise
                report.blocked[key] = _why(exc.body)
                continue
            report.evicted.append(key)
            report.blocked[key] = "evicted, still terminating"
            asked = True
        if asked:
            continue  # see at once what the evictions did
        if report.waited_s >= limit:
            _set_taint(api, api.read_node(node_id) or node, None)
            raise DrainBlocked(
                report.text() + "; the action did not run (--no-drain overrides)", report=report
            )
        sleep(poll_s)


def _why(body: str) -> str:
    """The API's message for a refused eviction (the disruption budget's words)."""
    try:
        doc = json.loads(body)
    except ValueError:
        return body.strip() or "refused (429)"
    msg = str(doc.get("message") or "refused (429)") if isinstance(doc, dict) else body
    causes = (doc.get("details") or {}).get("causes") if isinstance(doc, dict) else None
    extra = "; ".join(str(c.get("message")) for c in causes or [] if c.get("message"))
    return f"{msg} ({extra})" if extra else msg


def drain_or_skip(
    fleet: Fleet, host: str, what: str, *, no_drain: bool = False, api: DrainApi | None = None
) -> dict[str, Any]:
    """:func:`drain` unless ``no_drain``: the ``drain`` record for the action's event."""
    if no_drain:
        return {"skipped": "--no-drain", "ok": None}
    return drain(fleet, host, what, api=api).as_json()


def drain_first(
    fleet: Fleet,
    host: str,
    what: str,
    *,
    why: str | None = None,
    no_drain: bool = False,
    slurm_timeout: timedelta | None = None,
    api: DrainApi | None = None,
    slurm: SlurmClient | None = None,
) -> dict[str, Any]:
    """Drain before you touch, wherever work runs (issue 26), before one action on ``host``
    (``what``: remediation, retire, reimage...; ``why``: the reason the Slurm drain keeps).
    Where work runs in Slurm (a sync target, or ``slurm`` given) its node is drained and its
    jobs waited for (:func:`~gpufleet.service.hosts.slurm_drain.drain_and_wait`, up to
    ``slurm_timeout`` or the host's lease end): a job still running then refuses the action
    (:class:`DrainBlocked`, exit 6, the node resumed). Then its pods are evicted
    (:func:`drain_or_skip`, blocked: :class:`DrainBlocked`). ``no_drain`` skips both, recorded.
    Returns the ``drain`` record for the action's event: the Kubernetes drain's, with the
    Slurm drain's under ``slurm``."""
    slurm_record: dict[str, Any] | None = None
    resume: SlurmClient | None = None  # the node this drain set DRAIN on
    if slurm is not None or work_runs_in_slurm(fleet):
        client = slurm or SlurmClient()
        (d,) = drain_and_wait(fleet, [host], why or what, client=client, no_drain=no_drain,
                              timeout=slurm_timeout or SLURM_DRAIN_TIMEOUT, purpose=what).hosts
        if not d.ok:
            raise DrainBlocked(f"host {host}: not drained, the {what} did not run: "
                               f"{d.describe()} (--no-drain overrides)")
        slurm_record = d.as_json() | {"no_drain": no_drain}
        resume = client if d.drained_here else None
    try:
        record = drain_or_skip(fleet, host, what, no_drain=no_drain, api=api)
    except GpufleetError:
        if resume is not None:  # the action will not happen: leave the node as it was
            with contextlib.suppress(LocalIOError):
                resume.resume(host)
        raise
    return record | ({"slurm": slurm_record} if slurm_record is not None else {})


def drain_each(
    fleet: Fleet, names: list[str], what: str, *, no_drain: bool = False
) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """:func:`drain_or_skip` for each host (a campaign's wave): the drain record of each
    host drained (or skipped), and why for each host that could not be (blocked, or the API
    failed): those must not be acted on."""
    done: dict[str, dict[str, Any]] = {}
    failed: dict[str, str] = {}
    for name in names:
        try:
            done[name] = drain_or_skip(fleet, name, what, no_drain=no_drain)
        except GpufleetError as exc:
            failed[name] = str(exc)
    return done, failed
