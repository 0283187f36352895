"""Drift between gpufleet and the systems it projects into, as pure data.

``gpufleet sync status`` asks Kubernetes and Slurm for their nodes, computes what the next
sync would do with the dry-run planners (:func:`gpufleet.domain.k8s.plan_node`,
:func:`gpufleet.domain.slurm.plan`), and explains each disagreement here: whether it is a
hand edit undoing something gpufleet had applied (the node's ``gpufleet.io/managed`` record for
Kubernetes; gpufleet's last ``slurm`` event for Slurm) or a change gpufleet has not applied
yet. Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from gpufleet.domain.k8s import MANAGED_ANNOTATION, Managed, NodePatch
from gpufleet.domain.labels import LEASE_TAINT_KEY
from gpufleet.domain.slurm import ActionKind, Decision


class Target(StrEnum):
    """A system gpufleet syncs into."""

    K8S = "k8s"
    SLURM = "slurm"


def parse_targets(text: str) -> tuple[Target, ...]:
    """``"k8s,slurm"`` -> the targets, in a fixed order; ValueError naming a bad one."""
    out: set[Target] = set()
    for word in (w.strip().lower() for w in text.split(",")):
        if not word:
            continue
        try:
            out.add(Target(word))
        except ValueError:
            raise ValueError(f"{word!r} is not a sync target (k8s, slurm)") from None
    return tuple(t for t in Target if t in out)


class Cause(StrEnum):
    """Why a system disagrees with gpufleet."""

    BY_HAND = "by-hand"
    """gpufleet had applied it, someone changed it on the node since."""
    PENDING = "pending"
    """gpufleet's view changed (or it never synced this node): the next sync applies it."""
    FOREIGN = "foreign"
    """Someone else's change gpufleet never overrides (another drain): it stays."""


@dataclass(frozen=True)
class Disagreement:
    """One thing a system shows differently from gpufleet, and what the next sync does."""

    host: str
    target: Target
    cause: Cause
    what: str
    next_sync: str

    def as_json(self) -> dict[str, str]:
        return {
            "host": self.host,
            "target": self.target.value,
            "cause": self.cause.value,
            "what": self.what,
            "next_sync": self.next_sync,
        }


def k8s_disagreements(
    patch: NodePatch, node: Mapping[str, Any], host_state: str
) -> list[Disagreement]:
    """Explain a dry-run ``patch`` for ``node`` (its JSON before the patch)."""
    meta = node.get("metadata") or {}
    labels: dict[str, str] = dict(meta.get("labels") or {})
    record = (meta.get("annotations") or {}).get(MANAGED_ANNOTATION)
    before = Managed.parse(record)
    synced = record is not None
    out: list[Disagreement] = []

    def add(cause: Cause, what: str, nxt: str) -> None:
        out.append(Disagreement(patch.host, Target.K8S, cause, f"node {patch.node}: {what}", nxt))

    for t in patch.add_taints:
        if t.key == LEASE_TAINT_KEY:  # issue 26: a lease the cluster does not enforce
            add(Cause.BY_HAND if t.key in before.taints else Cause.PENDING,
                f"lease {t.value} not enforced: taint {t} missing, any pod can land",
                f"add taint {t}")
        elif t.key in before.taints:
            add(Cause.BY_HAND, f"gpufleet's taint {t} removed by hand (host is {host_state})",
                f"add taint {t}")
        else:
            add(Cause.PENDING, f"host is {host_state}: taint {t} not applied yet",
                f"add taint {t}")
    for t in patch.remove_taints:
        if t.key == LEASE_TAINT_KEY and t.key in before.taints:
            add(Cause.PENDING, f"lease {t.value} no longer holds the host (host is "
                f"{host_state}): its taint {t} still keeps pods off", f"remove taint {t}")
        elif synced and t.key not in before.taints:
            add(Cause.BY_HAND, f"taint {t} under gpufleet's prefix added by hand",
                f"remove taint {t}")
        else:
            add(Cause.PENDING, f"host is {host_state}: taint {t} no longer wanted",
                f"remove taint {t}")
    for k, v in sorted(patch.set_labels.items()):
        if k in before.labels and k not in labels:
            add(Cause.BY_HAND, f"label {k} removed by hand (gpufleet says {v})",
                f"set label {k}={v}")
        elif k in before.labels:
            add(Cause.BY_HAND if synced else Cause.PENDING,
                f"label {k}={labels[k]} but gpufleet says {v} (edited by hand, or gpufleet's "
                "view changed since the last sync)", f"set label {k}={v}")
        else:
            add(Cause.PENDING, f"label {k} not applied yet (gpufleet says {v})",
                f"set label {k}={v}")
    for k in patch.remove_labels:
        cause = Cause.BY_HAND if synced and k not in before.labels else Cause.PENDING
        add(cause, f"label {k}={labels.get(k, '')} is not gpufleet's", f"remove label {k}")
    if patch.cordon is True:
        if before.cordoned:
            add(Cause.BY_HAND, f"uncordoned by hand while {host_state}", "cordon")
        else:
            add(Cause.PENDING, f"host is {host_state}: not cordoned yet", "cordon")
    elif patch.cordon is False:
        add(Cause.PENDING, f"host is {host_state}: gpufleet's cordon not lifted yet",
            "uncordon (gpufleet's own cordon)")
    if not synced and patch.managed is not None and not out:
        add(Cause.PENDING, "never synced by gpufleet", "record gpufleet's annotation")
    return out


