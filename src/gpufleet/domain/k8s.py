"""Kubernetes node sync as pure data: desired node state + current node -> patch.

gpufleet touches only what it owns on a node:

* labels under ``gpufleet.io/`` (and ``nvidia.com/`` only when configured to own them, for
  clusters without GPU Feature Discovery; the other vendors' own labels, issue 15: Ascend's
  ``accelerator``/``accelerator-type``/``node.kubernetes.io/npu.chip.name``, AMD's
  ``amd.com/gpu.*``, only when configured to own those: :attr:`DesiredNode.vendor_keys`);
  every other label is left alone;
* taints whose key is under ``gpufleet.io/`` (``gpufleet.io/quarantined`` ...); other
  controllers' and people's taints stay, in their order;
* ``spec.unschedulable`` (cordon) only when cordoning quarantined hosts is enabled, and it
  uncordons only a node it cordoned itself.

What it set is recorded in the annotation :data:`MANAGED_ANNOTATION` (JSON: label keys, taint
keys, cordoned). A ``nvidia.com/`` or vendor label is removed only when that record says
gpufleet set it; a cordon is lifted only when the record says gpufleet cordoned. Label values
are sanitised one by one: a value that cannot be made valid (or an invalid key) is skipped and
reported, never rejecting the other labels. A second plan against the patched node is empty.

Nodes are the API's plain JSON (``metadata.labels``, ``spec.taints``, ``status.allocatable``).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpufleet.domain.events import AlarmKind
from gpufleet.domain.labels import (
    PREFIX,
    Taint,
    is_valid_label_key,
    is_valid_label_value,
    sanitize_label_value,
)
from gpufleet.domain.states import HostState

OWN_PREFIX = f"{PREFIX}/"
NVIDIA_PREFIX = "nvidia.com/"
MANAGED_ANNOTATION = f"{PREFIX}/managed"
GPU_RESOURCE = "nvidia.com/gpu"
#: States in which gpufleet sees the host healthy and in service.
HEALTHY_STATES = (HostState.AVAILABLE, HostState.ALLOCATED)


def owns_label(key: str, own_nvidia: bool) -> bool:
    """True for a label key under a prefix gpufleet owns."""
    return key.startswith(OWN_PREFIX) or (own_nvidia and key.startswith(NVIDIA_PREFIX))


def owns_taint(key: str) -> bool:
    """True for gpufleet's own taint keys."""
    return key.startswith(OWN_PREFIX)


def node_name(template: str, host: str, address: str) -> str:
    """The node name of ``host``: ``template`` with ``{name}``, ``{short}`` (the name up to
    the first dot) and ``{address}`` filled in (``"{short}"`` maps ``gpu-01.dc1`` to
    ``gpu-01``)."""
    return template.format(name=host, short=host.split(".", 1)[0], address=address)


@dataclass(frozen=True)
class Managed:
    """What gpufleet set on a node (the :data:`MANAGED_ANNOTATION` record)."""

    labels: tuple[str, ...] = ()
    taints: tuple[str, ...] = ()
    cordoned: bool = False

    def to_json(self) -> str:
        return json.dumps(
            {"labels": list(self.labels), "taints": list(self.taints), "cordoned": self.cordoned},
            sort_keys=True,
            separators=(",", ":"),
        )

    @classmethod
    def parse(cls, text: str | None) -> Managed:
        """The record, or an empty one when absent or unreadable (then gpufleet claims nothing
        it cannot prove it set: no ``nvidia.com/`` removal, no uncordon)."""
        try:
            data = json.loads(text or "")
        except ValueError:
            return cls()
        if not isinstance(data, dict):
            return cls()
        labels = data.get("labels")
        taints = data.get("taints")
        return cls(
            labels=tuple(sorted(k for k in labels if isinstance(k, str)))
            if isinstance(labels, list)
            else (),
            taints=tuple(sorted(k for k in taints if isinstance(k, str)))
            if isinstance(taints, list)
            else (),
            cordoned=data.get("cordoned") is True,
        )


