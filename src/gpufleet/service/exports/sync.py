"""``gpufleet sync``: run the enabled syncs (Kubernetes, Slurm) once or in a loop, and
``gpufleet sync status``: where those systems disagree with gpufleet, and what the next sync
will do. Kubernetes includes the DRA DeviceTaintRules (:mod:`gpufleet.service.exports.k8s_dra`,
``k8s dra-sync``) where the cluster uses DRA (``GPUFLEET_KUBE_DRA``); Slurm includes the
leases' reservations.

A round runs every enabled target; a target that fails (API unreachable, ``scontrol``
error) is reported in the round and never stops the others. The loop sleeps between rounds
on a :class:`threading.Event`, so a stop request (SIGTERM in the CLI) ends the sleep at once
and lets a running round finish. ``sync_status`` uses the same dry-run planners as the syncs
and writes nothing, in gpufleet or in the systems.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from sqlalchemy import select

from gpufleet.collect.slurm import SlurmClient
from gpufleet.domain.events import EventKind
from gpufleet.domain.k8s import plan_node
from gpufleet.domain.slurm import plan
from gpufleet.domain.sync import (
    Disagreement,
    Target,
    k8s_disagreements,
    parse_targets,
    slurm_disagreements,
)
from gpufleet.errors import ConfigError, GpufleetError
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.exports.k8s import KubeNodes, NodeApi, desired_nodes, k8s_sync
from gpufleet.service.exports.k8s_dra import DraApi, KubeDra, dra_disagreements, dra_sync
from gpufleet.service.exports.slurm import slurm_hosts, slurm_sync
from gpufleet.service.exports.slurm_reservations import (
    reservation_disagreements,
    reservation_sync,
)
from gpufleet.store.tables import Event as EventRow
from gpufleet.store.tables import Host

log = logging.getLogger(__name__)


@dataclass
class Systems:
    """How to reach the targets (None: the settings / Slurm's own ``SLURM_CONF``)."""

    k8s_api: NodeApi | None = None
    kubeconfig: Path | None = None
    slurm: SlurmClient | None = None
    dra_api: DraApi | None = None

    def kube(self, fleet: Fleet) -> NodeApi:
        if self.k8s_api is None:
            self.k8s_api = KubeNodes(self.kubeconfig or fleet.settings.k8s_kubeconfig)
        return self.k8s_api

    def dra(self, fleet: Fleet) -> DraApi | None:
        """The DRA API where the cluster uses DRA (``GPUFLEET_KUBE_DRA``); else None."""
        if self.dra_api is None and fleet.settings.k8s_dra:
            self.dra_api = KubeDra(self.kubeconfig or fleet.settings.k8s_kubeconfig)
        return self.dra_api

    def slurm_client(self) -> SlurmClient:
        return self.slurm or SlurmClient()


def enabled_targets(fleet: Fleet, chosen: Sequence[Target] = ()) -> tuple[Target, ...]:
    """``chosen`` (command-line flags) or else the ``GPUFLEET_SYNC_TARGETS`` setting; a
    ConfigError when neither names one (nothing to sync is a mistake, not a success)."""
    targets = tuple(t for t in Target if t in chosen) or parse_targets(
        fleet.settings.sync_targets
    )
    if not targets:
        raise ConfigError(
            setting="GPUFLEET_SYNC_TARGETS",
            cause="no sync target enabled: set it (k8s, slurm) or pass --k8s / --slurm",
        )
    return targets


@dataclass
class TargetResult:
    """One target in one round."""

    target: Target
    changed: list[str] = field(default_factory=list)  # "gpu-01: + taint ..." / "drain gpu-02"
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


@dataclass
class Round:
    """One sync round over the enabled targets."""

    results: list[TargetResult]

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results)


def _run_k8s(fleet: Fleet, systems: Systems) -> TargetResult:
    res = TargetResult(Target.K8S)
    rep = k8s_sync(fleet, api=systems.kube(fleet))
    for r in rep.changed:
        if r.patch is not None:
            res.changed.append(f"{r.host}: " + "; ".join(r.patch.diff() or ["annotation"]))
    res.errors += [f"{r.host}: {r.error}" for r in rep.results if r.error]
    dra = systems.dra(fleet)
    if dra is not None:  # a failure here is the round's error; the node sync above stands
        d = dra_sync(fleet, api=dra)
        res.changed += [f"{d.hosts.get(n, '?')}: + DeviceTaintRule {n}" for n in d.created]
        res.changed += [f"{d.hosts.get(n, '?')}: - DeviceTaintRule {n}" for n in d.removed]
        res.errors += d.errors + [f"{h}: ResourceSlices list {n} of {want} GPUs"
                                  for h, (n, want) in sorted(d.short.items())]
    return res