def slurm_disagreements(
    decision: Decision, last_action: str | None
) -> list[Disagreement]:
    """Explain one node's sync ``decision``; ``last_action`` is what gpufleet last did to the
    node (``"drain"``/``"resume"`` from its ``slurm`` events; None: nothing yet)."""
    d = decision
    if d.host_state is None:
        return []
    state = str(d.host_state)

    def one(cause: Cause, what: str, nxt: str) -> list[Disagreement]:
        return [Disagreement(d.node, Target.SLURM, cause, f"slurm node {d.node}: {what}", nxt)]

    slurm = d.slurm_state + (f" ({d.slurm_reason})" if d.slurm_reason else "")
    if d.action is ActionKind.DRAIN:
        if d.slurm_reason and d.slurm_reason.startswith("gpufleet:"):
            return one(Cause.PENDING, f"drained as {d.slurm_reason!r}, host is now {state}",
                       f"drain with reason {d.reason!r}")
        if last_action == ActionKind.DRAIN.value:
            return one(Cause.BY_HAND, f"resumed by hand while {state} (slurm: {slurm})",
                       f"drain with reason {d.reason!r}")
        return one(Cause.PENDING, f"host is {state}, node not drained (slurm: {slurm})",
                   f"drain with reason {d.reason!r}")
    if d.action is ActionKind.RESUME:
        return one(Cause.PENDING, f"drained by gpufleet ({d.slurm_reason}), host is {state}",
                   "resume")
    if d.why.startswith("drained by someone else"):
        return one(Cause.FOREIGN, f"drained by someone else ({d.slurm_reason}) while {state}",
                   "nothing: gpufleet never resumes another drain")
    if d.signal is not None:
        return one(Cause.FOREIGN, d.signal.message, "nothing (a slurm-node alarm is kept open)")
    return []


_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}


def parse_every(text: str) -> float:
    """``"30s"``, ``"1m"``, ``"2h"`` or a number of seconds -> seconds (> 0); ValueError
    naming the text otherwise."""
    t = text.strip().lower()
    unit = _UNITS.get(t[-1:]) if t else None
    number = t[:-1] if unit is not None else t
    try:
        n = float(number) * (unit or 1.0)
    except ValueError:
        raise ValueError(f"{text!r}: expected a duration like 30s, 1m, 2h") from None
    if not n > 0 or n == float("inf"):
        raise ValueError(f"{text!r}: expected a positive duration")
    return n
