"""The inspection sweep (``gpufleet inspect``): probe, store samples, judge, act.

One sweep:

1. *probe* through the shared claim -> run -> apply engine (:mod:`gpufleet.service.pipeline`):
   one command per host (:func:`gpufleet.collect.inspect.probe_script`), ``forks`` at once,
   ``timeout_s`` each, so a hanging host costs its own timeout and nobody else's; the apply
   step only parses (no transaction per host);
2. *store* every answer whose claim still holds in one transaction, with bulk inserts
   (``COPY`` on PostgreSQL, ``executemany`` on SQLite), releasing the claims;
3. *judge and act*: per host, the policy (:mod:`gpufleet.domain.rules`) over the host's samples
   in the policy's window, with the fleet medians of this sweep for the straggler rules; then
   in one short transaction per host (row-locked): a finding opens one ``health`` alarm per
   rule and GPU/port (deduplicated); a critical one quarantines the host at once
   (``hardware_fault`` through :func:`gpufleet.service.lifecycle.transition`) unless it is
   leased (the lease runs on, its owner is told through the lease hooks) or the blast-radius
   guard has tripped; a finding that has cleared marks its alarm, which closes only once the
   host has also passed validation after that (warnings close when cleared); a host this
   sweep quarantined whose findings have all cleared goes back to ``validating`` (never
   straight to ``available``), guard or no guard.

The blast-radius guard: when more than ``GPUFLEET_GUARD_SHARE`` of the fleet or
``GPUFLEET_GUARD_HOSTS`` hosts would be quarantined automatically within
``GPUFLEET_GUARD_WINDOW_MINUTES``, automatic quarantine stops at that limit, one fleet alarm
(``fleet_alarms``, kind ``blast-radius``) is raised, and the held-back hosts' alarms are
opened as warnings (data ``held``) so they stay allocatable. Manual actions are untouched.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import event as sa_event
from sqlalchemy import func, select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from gpufleet.collect.inspect import ProbeResult, parse_probe, probe_script
from gpufleet.collect.transport import Outcome, RawResult, Transport, TransportKey
from gpufleet.domain.events import AlarmKind, AlarmSeverity, EventKind
from gpufleet.domain.health import Fault, Health
from gpufleet.domain.rules import (
    Finding,
    HostSample,
    RulePolicy,
    Severity,
    evaluate_host,
    fleet_medians,
)
from gpufleet.domain.states import Event, HostState
from gpufleet.errors import GpufleetError
from gpufleet.service import webhooks
from gpufleet.service.fleet import Fleet, record_event
from gpufleet.service.inspect_store import (
    histories,
    roll_up_and_prune,
    store_samples,
)
from gpufleet.service.leases import call_hooks, lease_view
from gpufleet.service.lifecycle import transition
from gpufleet.service.pipeline import (
    Claimed,
    Pipeline,
    check_forks,
    check_timeout,
    claim_hosts,
    claim_lease,
    release_claims,
)
from gpufleet.service.policies import Policies
from gpufleet.store.tables import (
    Alarm,
    FactSnapshot,
    FleetAlarm,
    Host,
    HostSampleRow,
    InspectQuarantine,
    LeaseHost,
    Validation,
)

#: States a critical finding quarantines at once (a leased host keeps running its job).
QUARANTINES = frozenset(
    {HostState.ENROLLED, HostState.VALIDATING, HostState.AVAILABLE, HostState.RECLAIMING}
)
#: The fault recorded on the host for a rule (rules not listed record no fault kind).
RULE_FAULTS: dict[str, Fault] = {
    "ecc-uncorrectable": Fault.ECC_UNCORRECTABLE,
    "remap-failure": Fault.ROW_REMAP_FAILURE,
    "xid-79": Fault.GPU_LOST,
    "xid-64": Fault.FATAL_XID,
    "xid-fatal": Fault.FATAL_XID,
    "xid-nvlink": Fault.NVLINK_DOWN,
    "ib-link-downed": Fault.IB_DOWN,
    "pcie-link-degraded": Fault.PCIE_DEGRADED,
}
GUARD_KIND = "blast-radius"
ACTOR = "inspect"


def load_policy(fleet: Fleet) -> RulePolicy:
    """The shipped health rules with the site overlay (``GPUFLEET_HEALTH_RULES``)."""
    policy = RulePolicy.load_default()
    f = fleet.settings.health_rules_file
    return policy.merged(f.read_text(), source=str(f)) if f else policy


# ------------------------------------------------------------------------------ results


@dataclass
class HostInspection:
    """One host of a sweep: how the probe went, what the rules found, what was done."""

    host: str
    outcome: str
    reason: str = ""
    findings: list[Finding] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


@dataclass
class SweepReport:
    """One sweep: per host, hosts held by another worker, the guard."""

    at: datetime
    policy_version: str
    hosts: list[HostInspection]
    busy: list[str] = field(default_factory=list)
    guard_tripped: bool = False
    guard_message: str = ""

    @property
    def findings(self) -> int:
        return sum(len(h.findings) for h in self.hosts)


# ------------------------------------------------------------------------------ the sweep


class TransportCache:
    """Transports kept between sweeps of one ``inspect --every`` loop: an ``ssh`` transport
    that keeps each host's connection open (:class:`gpufleet.collect.inspect_ssh.KeptOpenSsh`);
    other kinds are opened fresh each sweep (a lab re-reads its hosts)."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self._ssh: Transport | None = None

    def __call__(self, key: TransportKey) -> Transport:
        from gpufleet.service.pipeline import transport_for_host

        if key[0] == "ssh":
            if self._ssh is None:
                from gpufleet.collect.inspect_ssh import KeptOpenSsh

                self._ssh = KeptOpenSsh(connect_timeout_s=self.fleet.settings.connect_timeout_s)
            return self._ssh
        return transport_for_host(key, self.fleet)

    def close(self) -> None:
        from gpufleet.collect.inspect_ssh import KeptOpenSsh

        if isinstance(self._ssh, KeptOpenSsh):
            self._ssh.shutdown()
        self._ssh = None