def cordoned_by_someone_else(node: Mapping[str, Any]) -> bool:
    """The node is cordoned (``spec.unschedulable``) and gpufleet's record does not say it
    cordoned it: a person's or another controller's cordon (a drain)."""
    if (node.get("spec") or {}).get("unschedulable") is not True:
        return False
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    return not Managed.parse(annotations.get(MANAGED_ANNOTATION)).cordoned


@dataclass(frozen=True)
class DesiredNode:
    """What gpufleet wants on one node (from ``derive_labels``/``derive_taints``)."""

    host: str
    node: str
    labels: Mapping[str, str]
    taints: Sequence[Taint]
    cordon: bool = False
    #: The keys of ``labels`` in a non-NVIDIA vendor's own conventions (issue 15), owned
    #: only when the sync manages vendor labels.
    vendor_keys: frozenset[str] = frozenset()


def _owned(
    key: str, desired: DesiredNode, recorded: Iterable[str], own_nvidia: bool, own_vendor: bool
) -> bool:
    """gpufleet's key on this node: its own prefix, ``nvidia.com/`` when owned, and a vendor
    label it wants or recorded setting when vendor labels are owned."""
    if key.startswith((OWN_PREFIX, NVIDIA_PREFIX)):
        return owns_label(key, own_nvidia)
    return own_vendor and (key in desired.vendor_keys or key in recorded)


@dataclass(frozen=True)
class NodePatch:
    """The changes one sync makes to one node, and the merge patch that makes them."""

    host: str
    node: str
    set_labels: dict[str, str] = field(default_factory=dict)
    remove_labels: list[str] = field(default_factory=list)
    add_taints: list[Taint] = field(default_factory=list)
    remove_taints: list[Taint] = field(default_factory=list)
    #: True: cordon; False: uncordon (gpufleet's own cordon); None: leave as it is.
    cordon: bool | None = None
    #: The new taint list (foreign taints first, in their order), when it changes.
    taints: list[dict[str, Any]] | None = None
    #: The new annotation value, when it changes.
    managed: str | None = None
    #: Labels skipped: "key: why" (an invalid key, a value that cannot be made valid).
    skipped: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (
            self.set_labels
            or self.remove_labels
            or self.taints is not None
            or self.cordon is not None
            or self.managed is not None
        )

    def body(self) -> dict[str, Any]:
        """The JSON merge patch (``null`` removes a label); ``{}`` when nothing changes."""
        if self.empty:
            return {}
        meta: dict[str, Any] = {}
        labels: dict[str, str | None] = dict(self.set_labels)
        labels.update({k: None for k in self.remove_labels})
        if labels:
            meta["labels"] = labels
        if self.managed is not None:
            meta["annotations"] = {MANAGED_ANNOTATION: self.managed}
        out: dict[str, Any] = {"metadata": meta} if meta else {}
        spec: dict[str, Any] = {}
        if self.taints is not None:
            spec["taints"] = self.taints
        if self.cordon is not None:
            spec["unschedulable"] = self.cordon
        if spec:
            out["spec"] = spec
        return out

    def diff(self) -> list[str]:
        """Human diff lines (``+``/``-``/``~``), one per change."""
        out = [f"+ label {k}={v}" for k, v in sorted(self.set_labels.items())]
        out += [f"- label {k}" for k in self.remove_labels]
        out += [f"+ taint {t}" for t in self.add_taints]
        out += [f"- taint {t}" for t in self.remove_taints]
        if self.cordon is True:
            out.append("+ cordon")
        elif self.cordon is False:
            out.append("- cordon (gpufleet's own)")
        out += [f"! skipped label {s}" for s in self.skipped]
        return out


def clean_labels(labels: Mapping[str, object]) -> tuple[dict[str, str], list[str]]:
    """Each label on its own: invalid keys skipped, values sanitised; (valid, skipped)."""
    good: dict[str, str] = {}
    skipped: list[str] = []
    for key, value in labels.items():
        if not is_valid_label_key(key):
            skipped.append(f"{key}: not a valid label key")
            continue
        text = sanitize_label_value(value)
        if not is_valid_label_value(text):  # pragma: no cover - sanitize always yields valid
            skipped.append(f"{key}: value {value!r} cannot be made valid")
            continue
        good[key] = text
    return good, skipped