def _run_slurm(fleet: Fleet, systems: Systems) -> TargetResult:
    rep = slurm_sync(fleet, systems.slurm_client())
    return TargetResult(Target.SLURM, list(rep.done), list(rep.errors))


RUNNERS: dict[Target, Callable[[Fleet, Systems], TargetResult]] = {
    Target.K8S: _run_k8s,
    Target.SLURM: _run_slurm,
}


def sync_round(fleet: Fleet, targets: Sequence[Target], systems: Systems | None = None) -> Round:
    """Run each target's sync; one that fails is reported and the others still run."""
    systems = systems or Systems()
    results = []
    for t in targets:
        try:
            results.append(RUNNERS[t](fleet, systems))
        except GpufleetError as exc:
            log.warning("%s sync failed: %s", t, exc)
            results.append(TargetResult(t, errors=[str(exc)]))
    return Round(results)


def sync_loop(
    fleet: Fleet,
    targets: Sequence[Target],
    every: timedelta,
    stop: threading.Event,
    systems: Systems | None = None,
    on_round: Callable[[Round], None] | None = None,
) -> int:
    """Rounds until ``stop`` is set (a round in progress finishes first); the rounds run."""
    systems = systems or Systems()
    rounds = 0
    while not stop.is_set():
        r = sync_round(fleet, targets, systems)
        rounds += 1
        if on_round is not None:
            on_round(r)
        stop.wait(every.total_seconds())
    return rounds


@dataclass
class Status:
    """``sync status``: per host, the disagreements; errors of targets that could not be read
    (a target that cannot be read is never reported as agreeing)."""

    targets: tuple[Target, ...]
    disagreements: list[Disagreement]
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


def _k8s_status(fleet: Fleet, systems: Systems) -> list[Disagreement]:
    wanted = desired_nodes(fleet)
    nodes = systems.kube(fleet).list_nodes()
    out: list[Disagreement] = []
    own_nvidia = fleet.settings.k8s_own_nvidia_labels
    own_vendor = fleet.settings.k8s_own_vendor_labels
    for desired, row in wanted:
        node = nodes.get(desired.node)
        if node is None:
            continue
        patch = plan_node(desired, node, own_nvidia=own_nvidia, own_vendor=own_vendor)
        out += k8s_disagreements(patch, node, str(row.state))
    dra = systems.dra(fleet)
    if dra is not None:
        out += dra_disagreements(dra_sync(fleet, api=dra, dry_run=True))
    return out


def _last_slurm_actions(fleet: Fleet) -> dict[str, str]:
    with fleet.db.session() as s:
        rows = s.execute(
            select(Host.name, EventRow.data)
            .join(Host, Host.id == EventRow.host_id)
            .where(EventRow.kind == EventKind.SLURM)
            .order_by(EventRow.id)
        ).all()
    out: dict[str, str] = {}
    for name, data in rows:
        action = (data or {}).get("action")
        if isinstance(action, str):
            out[name] = action
    return out


def _slurm_status(fleet: Fleet, systems: Systems) -> list[Disagreement]:
    hosts = slurm_hosts(fleet)
    last = _last_slurm_actions(fleet)
    nodes = systems.slurm_client().nodes()  # no transaction open while sinfo runs
    decisions = plan(
        nodes,
        {name: (state, fault) for name, (state, fault, _) in hosts.items()},
        {name: text for name, (_, _, text) in hosts.items() if text},
    )
    out = [x for d in decisions for x in slurm_disagreements(d, last.get(d.node))]
    return out + reservation_disagreements(
        reservation_sync(fleet, systems.slurm_client(), dry_run=True))


STATUS: dict[Target, Callable[[Fleet, Systems], list[Disagreement]]] = {
    Target.K8S: _k8s_status,
    Target.SLURM: _slurm_status,
}


def sync_status(
    fleet: Fleet, targets: Sequence[Target], systems: Systems | None = None
) -> Status:
    """Where the enabled targets disagree with gpufleet, sorted by host (no writes)."""
    systems = systems or Systems()
    status = Status(tuple(targets), [])
    for t in targets:
        try:
            status.disagreements += STATUS[t](fleet, systems)
        except GpufleetError as exc:
            status.errors.append(f"{t}: {exc}")
    status.disagreements.sort(key=lambda d: (d.host, d.target.value))
    return status