def inspect(
    fleet: Fleet,
    selector: str | None = None,
    *,
    transport: str | None = None,
    forks: int = 50,
    timeout_s: float = 30.0,
    transports: Callable[[TransportKey], Transport] | None = None,
    at: datetime | None = None,
    token: str | None = None,
    take_over: str | None = None,
) -> SweepReport:
    """Run one sweep over the selected hosts (every host but retired ones without one).
    ``at``: the samples' time (default now); a retried run chunk passes its first attempt's,
    so a host that attempt stored is not stored twice (:mod:`gpufleet.service.jobs`);
    ``token`` / ``take_over``: its claim token and its earlier attempts' prefix
    (:func:`gpufleet.service.pipeline.claim_hosts`)."""
    forks = check_forks(forks)
    timeout_s = check_timeout(timeout_s)
    policy = load_policy(fleet)
    xids = Policies(fleet).xid
    at = at or fleet.now()
    connect_s = fleet.settings.connect_timeout_s
    claim = claim_hosts(
        fleet,
        selector,
        transport,
        lambda n: claim_lease(n, forks, timeout_s, connect_s),
        token=token,
        take_over=take_over,
    )
    with fleet.db.session() as s:
        cursors = _cursors(s, [c.host_id for c in claim.hosts])
    script = probe_script(fleet.settings.path_list(fleet.settings.inspect_disk_paths))
    parsed: dict[int, ProbeResult] = {}
    by_id: dict[int, HostInspection] = {}

    def apply(c: Claimed, raw: RawResult) -> HostInspection:
        out = HostInspection(c.target.name, raw.outcome.value, raw.reason)
        if raw.outcome is Outcome.OK and raw.output is not None:
            try:
                res = parse_probe(
                    raw.output, at, kmsg_since=cursors.get(c.host_id), source=c.target.name
                )
            except GpufleetError as exc:
                out.outcome, out.reason = Outcome.BAD_OUTPUT.value, str(exc)
            else:
                parsed[c.host_id] = res
                out.problems = list(res.problems)
        by_id[c.host_id] = out
        return out

    results = Pipeline(
        fleet,
        claim,
        command=lambda c: script,
        apply=apply,
        forks=forks,
        timeout_s=timeout_s,
        open_transport=transports,
    ).run()
    with fleet.db.session() as s:
        linked = nvlink_hosts(s, list(parsed))
    for hid, res in parsed.items():  # topology from the collected facts, not the probe
        parsed[hid] = replace(res, sample=replace(res.sample, nvlink=hid in linked))
    try:
        kept = store_samples(fleet, at, parsed, token=claim.token)
    finally:
        release_claims(fleet, claim.token)
    for hid in set(parsed) - kept:
        by_id[hid].actions.append(
            "result discarded: the claim ran out (or a sample at this instant exists)"
        )
    report = SweepReport(at, policy.version, sorted(results, key=lambda h: h.host), claim.busy)
    judge(fleet, policy, xids, at, {hid: by_id[hid] for hid in kept}, report)
    return report


