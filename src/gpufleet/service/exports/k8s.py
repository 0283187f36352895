"""Kubernetes sync (``gpufleet k8s sync``) and export (``gpufleet k8s export``).

Per host that is a node (name from ``GPUFLEET_KUBE_NODE_NAME``), the labels and taints gpufleet
computes (:func:`gpufleet.service.views.summary.host_labels`) are applied with the official
``kubernetes`` client as JSON merge patches computed by :func:`gpufleet.domain.k8s.plan_node`
(only gpufleet's keys; see that module). Three phases, no network I/O inside a transaction:
read the desired state (short read), list and patch the nodes (no transaction), then record
what changed and the cross-check alarms (:func:`gpufleet.domain.k8s.cross_check`: allocatable
GPUs below the validated count, NotReady while healthy) in one short transaction. Alarms of
those kinds close when the node agrees again. ``dry_run`` patches nothing and writes nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from gpufleet.collect.transport import Outcome
from gpufleet.domain.accelerator_exports import extended_resources
from gpufleet.domain.accelerators import inventories_of
from gpufleet.domain.events import AlarmKind, AlarmSeverity, EventKind
from gpufleet.domain.facts import HostFacts
from gpufleet.domain.health import Fault
from gpufleet.domain.k8s import (
    CROSS_CHECK_KINDS,
    NVIDIA_PREFIX,
    OWN_PREFIX,
    DesiredNode,
    HostEvidence,
    NodeFinding,
    NodePatch,
    cordoned_by_someone_else,
    cross_check,
    kubectl_script,
    node_name,
    plan_node,
)
from gpufleet.domain.states import HostState
from gpufleet.errors import ConfigError
from gpufleet.service.allocation.holds import record_holds
from gpufleet.service.core.alarms import close_alarms, open_alarms, raise_alarm
from gpufleet.service.core.fleet import Fleet, record_event
from gpufleet.service.core.select import select_hosts
from gpufleet.service.hosts import reachability
from gpufleet.service.hosts.kube import KubeClient
from gpufleet.service.hosts.vendor_exports import EXPORTS
from gpufleet.service.views.summary import host_labels
from gpufleet.store.repo import host_by_name, hosts_with_latest_facts
from gpufleet.store.tables import Host

FIELD_MANAGER = "gpufleet"


class NodeApi(Protocol):
    """The two calls the sync needs of a Kubernetes API."""

    def list_nodes(self) -> dict[str, dict[str, Any]]:
        """Every node as the API's JSON, by name."""
        ...

    def patch_node(self, name: str, body: dict[str, Any]) -> None:
        """Apply a JSON merge patch to one node."""
        ...


class KubeNodes(KubeClient):
    """:class:`NodeApi` over the official ``kubernetes`` client (``pip install
    gpufleet[k8s]``). ``kubeconfig`` None: ``KUBECONFIG`` / ``~/.kube/config``, else the
    in-cluster service account."""

    def list_nodes(self) -> dict[str, dict[str, Any]]:
        resp = self._call("list nodes", self.api.list_node, _preload_content=False)
        data = json.loads(resp.data)
        return {item["metadata"]["name"]: item for item in data.get("items") or []}

    def patch_node(self, name: str, body: dict[str, Any]) -> None:
        self._call(
            f"patch node {name}",
            self.api.patch_node,
            name,
            body,
            field_manager=FIELD_MANAGER,
            _content_type="application/merge-patch+json",
        )


@dataclass
class _HostRow:
    host: str
    address: str
    state: HostState
    gpus: int | None
    #: Extended resource -> accelerators of the host (issue 15: every vendor's).
    resources: dict[str, int] = field(default_factory=dict)
    #: What gpufleet itself last saw (issue 24): the cross-check alarms' recommended step.
    evidence: HostEvidence | None = None
    has_bmc: bool = False


@dataclass
class NodeResult:
    """What the sync did (or would do) to one host's node."""

    host: str
    node: str
    state: str
    patch: NodePatch | None = None  # None: no such node
    findings: list[NodeFinding] = field(default_factory=list)
    error: str | None = None
    #: Why the node is held by someone else (a cordon gpufleet did not set), else None.
    held: str | None = None

    @property
    def missing(self) -> bool:
        return self.patch is None and self.error is None