def _taint_dict(t: Taint) -> dict[str, Any]:
    return {"key": t.key, "value": t.value, "effect": t.effect}


def _taint_of(d: Mapping[str, Any]) -> Taint:
    return Taint(str(d.get("key", "")), str(d.get("value") or ""), str(d.get("effect", "")))


def plan_node(
    desired: DesiredNode,
    node: Mapping[str, Any],
    *,
    own_nvidia: bool,
    own_vendor: bool = False,
) -> NodePatch:
    """The patch that brings ``node`` (the API's JSON) to ``desired``, touching only what
    gpufleet owns (see the module docstring)."""
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    current: dict[str, str] = dict(meta.get("labels") or {})
    annotations: dict[str, str] = dict(meta.get("annotations") or {})
    before = Managed.parse(annotations.get(MANAGED_ANNOTATION))

    wanted, skipped = clean_labels(
        {
            k: v
            for k, v in desired.labels.items()
            if _owned(k, desired, before.labels, own_nvidia, own_vendor)
        }
    )
    set_labels = {k: v for k, v in wanted.items() if current.get(k) != v}
    remove_labels = sorted(
        k
        for k in current
        if _owned(k, desired, before.labels, own_nvidia, own_vendor)
        and k not in wanted
        and (k.startswith(OWN_PREFIX) or k in before.labels)
    )

    cur_taints: list[dict[str, Any]] = [dict(t) for t in spec.get("taints") or []]
    want_taints = [t for t in desired.taints if owns_taint(t.key)]
    ours_now = [_taint_of(t) for t in cur_taints if owns_taint(str(t.get("key", "")))]
    add_taints = [t for t in want_taints if t not in ours_now]
    remove_taints = [t for t in ours_now if t not in want_taints]
    taints: list[dict[str, Any]] | None = None
    if add_taints or remove_taints:
        kept = [
            t
            for t in cur_taints
            if not owns_taint(str(t.get("key", ""))) or _taint_of(t) in want_taints
        ]
        taints = kept + [_taint_dict(t) for t in add_taints]

    unschedulable = spec.get("unschedulable") is True
    cordon: bool | None = None
    cordoned = before.cordoned and unschedulable  # a hand uncordon ends our claim
    if desired.cordon and not unschedulable:
        cordon, cordoned = True, True
    elif not desired.cordon and before.cordoned and unschedulable:
        cordon, cordoned = False, False

    after = Managed(
        labels=tuple(sorted(wanted)),
        taints=tuple(sorted({t.key for t in want_taints})),
        cordoned=cordoned,
    )
    managed = after.to_json()
    return NodePatch(
        host=desired.host,
        node=desired.node,
        set_labels=set_labels,
        remove_labels=remove_labels,
        add_taints=add_taints,
        remove_taints=remove_taints,
        cordon=cordon,
        taints=taints,
        managed=None if annotations.get(MANAGED_ANNOTATION) == managed else managed,
        skipped=skipped,
    )


# --------------------------------------------------------------------------- cross-checks


@dataclass(frozen=True)
class NodeFinding:
    """A disagreement seen from the node's side, raised as an alarm of ``kind``."""

    host: str
    node: str
    kind: AlarmKind
    message: str
    data: dict[str, Any] = field(default_factory=dict)


#: The alarm kinds the cross-checks raise (and close when the node agrees again).
CROSS_CHECK_KINDS = (AlarmKind.K8S_GPUS_MISSING, AlarmKind.K8S_NODE_NOT_READY)


def _ready(node: Mapping[str, Any]) -> str | None:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return str(cond.get("status"))
    return None


@dataclass(frozen=True)
class HostEvidence:
    """What gpufleet itself last saw of the host (issue 24): from its latest facts, whether
    every GPU it expects answered healthy (None: no facts), and whether SSH answers."""

    gpus_healthy: bool | None = None
    detail: str = ""
    ssh_down: bool = False