def nvlink_hosts(s: Session, host_ids: Sequence[int]) -> set[int]:
    """The hosts whose latest facts show at least one NVLink on a GPU (``nvlink -s``)."""
    if not host_ids:
        return set()
    rows = s.execute(
        select(Host.id, FactSnapshot.facts["nvlink"])
        .join(FactSnapshot, FactSnapshot.id == Host.latest_snapshot_id)
        .where(Host.id.in_(host_ids))
    )
    out: set[int] = set()
    for hid, nv in rows:
        if isinstance(nv, dict) and any(g.get("links") for g in nv.get("gpus") or []):
            out.add(hid)
    return out


def _cursors(s: Session, host_ids: Sequence[int]) -> dict[int, str]:
    """Each host's kernel-log cursor from its latest sample."""
    if not host_ids:
        return {}
    latest = (
        select(HostSampleRow.host_id, func.max(HostSampleRow.at).label("at"))
        .where(HostSampleRow.host_id.in_(host_ids))
        .group_by(HostSampleRow.host_id)
        .subquery()
    )
    rows = s.execute(
        select(HostSampleRow.host_id, HostSampleRow.kmsg_cursor).join(
            latest,
            (latest.c.host_id == HostSampleRow.host_id) & (latest.c.at == HostSampleRow.at),
        )
    )
    return {hid: cur for hid, cur in rows if cur}


# ------------------------------------------------------------------------------ judging


def judge(
    fleet: Fleet,
    policy: RulePolicy,
    xids: Any,
    at: datetime,
    hosts: dict[int, HostInspection],
    report: SweepReport,
) -> None:
    """Evaluate the policy on the sampled hosts and act (see the module doc)."""
    if not hosts:
        return
    since = at - max(policy.longest_window, timedelta(hours=1))
    with fleet.db.session() as s:
        hist = histories(s, list(hosts), since)
    medians = fleet_medians((h[-1] for h in hist.values() if h and h[-1].at == at), policy.rules)
    findings = {
        hid: evaluate_host(policy, h, medians, xids) if h and h[-1].at == at else []
        for hid, h in hist.items()
    }
    for hid, fs in findings.items():
        hosts[hid].findings = fs
    budget = _Budget(_guard_budget(fleet, at))
    held: list[str] = []
    quarantined: list[int] = []
    for hid in sorted(findings, key=lambda hid: hosts[hid].host):
        blind = _blind_rules(policy, hist[hid][-1], hist[hid][:-1])
        acted = _act(fleet, hid, findings[hid], hosts[hid], budget, at, blind)
        if acted == "held":
            held.append(hosts[hid].host)
        elif acted == "quarantined":
            quarantined.append(hid)
    if held:
        report.guard_tripped = True
        report.guard_message = _trip_guard(fleet, at, held)
    for hid in quarantined:  # after the alarms are committed: remediation does network I/O
        _first_rung(fleet, hosts[hid], findings[hid])


def _first_rung(fleet: Fleet, out: HostInspection, findings: list[Finding]) -> None:
    """Policy may run the first rung of the ladder automatically for named rules (the pool's
    ``auto_remediate``, ``service/remediation.auto_remediate``): the first critical finding
    whose rule the pool names runs it; a failed step is reported, never raised."""
    from gpufleet.service.remediation import auto_remediate

    for f in findings:
        if f.severity is not Severity.CRITICAL:
            continue
        try:
            done = auto_remediate(fleet, out.host, f.rule)
        except GpufleetError as exc:
            out.actions.append(f"automatic remediation for {f.rule} refused: {exc}")
            return
        if done is not None:
            verdict = "done" if done.ok else "failed"
            out.actions.append(f"automatic remediation for {f.rule}: {verdict}")
            return