@dataclass
class SyncReport:
    """One sync: per host, and whether it was a dry run."""

    dry_run: bool
    results: list[NodeResult]

    @property
    def changed(self) -> list[NodeResult]:
        return [r for r in self.results if r.patch is not None and not r.patch.empty]

    @property
    def findings(self) -> list[NodeFinding]:
        return [f for r in self.results for f in r.findings]


def _hosts(fleet: Fleet, selector: str | None) -> list[_HostRow]:
    with fleet.db.session() as s:
        rows = hosts_with_latest_facts(s, select_hosts(selector))
        out = []
        for h, snap in rows:
            facts = HostFacts.model_validate(snap.facts) if snap else None
            gpus = len(facts.gpus) if facts is not None and facts.nvidia_smi else None
            resources = (
                extended_resources(inventories_of(facts), EXPORTS) if facts is not None else {}
            )
            out.append(_HostRow(h.name, h.address, HostState(h.state), gpus, resources,
                                host_evidence(h, facts, gpus, resources),
                                bool(h.vars.get("gpufleet_bmc_address"))))
        return out


def host_evidence(
    h: Host, facts: HostFacts | None, gpus: int | None, resources: dict[str, int]
) -> HostEvidence:
    """Whether gpufleet's own latest facts saw every GPU (or other vendor's accelerator) it
    expects healthy (issue 24): the cross-check alarms' evidence."""
    ssh_down = bool(h.unreachable_attempts) or h.fault is Fault.UNREACHABLE
    if facts is None:
        return HostEvidence(None, "no facts", ssh_down)
    at = f"{facts.collected_at:%Y-%m-%d %H:%M} UTC"
    what, count = "GPUs", gpus
    if count is None and resources:  # another vendor's accelerators (issue 15)
        what, count = "accelerators", sum(resources.values())
    if count is None:
        why = facts.nvidia_smi_error or "nvidia-smi gave no answer"
        return HostEvidence(False, f"gpufleet's last facts ({at}): {why}", ssh_down)
    expected = h.usable_gpus or (h.expected or {}).get("gpu_count") or count
    if h.fault is not None or count < int(expected):
        fault = f", fault {h.fault}" if h.fault is not None else ""
        return HostEvidence(
            False, f"gpufleet's last facts ({at}) saw {count} of {expected} {what}{fault}",
            ssh_down,
        )
    return HostEvidence(
        True, f"gpufleet's last facts ({at}) saw all {count} {what} healthy", ssh_down
    )


def vendor_keys(labels: dict[str, str]) -> frozenset[str]:
    """The labels in a vendor's own conventions (issue 15): the keys :func:`host_labels`
    gives that are neither gpufleet's nor NVIDIA's GFD ones."""
    return frozenset(k for k in labels if not k.startswith((OWN_PREFIX, NVIDIA_PREFIX)))


def desired_nodes(
    fleet: Fleet, selector: str | None = None, *, cordon_quarantined: bool | None = None
) -> list[tuple[DesiredNode, _HostRow]]:
    """What gpufleet wants on each selected host's node."""
    settings = fleet.settings
    cordon = settings.k8s_cordon_quarantined if cordon_quarantined is None else cordon_quarantined
    rows = {r.host: r for r in _hosts(fleet, selector)}
    out = []
    for hl in host_labels(fleet, selector):
        row = rows.get(hl.host)
        if row is None:  # removed between the two reads
            continue
        out.append(
            (
                DesiredNode(
                    host=hl.host,
                    node=node_name(settings.k8s_node_name, hl.host, row.address),
                    labels=hl.labels,
                    taints=hl.taints,
                    cordon=cordon and row.state is HostState.QUARANTINED,
                    vendor_keys=vendor_keys(hl.labels),
                ),
                row,
            )
        )
    return out