def recommend(kind: AlarmKind, host: str, ev: HostEvidence) -> tuple[str, str]:
    """The recommended step for a cross-check alarm and the evidence it rests on: when
    gpufleet's own facts saw every GPU healthy, the Kubernetes side is at fault (restart the
    device plugin, or the kubelet), not the GPUs; otherwise the GPU or driver fault."""
    if ev.ssh_down:
        return (
            f"power-cycle: the host does not answer SSH either (gpufleet bmc status {host}, "
            f"then gpufleet remediate {host} --action power-cycle)",
            "gpufleet's last contacts with the host failed",
        )
    if ev.gpus_healthy is None:
        return f"collect {host}: gpufleet has no facts to tell", "no facts"
    if not ev.gpus_healthy:
        return (f"the GPU/driver fault: gpufleet validate {host}, then its remediation",
                ev.detail)
    if kind is AlarmKind.K8S_GPUS_MISSING:
        return (f"restart the device plugin, not the GPUs (gpufleet remediate {host} "
                "--action restart-service --service device-plugin)", ev.detail)
    return (f"restart the kubelet (gpufleet remediate {host} --action restart-service "
            "--service kubelet)", ev.detail)


def _with_advice(f: NodeFinding, ev: HostEvidence | None) -> NodeFinding:
    if ev is None:
        return f
    step, evidence = recommend(f.kind, f.host, ev)
    return NodeFinding(
        f.host, f.node, f.kind, f"{f.message}; recommended: {step} ({evidence})",
        {**f.data, "recommended": step, "evidence": evidence},
    )


def cross_check(
    host: str,
    node_name_: str,
    state: HostState,
    validated_gpus: int | None,
    node: Mapping[str, Any],
    resources: Mapping[str, int] | None = None,
    evidence: HostEvidence | None = None,
) -> list[NodeFinding]:
    """:func:`node_findings`, each with its recommended step when ``evidence`` is given."""
    return [
        _with_advice(f, evidence)
        for f in node_findings(host, node_name_, state, validated_gpus, node, resources)
    ]


def node_findings(
    host: str,
    node_name_: str,
    state: HostState,
    validated_gpus: int | None,
    node: Mapping[str, Any],
    resources: Mapping[str, int] | None = None,
) -> list[NodeFinding]:
    """Findings on a node whose host gpufleet sees healthy (available/allocated): allocatable
    ``nvidia.com/gpu`` below the GPUs gpufleet validated (absent or unreadable counts as 0:
    the device plugin is not advertising them), or not ``Ready``.

    ``resources`` (issue 15: extended resource -> accelerators the host has, e.g.
    ``{"huawei.com/Ascend910": 8}``) checks each vendor's resource the same way, instead of
    ``nvidia.com/gpu`` against ``validated_gpus``."""
    if state not in HEALTHY_STATES:
        return []
    out: list[NodeFinding] = []
    wanted = dict(resources) if resources is not None else {GPU_RESOURCE: validated_gpus or 0}
    for resource, count in sorted(wanted.items()):
        if not count:
            continue
        raw = ((node.get("status") or {}).get("allocatable") or {}).get(resource)
        try:
            allocatable = int(str(raw))
        except ValueError:
            allocatable = 0
        if allocatable < count:
            what = "GPUs" if resource == GPU_RESOURCE else "accelerators"
            data: dict[str, Any] = {"allocatable": raw, "validated": count}
            if resource != GPU_RESOURCE:
                data["resource"] = resource
            out.append(
                NodeFinding(
                    host,
                    node_name_,
                    AlarmKind.K8S_GPUS_MISSING,
                    f"node {node_name_}: allocatable {resource} is "
                    f"{raw if raw is not None else 'absent'}, gpufleet validated "
                    f"{count} {what} on {host}",
                    data,
                )
            )
    ready = _ready(node)
    if ready != "True":
        out.append(
            NodeFinding(
                host,
                node_name_,
                AlarmKind.K8S_NODE_NOT_READY,
                f"node {node_name_} is NotReady (Ready={ready or 'unknown'}) while gpufleet "
                f"sees {host} {state}",
                {"ready": ready},
            )
        )
    return out