def _blind_rules(policy: RulePolicy, latest: HostSample, before: list[HostSample]) -> set[str]:
    """Rules this sweep could not judge on the host (fail closed: their alarms do not clear
    on missing data): GPU rules when the GPU query failed, port rules when the ports the host
    had are not in this sample."""
    out: set[str] = set()
    if latest.gpus is None:
        out |= {r.id for r in policy.rules if r.scope == "gpu" or r.kind == "xid"}
    had_ports = any(smp.ports for smp in before)
    if had_ports and not latest.ports:
        out |= {r.id for r in policy.rules if r.scope == "port"}
    return out


@dataclass
class _Budget:
    """Automatic quarantines left to this sweep under the blast-radius guard."""

    left: int

    def take(self) -> bool:
        if self.left <= 0:
            return False
        self.left -= 1
        return True


def _guard_budget(fleet: Fleet, at: datetime) -> int:
    """How many more hosts may be quarantined automatically now."""
    st = fleet.settings
    with fleet.db.session() as s:
        fleet_size = (
            s.scalar(select(func.count()).select_from(Host).where(Host.state != HostState.RETIRED))
            or 0
        )
        recent = (
            s.scalar(
                select(func.count(func.distinct(InspectQuarantine.host_id))).where(
                    InspectQuarantine.at > at - timedelta(minutes=st.guard_window_minutes)
                )
            )
            or 0
        )
    # At least one host: a fleet of nine must still be able to lose its one broken host.
    limit = max(1, min(st.guard_hosts, math.floor(st.guard_share * fleet_size)))
    return max(0, limit - recent)


def _trip_guard(fleet: Fleet, at: datetime, held: list[str]) -> str:
    st = fleet.settings
    message = (
        f"blast-radius guard tripped: more than {st.guard_share:.0%} of the fleet or "
        f"{st.guard_hosts} hosts would be quarantined within {st.guard_window_minutes:g} min; "
        f"automatic quarantine stopped, held back: {', '.join(held) or 'none'}"
    )
    with fleet.db.session() as s:
        alarm = s.scalar(
            select(FleetAlarm).where(FleetAlarm.kind == GUARD_KIND, FleetAlarm.closed_at.is_(None))
        )
        if alarm is None:
            s.add(
                FleetAlarm(
                    kind=GUARD_KIND,
                    severity=AlarmSeverity.CRITICAL,
                    opened_at=at,
                    message=message,
                    data={"held": held},
                )
            )
        else:
            alarm.data = {"held": sorted(set(alarm.data.get("held", [])) | set(held))}
        record_event(s, fleet, EventKind.ALARM, message, data={"fleet": GUARD_KIND, "held": held})
        if alarm is None:
            note = {"kind": GUARD_KIND, "severity": "critical", "message": message, "held": held}
            webhooks.after_commit(s, fleet, "alarm-opened", None, note)
    return message


def _key(a: Alarm) -> tuple[str, int | None, str | None]:
    return a.data.get("rule", ""), a.data.get("gpu_index"), a.data.get("subject")


