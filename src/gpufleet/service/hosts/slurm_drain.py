"""Drain before you touch (issue 26, Slurm): before maintenance, remediation or a campaign
action on hosts, their Slurm nodes are drained (``scontrol update state=drain``, with the
reason gpufleet's sync keeps for a host in ``maintenance``) and the jobs running on them are
waited for (``squeue -w``), up to a timeout or the end of the host's lease when that comes
first. The report says, per host, what blocked (the jobs still running, their expected end).

A node whose jobs did not end in time is resumed again when this drain set it (nothing is
left drained for an action that did not happen); the caller then refuses the action.
``no_drain`` skips the drain and the wait: the override is recorded on the host's
``slurm-drain`` event. Slurm runs with no transaction open; the events are written in one
short transaction at the end.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta

from sqlalchemy import select

from gpufleet.collect.slurm import SlurmClient
from gpufleet.domain.events import EventKind
from gpufleet.domain.leases import LeaseState
from gpufleet.domain.slurm import drain_reason
from gpufleet.domain.states import HostState
from gpufleet.domain.sync import Target, parse_targets
from gpufleet.errors import LocalIOError
from gpufleet.service.core.fleet import Fleet, record_event
from gpufleet.store.tables import Host, Lease, LeaseHost


@dataclass
class HostDrain:
    """One host's drain: ``outcome`` is ``drained`` (no job left), ``timed-out`` (jobs still
    running: ``blocking``), ``skipped`` (``--no-drain``), ``no-node`` (not a Slurm node) or
    ``error`` (a Slurm command failed: ``error``)."""

    host: str
    outcome: str
    waited_s: float = 0.0
    blocking: list[str] = field(default_factory=list)
    error: str | None = None
    drained_here: bool = False  # this drain set DRAIN (it was not drained before)

    @property
    def ok(self) -> bool:
        """The action may go ahead."""
        return self.outcome in ("drained", "skipped", "no-node")

    def as_json(self) -> dict[str, object]:
        return {"host": self.host, "outcome": self.outcome, "waited_s": round(self.waited_s, 1),
                "blocking": self.blocking, "error": self.error}

    def describe(self) -> str:
        if self.outcome == "timed-out":
            return (f"{self.host}: still running after {self.waited_s:.0f}s: "
                    + "; ".join(self.blocking))
        if self.outcome == "error":
            return f"{self.host}: drain failed: {self.error}"
        return f"{self.host}: {self.outcome}"


@dataclass
class DrainReport:
    hosts: list[HostDrain]

    @property
    def ok(self) -> bool:
        return all(h.ok for h in self.hosts)

    @property
    def blocked(self) -> list[HostDrain]:
        return [h for h in self.hosts if not h.ok]

    def by_host(self) -> dict[str, HostDrain]:
        return {h.host: h for h in self.hosts}


def _lease_ends(fleet: Fleet, names: Sequence[str]) -> dict[str, float]:
    """Host -> seconds until its active lease ends (a job of the lessee may run that long)."""
    now = fleet.now()
    with fleet.db.session() as s:
        rows = s.execute(
            select(LeaseHost.host_name, LeaseHost.ends_at)
            .join(Lease, Lease.id == LeaseHost.lease_id)
            .where(LeaseHost.host_name.in_(list(names)), LeaseHost.holding,
                   Lease.state == LeaseState.ACTIVE)
        ).all()
    return {name: max((end - now).total_seconds(), 0.0) for name, end in rows}


def drain_and_wait(
    fleet: Fleet,
    names: Sequence[str],
    why: str,
    *,
    client: SlurmClient | None = None,
    timeout: timedelta = timedelta(minutes=30),
    no_drain: bool = False,
    purpose: str = "maintenance",
    poll_s: float = 1.0,
    sleep: Callable[[float], None] = time.sleep,
) -> DrainReport:
    """Drain the nodes of ``names`` and wait for their jobs (see the module); ``purpose``
    names the action in the events (maintenance, remediation, campaign)."""
    if no_drain:
        report = DrainReport([HostDrain(n, "skipped") for n in names])
        _record(fleet, report, why, purpose, no_drain=True)
        return report
    client = client or SlurmClient()
    reason = drain_reason(HostState.MAINTENANCE, None, f"{purpose}: {why}")
    out: dict[str, HostDrain] = {}
    try:
        nodes = {n.name: n for n in client.nodes()}
    except LocalIOError as exc:
        report = DrainReport([HostDrain(n, "error", error=str(exc)) for n in names])
        _record(fleet, report, why, purpose, no_drain=False)
        return report
    for name in names:
        node = nodes.get(name)
        if node is None:
            out[name] = HostDrain(name, "no-node")
            continue
        try:
            if not node.drained:
                client.drain(name, reason)
            out[name] = HostDrain(name, "draining", drained_here=not node.drained)
        except LocalIOError as exc:
            out[name] = HostDrain(name, "error", error=str(exc))
    limit = timeout.total_seconds()
    ends = _lease_ends(fleet, list(out))
    start = time.monotonic()
    waiting = [h for h in out.values() if h.outcome == "draining"]
    while waiting:
        elapsed = time.monotonic() - start
        for h in list(waiting):
            try:
                jobs = client.jobs_on(h.host)
            except LocalIOError as exc:
                h.outcome, h.error = "error", str(exc)
                waiting.remove(h)
                continue
            h.waited_s = elapsed
            h.blocking = [str(j) for j in jobs]
            if not jobs:
                h.outcome = "drained"
                waiting.remove(h)
            elif elapsed >= min(limit, ends.get(h.host, limit)):
                h.outcome = "timed-out"
                waiting.remove(h)
        if waiting:
            sleep(poll_s)
    for h in out.values():
        if not h.ok and h.drained_here:
            try:  # the action will not happen: leave the node as it was
                client.resume(h.host)
            except LocalIOError as exc:
                h.error = f"{h.error + '; ' if h.error else ''}resume failed: {exc}"
    report = DrainReport([out[n] for n in names])
    _record(fleet, report, why, purpose, no_drain=False)
    return report


def _record(fleet: Fleet, report: DrainReport, why: str, purpose: str, *, no_drain: bool) -> None:
    with fleet.db.session() as s:
        rows = {h.name: h for h in s.scalars(
            select(Host).where(Host.name.in_([d.host for d in report.hosts])))}
        for d in report.hosts:
            host = rows.get(d.host)
            if host is None or d.outcome == "no-node":
                continue
            msg = (f"slurm drain skipped before {purpose} (--no-drain): {why}" if no_drain
                   else f"slurm drain before {purpose}: {d.describe()}")
            record_event(s, fleet, EventKind.SLURM_DRAIN, msg, host=host,
                         data=d.as_json() | {"purpose": purpose, "no_drain": no_drain,
                                             "reason": why})


def work_runs_in_slurm(fleet: Fleet) -> bool:
    """Whether actions drain Slurm first: Slurm is one of the sync targets
    (``GPUFLEET_SYNC_TARGETS``), i.e. the fleet's work runs in Slurm."""
    return Target.SLURM in parse_targets(fleet.settings.sync_targets)
