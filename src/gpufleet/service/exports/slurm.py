"""Slurm as a projection of gpufleet: node definitions for ``slurm.conf``/``gres.conf``, and
a sync that drains and resumes nodes so that Slurm agrees with the lifecycle.

The decisions are pure (:mod:`gpufleet.domain.slurm`); this module reads the hosts (one short
transaction), asks Slurm for its nodes and runs ``scontrol`` (no transaction open), then
records what it did and the health signals Slurm gave (one short transaction: ``slurm``
events, ``slurm-node`` alarms opened or closed).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from sqlalchemy import select

from gpufleet.collect.sacct import parse_sacct_json
from gpufleet.collect.slurm import SlurmClient
from gpufleet.domain.accelerator_exports import gres_of
from gpufleet.domain.accelerators import Vendor, inventories_of
from gpufleet.domain.events import AlarmKind, AlarmSeverity, EventKind
from gpufleet.domain.facts import HostFacts
from gpufleet.domain.roles import HostRole
from gpufleet.domain.slurm import (
    DEFAULT_GPU_FILES,
    ActionKind,
    Decision,
    NodeDef,
    gpu_minors,
    gres_type,
    node_features,
    plan,
    render_gres_conf,
    render_slurm_conf,
    render_topology,
    usable_gpus,
)
from gpufleet.domain.states import HostState
from gpufleet.errors import ConfigError, LocalIOError, NotFound
from gpufleet.service.allocation.holds import record_holds
from gpufleet.service.core.alarms import close_alarms, raise_alarm
from gpufleet.service.core.fleet import Fleet, record_event
from gpufleet.service.core.select import is_explicit, nothing_matches, select_hosts
from gpufleet.service.exports.slurm_reservations import ReservationReport, reservation_sync
from gpufleet.service.health.failures import ImportReport, failure_rules, store_failure
from gpufleet.service.hosts.vendor_exports import EXPORTS
from gpufleet.service.views.summary import host_labels
from gpufleet.store.repo import host_by_name, hosts_with_latest_facts
from gpufleet.store.tables import Alarm, FailureRow, Host


def node_defs(fleet: Fleet, selector: str | None = None) -> list[NodeDef]:
    """One Slurm node per selected host: CPUs, memory (MiB) and GPUs from its latest facts,
    the other vendors' accelerators as their GRES (``npu:910b3:8``, ``gpu:mi250:2``: see
    :mod:`gpufleet.service.hosts.vendor_exports`), features from its labels. Retired hosts are
    left out."""
    with fleet.db.session() as s:
        rows = hosts_with_latest_facts(s, select_hosts(selector))
    if not rows and is_explicit(selector):
        raise nothing_matches(selector)
    labels = {h.host: h.labels for h in host_labels(fleet, selector)}
    out = []
    for h, snap in rows:
        if h.state == HostState.RETIRED:
            continue
        facts = HostFacts.model_validate(snap.facts) if snap else None
        # a cpu/storage node (issue 26 item 9) is a plain node: no GPU, no GRES
        gpu_node = h.role == HostRole.GPU.value
        gpus = usable_gpus(facts, h.unusable_gpus) if facts is not None and gpu_node else None
        model = gres_type(gpus[0].product_name if gpus else None)
        mem = facts.memory_total_kib if facts else None
        others = (
            tuple(gres_of(inventories_of(facts), EXPORTS, skip=(Vendor.NVIDIA,)))
            if facts is not None and gpu_node
            else ()
        )
        out.append(
            NodeDef(
                name=h.name,
                cpus=facts.cpu_count if facts else None,
                # RealMemory a bit under the kernel's total, as Slurm's docs advise: slurmd
                # reports less than MemTotal, and a node reporting less than configured drains
                real_memory_mib=int(mem * 0.97) // 1024 if mem else None,
                gpu_type=model,
                gpus=len(gpus or []),
                features=node_features(labels.get(h.name, {}), model, others),
                gres=others,
                gpu_minors=gpu_minors(gpus or []),
            )
        )
    return out


def slurm_config(
    fleet: Fleet, selector: str | None = None, gpu_files: str = DEFAULT_GPU_FILES
) -> tuple[str, str]:
    """(``slurm.conf`` node lines, ``gres.conf``) for the selected hosts."""
    nodes = node_defs(fleet, selector)
    return render_slurm_conf(nodes), render_gres_conf(nodes, gpu_files)


def write_slurm_config(
    fleet: Fleet,
    out: Path,
    selector: str | None = None,
    gpu_files: str = DEFAULT_GPU_FILES,
) -> list[Path]:
    """``gpufleet slurm export``: write ``OUT/slurm.conf`` (the ``NodeName=`` lines to
    include in the cluster's ``slurm.conf``) and ``OUT/gres.conf``; the paths written."""
    conf, gres = slurm_config(fleet, selector, gpu_files)
    written = []
    for name, text in (("slurm.conf", conf), ("gres.conf", gres)):
        path = out / name
        try:
            out.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{name}.tmp")
            tmp.write_text(text, encoding="utf-8")
            tmp.replace(path)
        except OSError as exc:
            raise LocalIOError(path=str(path), cause=str(exc.strerror or exc)) from exc
        written.append(path)
    return written


def write_topology(fleet: Fleet, out: Path, selector: str | None = None) -> list[Path]:
    """Issue 27: ``OUT/topology.conf`` (``topology/tree``: one switch per NVLink domain) and
    ``OUT/topology-block.conf`` (``topology/block``, Slurm 23.11+: one ``BlockName=`` per
    domain) for the selected hosts (retired ones left out); the paths written."""
    with fleet.db.session() as s:
        rows = s.execute(
            select_hosts(selector).with_only_columns(Host.name, Host.nvl_domain, Host.state)
            .order_by(None)
        ).all()
    if not rows and is_explicit(selector):
        raise nothing_matches(selector)
    domains = {n: d for n, d, st in rows if st != HostState.RETIRED}
    written = []
    for name, text in (("topology.conf", render_topology(domains)),
                       ("topology-block.conf", render_topology(domains, block=True))):
        path = out / name
        try:
            out.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise LocalIOError(path=str(path), cause=str(exc.strerror or exc)) from exc
        written.append(path)
    return written


@dataclass
class SyncReport:
    """What a sync decided per node, what it did, what failed."""

    decisions: list[Decision]
    dry_run: bool
    done: list[str] = field(default_factory=list)  # "drain gpu-01", "resume gpu-02"
    errors: list[str] = field(default_factory=list)
    alarms: list[str] = field(default_factory=list)  # hosts with an open slurm-node alarm
    reservations: ReservationReport | None = None  # the leases' reservations (issue 26)

    @property
    def ok(self) -> bool:
        return not self.errors


def slurm_hosts(fleet: Fleet) -> dict[str, tuple[HostState, str | None, str | None]]:
    with fleet.db.session() as s:
        return {
            h.name: (
                h.state,
                h.fault.value if h.fault else None,
                h.fault_reason or h.status_reason,
            )
            for h in s.scalars(select(Host))
        }


def slurm_sync(
    fleet: Fleet, client: SlurmClient | None = None, dry_run: bool = False
) -> SyncReport:
    """Drain the nodes of hosts that must not take jobs, resume the ones gpufleet drained once
    their host is available again, and raise an alarm for what Slurm itself reports. With
    ``dry_run`` nothing is changed, in Slurm or in gpufleet."""
    client = client or SlurmClient()  # Slurm's own SLURM_CONF applies
    hosts = slurm_hosts(fleet)
    nodes = client.nodes()
    decisions = plan(
        nodes,
        {name: (state, fault) for name, (state, fault, _) in hosts.items()},
        {name: text for name, (_, _, text) in hosts.items() if text},
    )
    report = SyncReport(decisions, dry_run)
    if dry_run:
        report.reservations = reservation_sync(fleet, client, dry_run=True)
        return report
    applied: list[Decision] = []
    for d in decisions:
        if d.action is ActionKind.NONE:
            continue
        try:
            if d.action is ActionKind.DRAIN:
                client.drain(d.node, d.reason or "gpufleet:")
            else:
                client.resume(d.node)
        except LocalIOError as exc:
            report.errors.append(f"{d.node}: {d.action}: {exc}")
            continue
        applied.append(d)
        report.done.append(f"{d.action} {d.node}")
    with fleet.db.session() as s:
        rows = {h.name: h for h in s.scalars(select(Host).where(Host.name.in_(
            [d.node for d in decisions if d.host_state is not None])))}
        for d in applied:
            host = rows.get(d.node)
            if host is not None:
                record_event(
                    s, fleet, EventKind.SLURM,
                    f"slurm: {d.action} {d.node} ({d.why})", host=host,
                    data={"action": d.action.value, "reason": d.reason,
                          "slurm_state": d.slurm_state, "slurm_reason": d.slurm_reason},
                )
        for d in decisions:
            host = rows.get(d.node)
            if host is None:
                continue
            if d.signal is not None:
                report.alarms.append(d.node)
                if s.scalar(select(Alarm.id).where(
                    Alarm.host_id == host.id, Alarm.kind == AlarmKind.SLURM_NODE,
                    Alarm.closed_at.is_(None),
                )) is not None:
                    continue  # already open: no new event on every sync
                severity = AlarmSeverity.CRITICAL if d.signal.critical else AlarmSeverity.WARNING
                raise_alarm(s, fleet, host, AlarmKind.SLURM_NODE, severity, d.signal.message,
                            {"slurm_state": d.slurm_state, "slurm_reason": d.slurm_reason})
            else:
                close_alarms(s, fleet, host, AlarmKind.SLURM_NODE, "slurm sees the node healthy")
        # drains by someone else, seen or gone: campaigns skip those hosts (not taken over)
        record_holds(s, fleet, "slurm", {
            n.name: (rows[n.name], n.name, f"node {n.name} drained in Slurm by someone else "
                     f"({n.reason or 'no reason'})"
                     if n.drained and not n.drained_by_gpufleet else None)
            for n in nodes if n.name in rows
        })
    # the leases' reservations: their own reads and transactions, after the node actions
    report.reservations = res = reservation_sync(fleet, client)
    report.done += res.done
    report.errors += res.errors
    return report


def import_slurm_failures(
    fleet: Fleet,
    since: timedelta = timedelta(days=1),
    client: SlurmClient | None = None,
) -> ImportReport:
    """``gpufleet failures import --slurm``: failed jobs of the last ``since`` from ``sacct
    --json`` (needs Slurm accounting, slurmdbd), one failure per job and node, classified like
    any other. A job already imported for a host is not stored twice; a job that cannot be
    read or whose node is not a gpufleet host is reported and spoils nothing else."""
    client = client or SlurmClient()
    text = client.sacct_json(fleet.now() - since)  # no transaction open while sacct runs
    parsed = parse_sacct_json(text)
    rules = failure_rules(fleet)
    report = ImportReport(0, [f"sacct: {p}" for p in parsed.problems])
    with fleet.db.session() as s:
        for f in parsed.failures:
            where = f"sacct: job {f.job} on {f.host}"
            try:
                with s.begin_nested():
                    host = host_by_name(s, f.host)
                    if s.scalar(select(FailureRow.id).where(
                        FailureRow.job_id == f.job, FailureRow.host_id == host.id,
                        FailureRow.source.startswith("slurm"),
                    )) is not None:
                        continue
                    store_failure(s, fleet, rules, f.as_row(), f"slurm sacct job {f.job}")
            except (ConfigError, NotFound) as exc:
                report.errors.append(f"{where}: {exc}")
                continue
            report.recorded += 1
    return report