def _act(
    fleet: Fleet,
    host_id: int,
    findings: list[Finding],
    out: HostInspection,
    budget: _Budget,
    at: datetime,
    blind: frozenset[str] | set[str] = frozenset(),
) -> str:
    """Alarms and lifecycle for one host, in one transaction: ``quarantined``, ``held`` (by
    the guard) or ``""``."""
    result = ""
    with fleet.db.session() as s:
        host = s.scalar(select(Host).where(Host.id == host_id).with_for_update())
        if host is None:
            return result
        open_alarms = {
            _key(a): a
            for a in s.scalars(
                select(Alarm).where(
                    Alarm.host_id == host_id,
                    Alarm.kind == AlarmKind.HEALTH,
                    Alarm.closed_at.is_(None),
                )
            )
        }
        now_keys = {f.key for f in findings}
        critical = [f for f in findings if f.severity is Severity.CRITICAL]
        new_critical = [f for f in critical if f.key not in open_alarms]
        wants = bool(new_critical) and host.state in QUARANTINES
        held = wants and not budget.take()
        for f in findings:
            if f.severity is Severity.INFO:
                out.actions.append(f"noted: {f.message}")
                continue
            a = open_alarms.get(f.key)
            if a is not None:
                if a.data.get("cleared_at"):
                    a.data = {k: v for k, v in a.data.items() if k != "cleared_at"}
                continue
            sev = (
                AlarmSeverity.CRITICAL if f.severity is Severity.CRITICAL else AlarmSeverity.WARNING
            )
            data: dict[str, Any] = {
                "rule": f.rule,
                "severity": f.severity.value,
                "action": f.action.value,
                "gpu_index": f.gpu_index,
                "gpu_uuid": f.gpu_uuid,
                "subject": f.subject,
                "source": ACTOR,
            }
            if sev is AlarmSeverity.CRITICAL and held:
                sev = AlarmSeverity.WARNING
                data["held"] = "blast-radius guard"
            s.add(
                Alarm(
                    host_id=host_id,
                    kind=AlarmKind.HEALTH,
                    severity=sev,
                    opened_at=at,
                    message=f"{f.message} (recommended: {f.action.value})",
                    data=data,
                )
            )
            record_event(s, fleet, EventKind.ALARM, f.message, host=host, data=data, actor=ACTOR)
            out.actions.append(f"alarm {sev.value}: {f.message}")
            # queued after the commit; sent by the outbox's thread, never inside the sweep
            note = {"kind": AlarmKind.HEALTH.value, "severity": sev.value, "message": f.message}
            webhooks.after_commit(s, fleet, "alarm-opened", host.name, note | data)
        # Findings that cleared: warnings close, criticals wait for a passed validation.
        for k, a in open_alarms.items():
            if k in now_keys or k[0] in blind:
                continue  # still found, or not seen this sweep (never cleared on no data)
            cleared = a.data.get("cleared_at")
            if not cleared:
                a.data = {**a.data, "cleared_at": at.isoformat()}
                cleared = at.isoformat()
                out.actions.append(f"cleared: {a.message}")
            if a.severity is AlarmSeverity.WARNING or _validated_since(
                s, host_id, datetime.fromisoformat(cleared)
            ):
                a.closed_at = at
                a.reason = "finding cleared" + (
                    "" if a.severity is AlarmSeverity.WARNING else " and the host re-validated"
                )
                out.actions.append(f"closed: {a.message}")
                closed = {"kind": a.kind.value, "reason": a.reason, "message": a.message}
                webhooks.after_commit(s, fleet, "alarm-closed", host.name, closed | dict(a.data))
        if held:
            out.actions.append("quarantine held by the blast-radius guard")
            result = "held"
        elif new_critical and _quarantine(s, fleet, host, critical, out, at):
            result = "quarantined"
        if not critical:
            _heal(s, fleet, host, out)
    return result


def _validated_since(s: Session, host_id: int, since: datetime) -> bool:
    from gpufleet.domain.profiles import Decision

    return (
        s.scalar(
            select(func.count())
            .select_from(Validation)
            .where(
                Validation.host_id == host_id,
                Validation.at >= since,
                Validation.decision == Decision.AVAILABLE,
            )
        )
        or 0
    ) > 0


def _quarantine(
    s: Session, fleet: Fleet, host: Host, critical: list[Finding], out: HostInspection, at: datetime
) -> bool:
    reason = "; ".join(f.message for f in critical)
    views: list[Any] = []
    if host.state is HostState.ALLOCATED:
        for lh in s.scalars(
            select(LeaseHost).where(LeaseHost.host_id == host.id, LeaseHost.holding)
        ):
            view = lease_view(lh.lease)
            record_event(
                s,
                fleet,
                EventKind.LEASE_HOST_UNHEALTHY,
                f"lease {view.id} of {view.owner}: {host.name}: {reason}",
                host=host,
                data={
                    "lease": view.id,
                    "owner": view.owner,
                    "findings": [f.rule for f in critical],
                },
                actor=ACTOR,
            )
            out.actions.append(f"lease {view.id} owner {view.owner} notified (lease kept)")
            views.append(view)
        if views:
            # the lease hooks (webhooks) run after the commit, never inside the transaction
            def owners(_: Session) -> None:
                for v in views:
                    out.actions.extend(call_hooks(EventKind.LEASE_HOST_UNHEALTHY, v))

            sa_event.listen(s, "after_commit", owners, once=True)
        return False
    if host.state not in QUARANTINES:
        return False
    fault = next((RULE_FAULTS[f.rule] for f in critical if f.rule in RULE_FAULTS), None)
    transition(
        s,
        fleet,
        host,
        Event.HARDWARE_FAULT,
        f"inspection: {reason}",
        actor=ACTOR,
        data={"source": ACTOR, "rules": sorted({f.rule for f in critical})},
        health=Health.CRITICAL,
        fault=fault,
        fault_reason=reason,
    )
    s.add(InspectQuarantine(host_id=host.id, at=at, rule=critical[0].rule))
    out.actions.append(f"quarantined: {reason}")
    return True


