"""Acting on a sweep's findings (:mod:`gpufleet.service.health.inspect`): per host, in one short
row-locked transaction, one ``health`` alarm per rule and GPU/port (deduplicated), the
quarantine of a critical finding (through :func:`gpufleet.service.core.lifecycle.transition`), the
lease owner told about a leased host's current faults (after the commit), cleared findings
marked and closed, and a host the inspection quarantined sent back to validation once every
finding cleared. The blast-radius guard's budget is taken here (a held quarantine keeps its
critical alarm: restricted, out of placement)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpufleet.domain.device_health import DeviceFault
from gpufleet.domain.events import AlarmKind, AlarmSeverity, EventKind
from gpufleet.domain.health import Fault, Health
from gpufleet.domain.rules import Finding, Severity
from gpufleet.domain.states import Event, HostState
from gpufleet.service.allocation.leases import lease_view, queue_webhook
from gpufleet.service.core import webhooks
from gpufleet.service.core.alarms import open_alarm
from gpufleet.service.core.fleet import Fleet, record_event
from gpufleet.service.core.lifecycle import transition
from gpufleet.service.health.inspect_guard import Budget
from gpufleet.service.health.inspect_observe import OBSERVE_FAULTS
from gpufleet.store.tables import Alarm, Host, InspectQuarantine, LeaseHost, Validation

ACTOR = "inspect"
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
    **OBSERVE_FAULTS,
    # the vendor plugins' device rules (domain/device_health.py)
    "accelerator-unhealthy": Fault.ACCELERATOR_ALARM,
    "accelerator-link-down": Fault.IB_DOWN,
}


@dataclass
class HostInspection:
    """One host of a sweep: how the probe went, what the rules found, what was done."""

    host: str
    outcome: str
    reason: str = ""
    findings: list[Finding] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    #: what the vendor plugins' parts of the probe say is wrong (device rules judge them)
    faults: list[DeviceFault] = field(default_factory=list)


def _key(a: Alarm) -> tuple[str, int | None, str | None]:
    return a.data.get("rule", ""), a.data.get("gpu_index"), a.data.get("subject")


def _same(key: tuple[str, int | None, str | None]) -> Callable[[Alarm], bool]:
    """A health alarm is the same finding when its rule, GPU and subject are."""
    return lambda a: _key(a) == key


def act(
    fleet: Fleet,
    host_id: int,
    findings: list[Finding],
    out: HostInspection,
    budget: Budget,
    at: datetime,
    blind: frozenset[str] | set[str] = frozenset(),
    boot: str | None = None,
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
                "boot_id": boot,
                **(f.data or {}),  # a vendor's fault codes with their cause and suggestion
            }
            if sev is AlarmSeverity.CRITICAL and held:
                # restricted: the critical alarm keeps the host out of placement and capacity
                data["held"] = "blast-radius guard"
            # the webhook is queued in this transaction; the outbox's thread sends it
            open_alarm(
                s, fleet, host, AlarmKind.HEALTH, sev,
                f"{f.message} (recommended: {f.action.value})", data,
                same=_same(f.key), notice=f.message, at=at,
            )
            record_event(s, fleet, EventKind.ALARM, f.message, host=host, data=data, actor=ACTOR)
            out.actions.append(f"alarm {sev.value}: {f.message}")
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
                webhooks.enqueue(s, fleet, "alarm-closed", host.name, closed | dict(a.data))
        if held:
            out.actions.append("quarantine held by the blast-radius guard")
            result = "held"
        elif new_critical and _quarantine(s, fleet, host, critical, out, at, boot):
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
    s: Session,
    fleet: Fleet,
    host: Host,
    critical: list[Finding],
    out: HostInspection,
    at: datetime,
    boot: str | None = None,
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
                    "boot_id": boot,
                },
                actor=ACTOR,
            )
            out.actions.append(f"lease {view.id} owner {view.owner} notified (lease kept)")
            views.append(view)
            queue_webhook(s, fleet, EventKind.LEASE_HOST_UNHEALTHY, view)  # in the outbox
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
        data={"source": ACTOR, "rules": sorted({f.rule for f in critical}), "boot_id": boot},
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