def k8s_sync(
    fleet: Fleet,
    selector: str | None = None,
    *,
    dry_run: bool = False,
    api: NodeApi | None = None,
    kubeconfig: Path | None = None,
    cordon_quarantined: bool | None = None,
) -> SyncReport:
    """Bring every selected host's node to gpufleet's labels and taints (see the module
    docstring); ``api`` defaults to :class:`KubeNodes` on ``kubeconfig`` (or the setting)."""
    settings = fleet.settings
    wanted = desired_nodes(fleet, selector, cordon_quarantined=cordon_quarantined)
    if api is None:
        api = KubeNodes(kubeconfig or settings.k8s_kubeconfig)
    nodes = api.list_nodes()
    results: list[NodeResult] = []
    for desired, row in wanted:
        res = NodeResult(desired.host, desired.node, str(row.state))
        results.append(res)
        node = nodes.get(desired.node)
        if node is None:
            continue
        res.patch = plan_node(
            desired,
            node,
            own_nvidia=settings.k8s_own_nvidia_labels,
            own_vendor=settings.k8s_own_vendor_labels,
        )
        res.findings = cross_check(
            desired.host, desired.node, row.state, row.gpus, node, row.resources, row.evidence
        )
        if cordoned_by_someone_else(node):
            res.held = f"node {desired.node} cordoned in Kubernetes by someone else"
        if dry_run or res.patch.empty:
            continue
        try:
            api.patch_node(desired.node, res.patch.body())
        except ConfigError as exc:
            res.error = str(exc)
    if not dry_run:
        _bmc_views(fleet, results, {d.host: row for d, row in wanted})
    report = SyncReport(dry_run, results)
    if not dry_run:
        _record(fleet, report)
    return report


def _bmc_views(fleet: Fleet, results: list[NodeResult], rows: dict[str, _HostRow]) -> None:
    """A new NotReady alarm on a host with a BMC carries the BMC's view (issue 24): read
    now, outside any transaction, only for hosts whose alarm is not open yet."""
    todo = [r for r in results if rows[r.host].has_bmc
            and any(f.kind is AlarmKind.K8S_NODE_NOT_READY for f in r.findings)]
    if not todo:
        return
    with fleet.db.session() as s:
        ids = [host_by_name(s, r.host).id for r in todo]
        already = {a.host for a in open_alarms(s, ids) if a.kind == AlarmKind.K8S_NODE_NOT_READY}
    for r in todo:
        if r.host in already:
            continue
        ev = rows[r.host].evidence
        down = ev is not None and ev.ssh_down
        view = reachability.bmc_view(fleet, r.host, Outcome.UNREACHABLE if down else Outcome.OK)
        r.findings = [
            NodeFinding(f.host, f.node, f.kind, f"{f.message}. {view.text}",
                        {**f.data, "bmc": view.data})
            if f.kind is AlarmKind.K8S_NODE_NOT_READY else f
            for f in r.findings
        ]


def _record(fleet: Fleet, report: SyncReport) -> None:
    """Events for changed nodes, cross-check alarms opened and closed, cordons by someone
    else seen or gone (``external-hold`` events), in one transaction."""
    with fleet.db.session() as s:
        holds: dict[str, tuple[Host, str, str | None]] = {}
        for r in report.results:
            if r.missing:
                continue
            host = host_by_name(s, r.host)
            holds[r.host] = (host, r.node, r.held)
            if r.patch is not None and not r.patch.empty and r.error is None:
                p = r.patch
                record_event(
                    s,
                    fleet,
                    EventKind.K8S_SYNC,
                    f"node {r.node}: " + "; ".join(p.diff() or ["annotation"]),
                    host=host,
                    data={
                        "node": r.node,
                        "set_labels": p.set_labels,
                        "remove_labels": p.remove_labels,
                        "add_taints": [str(t) for t in p.add_taints],
                        "remove_taints": [str(t) for t in p.remove_taints],
                        "cordon": p.cordon,
                    },
                )
            seen = {f.kind for f in r.findings}
            already = {a.kind for a in open_alarms(s, [host.id])}
            for f in r.findings:
                if f.kind in already:  # one open alarm per host and kind, no event per sync
                    continue
                raise_alarm(s, fleet, host, f.kind, AlarmSeverity.CRITICAL, f.message, f.data)
            for kind in CROSS_CHECK_KINDS:
                if kind not in seen:
                    close_alarms(s, fleet, host, kind, f"node {r.node} agrees again")
        record_holds(s, fleet, "k8s", holds)


def k8s_export(
    fleet: Fleet, selector: str | None = None, *, cordon_quarantined: bool | None = None
) -> str:
    """A kubectl script applying the same labels and taints (for unreachable clusters)."""
    wanted = desired_nodes(fleet, selector, cordon_quarantined=cordon_quarantined)
    return kubectl_script(
        [d for d, _ in wanted],
        own_nvidia=fleet.settings.k8s_own_nvidia_labels,
        own_vendor=fleet.settings.k8s_own_vendor_labels,
    )