def _heal(s: Session, fleet: Fleet, host: Host, out: HostInspection) -> None:
    """A host the inspection quarantined, whose health alarms have all cleared, goes back to
    validation (the blast-radius guard never blocks this)."""
    if host.state is not HostState.QUARANTINED:
        return
    mine = s.scalar(
        select(func.count())
        .select_from(InspectQuarantine)
        .where(InspectQuarantine.host_id == host.id, InspectQuarantine.at >= host.state_entered_at)
    )
    if not mine:
        return  # quarantined by someone else: only they (or an operator) let it out
    still = s.scalars(
        select(Alarm).where(
            Alarm.host_id == host.id, Alarm.kind == AlarmKind.HEALTH, Alarm.closed_at.is_(None)
        )
    ).all()
    if any(not a.data.get("cleared_at") for a in still):
        return
    transition(
        s,
        fleet,
        host,
        Event.UNQUARANTINE,
        "inspection: every finding cleared; validating again",
        actor=ACTOR,
        data={"source": ACTOR},
        health=Health.OK,
        fault=None,
        fault_reason=None,
    )
    out.actions.append("findings cleared: back to validating")


def inspect_loop(
    fleet: Fleet,
    selector: str | None,
    every: timedelta,
    stop: threading.Event,
    *,
    transport: str | None = None,
    forks: int = 50,
    timeout_s: float = 30.0,
    on_sweep: Callable[[SweepReport | None, str | None], None] | None = None,
) -> int:
    """Sweeps every ``every`` until ``stop`` is set (the sweep in progress finishes; SIGTERM
    during a sweep releases its claims, see the pipeline), keeping SSH connections open
    between sweeps (:class:`TransportCache`). A failed sweep (the database away) is reported
    and the loop goes on. Raw samples past the retention are rolled up after each sweep.
    Returns the number of sweeps."""
    check_timeout(every.total_seconds(), "--every")
    cache = TransportCache(fleet)
    sweeps = 0
    try:
        while not stop.is_set():
            started = time.monotonic()
            report: SweepReport | None = None
            error: str | None = None
            try:
                report = inspect(
                    fleet,
                    selector,
                    transport=transport,
                    forks=forks,
                    timeout_s=timeout_s,
                    transports=cache,
                )
                roll_up_and_prune(fleet)
            except GpufleetError as exc:
                error = str(exc)
            except SQLAlchemyError as exc:  # the database went away: try again next sweep
                error = f"database error ({type(exc).__name__}); the next sweep tries again"
            sweeps += 1
            if on_sweep is not None:
                on_sweep(report, error)
            stop.wait(max(0.0, every.total_seconds() - (time.monotonic() - started)))
    finally:
        cache.close()
    return sweeps


def fleet_alarms(fleet: Fleet, *, include_closed: bool = False) -> list[dict[str, Any]]:
    """Fleet alarms (the blast-radius guard), oldest first."""
    with fleet.db.session() as s:
        stmt = select(FleetAlarm).order_by(FleetAlarm.opened_at, FleetAlarm.id)
        if not include_closed:
            stmt = stmt.where(FleetAlarm.closed_at.is_(None))
        return [
            {
                "id": a.id,
                "kind": a.kind,
                "severity": a.severity.value,
                "opened_at": a.opened_at.isoformat(),
                "message": a.message,
                "closed_at": a.closed_at.isoformat() if a.closed_at else None,
                "data": dict(a.data),
            }
            for a in s.scalars(stmt)
        ]


def close_fleet_alarm(fleet: Fleet, alarm_id: int, reason: str) -> None:
    """Close a fleet alarm by hand (the operator looked at the guard)."""
    with fleet.db.session() as s:
        s.execute(
            update(FleetAlarm)
            .where(FleetAlarm.id == alarm_id, FleetAlarm.closed_at.is_(None))
            .values(closed_at=fleet.now(), reason=reason)
        )
        record_event(s, fleet, EventKind.ALARM_RESOLVED, f"fleet alarm {alarm_id}: {reason}")
