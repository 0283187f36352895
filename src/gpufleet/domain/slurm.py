"""Slurm as a projection of gpufleet's lifecycle: node definitions (``slurm.conf``
``NodeName=`` lines, ``gres.conf``) and, per node, what a sync does (drain, resume, leave
alone, raise a health signal). Pure: node states come in as values, actions go out as values.

Ownership: gpufleet drains with a reason ``gpufleet:<code> <text>``. The code is stable
(the lifecycle state and, for a quarantine, the :class:`~gpufleet.domain.health.Fault`
value), never the text of a check, so a renamed check cannot leave a node drained forever.
gpufleet resumes only nodes drained with its prefix, and only once the host is ``available``
or ``allocated`` again (a host being rebooted or re-validated stays drained). A drain by
anyone else is never resumed; Slurm's own drains and DOWN nodes are health signals.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from gpufleet.domain.states import HostState

if TYPE_CHECKING:  # annotations only: `labels HOST`'s lean start never loads the facts model
    from gpufleet.domain.facts import Gpu, HostFacts

#: Every reason gpufleet sets starts with this; nothing else is ever resumed by gpufleet.
REASON_PREFIX = "gpufleet:"
#: Slurm keeps reasons short in its displays; ours stay well under any limit.
REASON_MAX = 200

#: gpufleet states in which a node must not take jobs (drained by gpufleet).
DRAINED_STATES = frozenset(
    {
        HostState.QUARANTINED,
        HostState.MAINTENANCE,
        HostState.RETIRED,
        HostState.ENROLLED,
        HostState.VALIDATING,
        HostState.RECLAIMING,
    }
)
#: gpufleet states in which a node gpufleet drained is resumed.
SERVING_STATES = frozenset({HostState.AVAILABLE, HostState.ALLOCATED})

#: Reasons Slurm itself sets when it drains a node (slurmctld's messages). Matched as
#: case-insensitive substrings of the node's reason.
SLURM_DRAIN_REASONS = (
    "gres/gpu count reported lower than configured",
    "count reported lower than configured",
    "node_fail",
    "not responding",
    "kill task failed",
    "prolog error",
    "epilog error",
    "node unexpectedly rebooted",
    "low realmemory",
    "low socket*core*thread count",
    "low cpus",
    "batch job complete failure",
    "health check failed",
)
#: Base states (sinfo's ``state``) in which a node cannot run jobs whoever drained it.
DOWN_STATES = frozenset({"down", "fail", "future", "unknown", "invalid", "inval"})

#: ``gres.conf`` ``File=`` for a node: ``{node}`` its name, ``{minors}`` the device minors of
#: its usable GPUs (``0-2,4-7``).
DEFAULT_GPU_FILES = "/dev/nvidia[{minors}]"

_FEATURE_BAD = re.compile(r"[^a-z0-9_.-]+")
_EDGE = re.compile(r"^[^a-z0-9]+|[^a-z0-9]+$")
_GRES_DROP = ("nvidia", "tesla", "geforce", "quadro", "rtx")


def sanitize_feature(value: object) -> str:
    """A Slurm feature name: lower case ``[a-z0-9_.-]``, runs of anything else (blanks,
    commas, ``&|[]()*:=`` which Slurm's constraint syntax reserves) become ``_``, trimmed
    to alphanumerics at both ends, at most 63 characters; ``""`` when nothing is left."""
    text = _FEATURE_BAD.sub("_", str(value).lower())
    return _EDGE.sub("", _EDGE.sub("", text)[:63])


def gres_type(product_name: str | None) -> str | None:
    """The GRES type of a GPU model: the first model token of the product name, lower case
    (``"NVIDIA H100 80GB HBM3"`` -> ``"h100"``, ``"NVIDIA A100-SXM4-80GB"`` -> ``"a100"``,
    ``"Tesla V100-PCIE-32GB"`` -> ``"v100"``); None when the name has no usable token."""
    if not product_name:
        return None
    for token in product_name.replace("-", " ").split():
        word = sanitize_feature(token)
        if word and word not in _GRES_DROP:
            return word.replace(".", "_")
    return None


@dataclass(frozen=True)
class Gres:
    """One GRES of a node other than its NVIDIA GPUs (issue 15): ``name:type:count`` in
    slurm.conf (``npu:910b3:8``, ``gpu:mi250:2``), a ``Name= Type= File=`` line in gres.conf
    (``File`` None: the device files are left to Slurm)."""

    name: str
    type: str | None
    count: int
    files: str | None = None

    def spec(self) -> str:
        """``npu:910b3:8`` (``gpu:2`` without a type)."""
        return f"{self.name}:{self.type}:{self.count}" if self.type else f"{self.name}:{self.count}"


@dataclass(frozen=True)
class NodeDef:
    """One Slurm node as gpufleet describes it: its NVIDIA GPUs (``gpu_type``, ``gpus``) and
    the other vendors' accelerators as :class:`Gres` (``gres``)."""

    name: str
    cpus: int | None
    real_memory_mib: int | None
    gpu_type: str | None
    gpus: int
    features: tuple[str, ...] = ()
    gres: tuple[Gres, ...] = ()
    #: Device minors (/dev/nvidia<minor>) of the usable GPUs, from nvidia-smi; None when the
    #: facts do not carry them (then gres.conf gives a count, never a guessed range).
    gpu_minors: tuple[int, ...] | None = None


def node_features(
    labels: Mapping[str, str], gpu_type: str | None, gres: Sequence[Gres] = ()
) -> tuple[str, ...]:
    """Features from gpufleet's labels: the GPU model (and each other GRES's model: ``910b3``,
    ``mi250``), the fabric that is up (``ib``/``roce``), ``nvlink``, one
    ``validated_<profile>`` per profile passed, ``pool_<pool>``, ``rack_<rack>``; each
    sanitised, empty ones dropped, duplicates removed, order kept."""
    raw: list[str] = []
    if gpu_type:
        raw.append(gpu_type)
    raw.extend(g.type for g in gres if g.type)
    fabric = labels.get("gpufleet.io/fabric")
    if fabric and fabric != "none":
        raw.append(fabric)
    if labels.get("gpufleet.io/nvlink") == "true":
        raw.append("nvlink")
    prefix = "gpufleet.io/validated."
    raw.extend(
        f"validated_{k[len(prefix):]}" for k, v in sorted(labels.items())
        if k.startswith(prefix) and v == "true"
    )
    if labels.get("gpufleet.io/pool"):
        raw.append(f"pool_{labels['gpufleet.io/pool']}")
    if labels.get("gpufleet.io/rack"):
        raw.append(f"rack_{labels['gpufleet.io/rack']}")
    out: list[str] = []
    for f in raw:
        clean = sanitize_feature(f)
        if clean and clean not in out:
            out.append(clean)
    return tuple(out)


def node_line(node: NodeDef) -> str:
    """``NodeName=... CPUs=... RealMemory=... Gres=gpu:<type>:<n>[,npu:<type>:<n>]
    Features=...``; values gpufleet does not know are left out (Slurm then uses what slurmd
    reports)."""
    parts = [f"NodeName={node.name}"]
    if node.cpus:
        parts.append(f"CPUs={node.cpus}")
    if node.real_memory_mib:
        parts.append(f"RealMemory={node.real_memory_mib}")
    gres: list[str] = []
    if node.gpus:
        gres.append(f"gpu:{node.gpu_type}:{node.gpus}" if node.gpu_type else f"gpu:{node.gpus}")
    gres.extend(g.spec() for g in node.gres)
    if gres:
        parts.append(f"Gres={','.join(gres)}")
    if node.features:
        parts.append(f"Features={','.join(node.features)}")
    return " ".join(parts)


def usable_gpus(facts: HostFacts, unusable: Sequence[Mapping[str, Any]] | None) -> list[Gpu]:
    """The GPUs of ``facts`` a node offers: not marked unusable by validation (by index or
    PCI address: the host's ``unusable_gpus``) and not in an error state."""
    indices = {u.get("index") for u in unusable or () if u.get("index") is not None}
    buses = {str(u.get("pci_bus_id")).lower() for u in unusable or () if u.get("pci_bus_id")}
    return [
        g
        for g in facts.gpus
        if g.index not in indices
        and (g.pci_bus_id or "").lower() not in buses
        and g.error is None
    ]


def gpu_minors(gpus: Sequence[Gpu]) -> tuple[int, ...] | None:
    """The device minors of ``gpus``; None when any is unknown (not collected)."""
    minors = tuple(g.minor_number for g in gpus if g.minor_number is not None)
    return minors if len(minors) == len(gpus) else None


def minor_ranges(minors: Iterable[int]) -> str:
    """``"0-2,4-7"``: the numbers as Slurm's bracket list (sorted, runs collapsed)."""
    runs: list[list[int]] = []
    for n in sorted(set(minors)):
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def gres_line(node: NodeDef, files_template: str) -> str | None:
    """``NodeName=<n> Name=gpu Type=<type> File=<files>`` for a node with GPUs: the device
    files of exactly its usable GPUs, by minor number. The template takes ``{node}`` and
    ``{minors}`` (``/dev/nvidia[{minors}]`` -> ``/dev/nvidia[0-2,4-7]``); the older
    ``[0-{last}]`` form is read as ``[{minors}]``. Without minor numbers in the facts the
    line gives ``Count=`` and no ``File=``: a range built from a count binds the wrong device
    as soon as a GPU other than the last is missing."""
    if not node.gpus:
        return None
    kind = f" Type={node.gpu_type}" if node.gpu_type else ""
    if node.gpu_minors is None or len(node.gpu_minors) != node.gpus:
        return f"NodeName={node.name} Name=gpu{kind} Count={node.gpus}"
    minors = sorted(node.gpu_minors)
    files = files_template.replace("0-{last}", "{minors}").format(
        node=node.name, minors=minor_ranges(minors), last=minors[-1], count=len(minors)
    )
    return f"NodeName={node.name} Name=gpu{kind} File={files}"


def other_gres_lines(node: NodeDef) -> list[str]:
    """``NodeName=<n> Name=npu Type=910b3 File=/dev/davinci[0-7]``: one line per other GRES
    (no ``File=`` when gpufleet does not know the device files)."""
    out = []
    for g in node.gres:
        kind = f" Type={g.type}" if g.type else ""
        files = f" File={g.files}" if g.files else f" Count={g.count}"
        out.append(f"NodeName={node.name} Name={g.name}{kind}{files}")
    return out


def gres_types(nodes: Sequence[NodeDef]) -> list[str]:
    """The GRES names the nodes use (``GresTypes=`` of slurm.conf): ``gpu``, ``npu`` ..."""
    names = {"gpu"} if any(n.gpus for n in nodes) else set()
    names.update(g.name for n in nodes for g in n.gres)
    return sorted(names)


def render_slurm_conf(nodes: Sequence[NodeDef]) -> str:
    """The ``NodeName=`` lines to put into ``slurm.conf`` (needs ``GresTypes=`` naming every
    GRES used: ``gpu``, and ``npu`` with Ascend nodes; the header says which)."""
    head = "# Written by `gpufleet slurm export`: node definitions from gpufleet's facts.\n"
    types = gres_types(nodes)
    if types:
        head += f"# Needs GresTypes={','.join(types)}\n"
    return head + "".join(node_line(n) + "\n" for n in nodes)


def render_gres_conf(nodes: Sequence[NodeDef], files_template: str) -> str:
    """``gres.conf`` for ``nodes`` (``AutoDetect=off``: the files are what gpufleet says)."""
    lines = ["# Written by `gpufleet slurm export`.", "AutoDetect=off"]
    for n in nodes:
        if line := gres_line(n, files_template):
            lines.append(line)
        lines.extend(other_gres_lines(n))
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- sync decisions


@dataclass(frozen=True)
class SlurmNode:
    """A node as Slurm reports it (``sinfo --json``): base state, flags, reason."""

    name: str
    state: str  # idle, allocated, mixed, down, ...
    flags: frozenset[str] = frozenset()  # DRAIN, NOT_RESPONDING, ...
    reason: str | None = None

    @property
    def drained(self) -> bool:
        return "DRAIN" in self.flags or self.state in ("drained", "draining", "drain")

    @property
    def drained_by_gpufleet(self) -> bool:
        return self.drained and is_gpufleet_reason(self.reason)


class ActionKind(StrEnum):
    """What a sync does to one node."""

    NONE = "none"
    DRAIN = "drain"
    """Drain with gpufleet's reason (also: replace gpufleet's reason by a newer one)."""
    RESUME = "resume"


@dataclass(frozen=True)
class Signal:
    """Slurm's own view says the node is unhealthy (an alarm for the host)."""

    message: str
    critical: bool = False


@dataclass(frozen=True)
class Decision:
    """What a sync does for one node, and why."""

    node: str
    host_state: HostState | None
    action: ActionKind
    reason: str | None = None  # the drain reason, for DRAIN
    why: str = ""
    signal: Signal | None = None
    slurm_state: str = ""
    slurm_reason: str | None = None

    def as_json(self) -> dict[str, object]:
        return {
            "node": self.node,
            "host_state": self.host_state.value if self.host_state else None,
            "action": self.action.value,
            "reason": self.reason,
            "why": self.why,
            "signal": self.signal.message if self.signal else None,
            "slurm_state": self.slurm_state,
            "slurm_reason": self.slurm_reason,
        }


def is_gpufleet_reason(reason: str | None) -> bool:
    return bool(reason) and str(reason).startswith(REASON_PREFIX)


def reason_code(reason: str | None) -> str | None:
    """The stable code of a gpufleet reason (``"gpufleet:quarantined:fatal_xid Xid 79"`` ->
    ``"quarantined:fatal_xid"``); None for anyone else's reason."""
    if not reason or not is_gpufleet_reason(reason):
        return None
    return reason[len(REASON_PREFIX):].split(None, 1)[0] if reason[len(REASON_PREFIX):] else ""


def drain_reason(state: HostState, fault: str | None, text: str | None) -> str:
    """gpufleet's reason for a host in ``state``: ``gpufleet:<state>[:<fault>] <text>``."""
    code = str(state) + (f":{sanitize_feature(fault)}" if fault else "")
    words = " ".join((text or "").split())  # one line: Slurm shows reasons on one
    out = f"{REASON_PREFIX}{code}" + (f" {words}" if words else "")
    return out[:REASON_MAX]


def slurm_signal(node: SlurmNode) -> Signal | None:
    """A health signal from Slurm's own view: a drain Slurm set (GPU count lower than
    configured, node failure, not responding...) or a node DOWN/FAIL that gpufleet did not
    drain. None when Slurm sees nothing wrong (or the node is down under gpufleet's drain)."""
    if node.drained_by_gpufleet:
        return None
    reason = (node.reason or "").lower()
    if node.drained and any(p in reason for p in SLURM_DRAIN_REASONS):
        critical = "count reported lower" in reason
        return Signal(f"slurm drained {node.name}: {node.reason}", critical)
    if node.state in DOWN_STATES or "FAIL" in node.flags:
        why = f": {node.reason}" if node.reason else ""
        return Signal(f"slurm reports {node.name} {node.state.upper()}{why}")
    return None


def decide(node: SlurmNode, host_state: HostState | None, wanted_reason: str | None) -> Decision:
    """What a sync does for ``node`` given the gpufleet state of its host (None: gpufleet does
    not know the host) and the reason gpufleet would drain with (:func:`drain_reason`)."""

    def d(action: ActionKind, why: str, reason: str | None = None) -> Decision:
        return Decision(node.name, host_state, action, reason, why, slurm_signal(node),
                        node.state, node.reason)

    if host_state is None:
        return d(ActionKind.NONE, "not a gpufleet host")
    if host_state in DRAINED_STATES:
        if not node.drained:
            return d(ActionKind.DRAIN, f"host is {host_state}", wanted_reason)
        if not node.drained_by_gpufleet:
            return d(ActionKind.NONE, "already drained by someone else (their reason kept)")
        if reason_code(node.reason) != reason_code(wanted_reason):
            return d(ActionKind.DRAIN, f"host is {host_state}: reason updated", wanted_reason)
        return d(ActionKind.NONE, f"drained by gpufleet, host is {host_state}")
    if host_state in SERVING_STATES:
        if node.drained_by_gpufleet:
            return d(ActionKind.RESUME, f"host is {host_state} again (re-validated)")
        if node.drained:
            return d(ActionKind.NONE, "drained by someone else: never resumed by gpufleet")
        return d(ActionKind.NONE, "in service")
    return d(ActionKind.NONE, f"host is {host_state}")


def plan(
    nodes: Iterable[SlurmNode],
    hosts: Mapping[str, tuple[HostState, str | None]],
    reasons: Mapping[str, str],
) -> list[Decision]:
    """Decisions for every Slurm node: ``hosts`` maps node name -> (state, fault) of the
    gpufleet host, ``reasons`` node name -> the text of the host's reason."""
    out = []
    for node in sorted(nodes, key=lambda n: n.name):
        state, fault = hosts.get(node.name, (None, None))
        wanted = drain_reason(state, fault, reasons.get(node.name)) if state else None
        out.append(decide(node, state, wanted))
    return out


# --- issue 27: topology.conf, one switch (tree) or block per NVLink domain ------------------

#: The tree's top switch, and the switch of nodes in no multi-node NVLink domain.
TOP_SWITCH, OTHER_SWITCH = "fleet", "no_nvl_domain"


def _switch(domain: str) -> str:
    return f"nvl_{sanitize_feature(domain)}"


def render_topology(domains: Mapping[str, str | None], *, block: bool = False) -> str:
    """``topology.conf`` for the nodes (``{node: NVLink domain or None}``): for
    ``topology/tree`` (``block`` false) one leaf switch per NVLink domain holding its nodes,
    one leaf for the nodes in none, and a top switch over them (so every node stays
    schedulable; a job that must not span domains asks ``--switches=1``); for
    ``topology/block`` (Slurm 23.11+) one ``BlockName=`` per NVLink domain (nodes in none
    get no block)."""
    by: dict[str, list[str]] = {}
    for node, domain in sorted(domains.items()):
        by.setdefault(_switch(domain) if domain else OTHER_SWITCH, []).append(node)
    lines = ["# gpufleet: one " + ("block" if block else "switch") + " per NVLink domain"]
    if block:
        lines += [f"BlockName={name} Nodes={','.join(nodes)}"
                  for name, nodes in sorted(by.items()) if name != OTHER_SWITCH]
        return "\n".join(lines) + "\n"
    lines += [f"SwitchName={name} Nodes={','.join(nodes)}" for name, nodes in sorted(by.items())]
    if by:
        lines.append(f"SwitchName={TOP_SWITCH} Switches={','.join(sorted(by))}")
    return "\n".join(lines) + "\n"