# --------------------------------------------------------------------------- kubectl script


def kubectl_script(
    nodes: Iterable[DesiredNode], *, own_nvidia: bool, own_vendor: bool = False
) -> str:
    """A POSIX sh script of ``kubectl`` commands bringing each node to its desired state,
    for clusters gpufleet cannot reach. It reads each node first so that it removes only
    gpufleet's stale ``gpufleet.io/`` labels and taints and uncordons only a node whose
    :data:`MANAGED_ANNOTATION` says gpufleet cordoned it (owned ``nvidia.com/`` and vendor
    labels are set and recorded, not removed, by the script)."""
    lines = [
        "#!/bin/sh",
        "# gpufleet k8s export: apply with  sh THIS_FILE  (kubectl on PATH, context selected).",
        "# Only gpufleet.io/ keys (and nvidia.com/ ones when owned) are touched.",
        "set -eu",
        "",
    ]
    for d in nodes:
        wanted, skipped = clean_labels(
            {k: v for k, v in d.labels.items() if _owned(k, d, (), own_nvidia, own_vendor)}
        )
        want_taints = [t for t in d.taints if owns_taint(t.key)]
        n = shlex.quote(d.node)
        lines.append(f"# {d.host} -> node {d.node}")
        lines += [f"# skipped label {s}" for s in skipped]
        keep_labels = " ".join(f"-e {shlex.quote(k)}" for k in sorted(wanted)) or "-e ''"
        lines.append(
            f"kubectl get node {n} -o go-template='{{{{range $k, $v := .metadata.labels}}}}"
            f"{{{{$k}}}}{{{{\"\\n\"}}}}{{{{end}}}}' | grep '^gpufleet\\.io/' "
            f"| grep -vxF {keep_labels} | sed 's/$/-/' | xargs -r kubectl label node {n}"
        )
        if wanted:
            pairs = " ".join(shlex.quote(f"{k}={v}") for k, v in sorted(wanted.items()))
            lines.append(f"kubectl label node {n} --overwrite {pairs}")
        keep_taints = (
            " ".join(f"-e {shlex.quote(f'{t.key}:{t.effect}')}" for t in want_taints) or "-e ''"
        )
        lines.append(
            f"kubectl get node {n} -o jsonpath='{{range .spec.taints[*]}}{{.key}}:{{.effect}}"
            f"{{\"\\n\"}}{{end}}' | grep '^gpufleet\\.io/' "
            f"| grep -vxF {keep_taints} "
            f"| sed 's/$/-/' | xargs -r kubectl taint node {n}"
        )
        for t in want_taints:
            lines.append(f"kubectl taint node {n} --overwrite {shlex.quote(str(t))}")
        # C: whether gpufleet holds the cordon (its annotation says so and the node still is).
        lines.append(
            f"C=false; [ \"$(kubectl get node {n} -o jsonpath='{{.spec.unschedulable}}')\" "
            f"= true ] && U=true || U=false"
        )
        lines.append(
            f"kubectl get node {n} -o go-template='{{{{index .metadata.annotations "
            f"\"{MANAGED_ANNOTATION}\"}}}}' | grep -q '\"cordoned\":true' && C=$U || true"
        )
        if d.cordon:
            lines.append(f'if [ "$U" = false ]; then kubectl cordon {n}; C=true; fi')
        else:
            lines.append(f'if [ "$C" = true ]; then kubectl uncordon {n}; C=false; fi')
        record = Managed(
            labels=tuple(sorted(wanted)), taints=tuple(sorted({t.key for t in want_taints}))
        ).to_json()
        # Keys are label keys ([-._/A-Za-z0-9]): only the quotes need escaping for sh "...".
        record = record.replace('"', '\\"').replace('\\"cordoned\\":false', '\\"cordoned\\":$C')
        lines.append(f'kubectl annotate node {n} --overwrite "{MANAGED_ANNOTATION}={record}"')
        lines.append("")
    return "\n".join(lines)
