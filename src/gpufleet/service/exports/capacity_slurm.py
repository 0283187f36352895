"""``gpufleet capacity --slurm`` and ``capacity check --slurm`` (issue 26): the GPUs Slurm can
still give to a job, per partition, next to gpufleet's.

Per selected host that is a Slurm node (``sinfo --json``): its configured GPUs (``gres``)
minus the GPUs allocated to jobs (``gres_used``). ``free`` counts only nodes a new job can
land on (idle, mixed or allocated; not drained, down, failing or reserved); the GPUs of the
others are ``unschedulable``. A node in several partitions is counted in each.
``gpufleet_free`` is the GPUs of those hosts gpufleet has available. A GRES that cannot be
read fails the command (never a guessed 0). Slurm is asked with no transaction open.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpufleet.collect.slurm import SlurmClient
from gpufleet.collect.slurm_state import NodeGres
from gpufleet.domain.states import HostState
from gpufleet.errors import ConfigError
from gpufleet.service.allocation.capacity import CapacityCheck
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.core.select import is_explicit, nothing_matches, select_hosts
from gpufleet.store.repo import hosts_with_latest_facts


@dataclass
class SlurmCapacityRow:
    """Slurm's GPUs of one (partition, GPU type)."""

    partition: str
    gpu_type: str
    nodes: int = 0
    gpus: int = 0
    used: int = 0
    free: int = 0
    unschedulable: int = 0
    gpufleet_free: int = 0

    def as_json(self) -> dict[str, Any]:
        return {"partition": self.partition, "gpu_type": self.gpu_type, "nodes": self.nodes,
                "gpus": self.gpus, "used": self.used, "free": self.free,
                "unschedulable": self.unschedulable, "gpufleet_free": self.gpufleet_free}


@dataclass
class SlurmCapacity:
    """Rows per (partition, GPU type); selected hosts Slurm has no node for."""

    rows: list[SlurmCapacityRow]
    missing: list[str]

    def as_json(self) -> dict[str, Any]:
        return {"rows": [r.as_json() for r in self.rows], "missing": self.missing}


def slurm_capacity(
    fleet: Fleet, selector: str | None = None, *, client: SlurmClient | None = None
) -> SlurmCapacity:
    """Slurm's view of the selected hosts' nodes (see the module docstring)."""
    with fleet.db.session() as s:
        hosts = {h.name: HostState(h.state)
                 for h, _ in hosts_with_latest_facts(s, select_hosts(selector))}
    if not hosts and is_explicit(selector):
        raise nothing_matches(selector)
    nodes = {n.name: n for n in (client or SlurmClient()).node_gres()}
    out: dict[tuple[str, str], SlurmCapacityRow] = {}
    missing: list[str] = []
    for name in sorted(hosts):
        state = hosts[name]
        if state is HostState.RETIRED:
            continue
        node = nodes.get(name)
        if node is None:
            missing.append(name)
            continue
        for part in node.partitions or ("-",):
            row = out.setdefault((part, node.gpu_type), SlurmCapacityRow(part, node.gpu_type))
            _add(row, node, state)
    return SlurmCapacity([out[k] for k in sorted(out)], missing)


def _add(row: SlurmCapacityRow, node: NodeGres, state: HostState) -> None:
    row.nodes += 1
    row.gpus += node.gpus
    row.used += node.used
    if node.schedulable:
        row.free += node.free
    else:
        row.unschedulable += node.gpus
    if state is HostState.AVAILABLE:
        row.gpufleet_free += node.gpus


@dataclass
class SlurmCheck:
    """``capacity check --slurm``: enough GPUs free in Slurm (in ``partition``: the one asked
    for, else the one with the most free) and in gpufleet's own check."""

    ok: bool
    needed: int
    free: int
    partition: str | None
    message: str
    gpufleet: CapacityCheck
    rows: list[SlurmCapacityRow] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "needed": self.needed, "free": self.free,
                "partition": self.partition, "message": self.message,
                "rows": [r.as_json() for r in self.rows]}


def slurm_check(
    fleet: Fleet,
    gpufleet: CapacityCheck,
    *,
    partition: str | None = None,
    selector: str | None = None,
    client: SlurmClient | None = None,
) -> SlurmCheck:
    """Gate on what Slurm can run now: the GPUs of the checked model free in a partition
    must cover the GPUs gpufleet's check needs (requested plus headroom), and that check
    must pass. A partition no selected node is in is a ConfigError (a typo, not "0 free")."""
    cap = slurm_capacity(fleet, selector, client=client)
    model = (gpufleet.model or "").lower()
    rows = [r for r in cap.rows if model in r.gpu_type.lower()
            and (partition is None or r.partition == partition)]
    if partition is not None and not any(r.partition == partition for r in cap.rows):
        known = sorted({r.partition for r in cap.rows})
        raise ConfigError(f"--partition {partition!r}: no selected host's node is in it "
                          f"(partitions: {', '.join(known) or 'none'})")
    free_by: dict[str, int] = {}
    for r in rows:
        free_by[r.partition] = free_by.get(r.partition, 0) + r.free
    best = partition or (max(sorted(free_by), key=lambda p: free_by[p]) if free_by else None)
    free = free_by.get(best, 0) if best is not None else 0
    needed = gpufleet.needed
    what = f"{gpufleet.model or 'any'} GPUs"
    where = f"partition {best}" if best else "no partition"
    slurm_ok = free >= needed
    if slurm_ok:
        msg = f"Slurm: {free} {what} free in {where}, {needed} needed"
    else:
        used = sum(r.used for r in rows if r.partition == best)
        off = sum(r.unschedulable for r in rows if r.partition == best)
        msg = (f"Slurm: only {free} {what} free in {where}, {needed} needed "
               f"({used} allocated to jobs, {off} on nodes that take no jobs)")
    ok = slurm_ok and gpufleet.ok
    return SlurmCheck(ok, needed, free, best, f"{msg}; gpufleet: {gpufleet.message}",
                      gpufleet, rows)

