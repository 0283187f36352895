"""Alarms: what an operator must look at on a host (a changed SSH host key, a duplicate
machine). Each is a row of the ``alarms`` table, open until closed; raising one also appends
an ``alarm`` event to the audit log. All inside the caller's transaction."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.domain.events import AlarmKind, AlarmSeverity, EventKind
from gpufleet.errors import NotFound, UsageError
from gpufleet.service.core.fastread import AlarmView as AlarmView
from gpufleet.service.core.fleet import Fleet, record_event
from gpufleet.service.core.select import is_explicit, nothing_matches, select_hosts
from gpufleet.store.tables import Alarm, Host


def open_alarm(
    s: Session,
    fleet: Fleet,
    host: Host,
    kind: AlarmKind,
    severity: AlarmSeverity,
    message: str,
    data: dict[str, Any] | None = None,
    *,
    same: Callable[[Alarm], bool] | None = None,
    notice: str | None = None,
    at: datetime | None = None,
) -> tuple[Alarm, bool]:
    """The only writer of alarm rows: open an alarm of ``kind`` on ``host`` unless the same one
    is still open; returns the alarm and whether it is new. "The same" is the kind itself (one
    open alarm per host and kind) unless ``same`` tells a finer identity (a health finding's
    rule, GPU and subject, read from the open alarm's data). A new alarm queues its
    ``alarm-opened`` webhook in ``s`` (``notice``: the message it carries, default
    ``message``). Records no event: the caller words it."""
    open_rows = s.scalars(
        select(Alarm).where(Alarm.host_id == host.id, Alarm.kind == kind, Alarm.closed_at.is_(None))
    ).all()
    for alarm in open_rows:
        if same is None or same(alarm):
            return alarm, False
    alarm = Alarm(
        host_id=host.id,
        kind=kind,
        severity=severity,
        opened_at=at or fleet.now(),
        message=message,
        data=data or {},
    )
    s.add(alarm)
    note = {"kind": kind.value, "severity": severity.value, "message": notice or message}
    from gpufleet.service.core import webhooks  # here: the reads need none of it

    webhooks.enqueue(s, fleet, "alarm-opened", host.name, note | (data or {}))
    return alarm, True


def raise_alarm(
    s: Session,
    fleet: Fleet,
    host: Host,
    kind: AlarmKind,
    severity: AlarmSeverity,
    message: str,
    data: dict[str, Any] | None = None,
) -> Alarm:
    """Open an alarm of ``kind`` on ``host`` (or return the one still open: one open alarm
    per host and kind, :func:`open_alarm`) and record the ``alarm`` event either way."""
    record_event(s, fleet, EventKind.ALARM, message, host=host, data=data)
    return open_alarm(s, fleet, host, kind, severity, message, data)[0]


def close_alarms(s: Session, fleet: Fleet, host: Host, kind: AlarmKind, reason: str) -> int:
    """Close the host's open alarms of ``kind`` with ``reason``; how many were open."""
    n = 0
    for alarm in s.scalars(
        select(Alarm).where(Alarm.host_id == host.id, Alarm.kind == kind, Alarm.closed_at.is_(None))
    ):
        alarm.closed_at = fleet.now()
        alarm.reason = reason
        n += 1
        closed = {"kind": kind.value, "reason": reason, "message": alarm.message}
        from gpufleet.service.core import webhooks  # here: the reads need none of it

        webhooks.enqueue(s, fleet, "alarm-closed", host.name, closed)
    return n


def close_cleared(s: Session, fleet: Fleet, host: Host) -> int:
    """The host has just passed validation: close its open ``health`` alarms whose finding has
    cleared (``data.cleared_at``, set by the inspection sweep that no longer saw it). A
    critical alarm waits for exactly this (issue 10); closing it here rather than at the next
    sweep keeps an ``available`` host from sitting out of placement for one more interval."""
    n = 0
    for alarm in s.scalars(
        select(Alarm).where(
            Alarm.host_id == host.id, Alarm.kind == AlarmKind.HEALTH, Alarm.closed_at.is_(None)
        )
    ):
        if not (alarm.data or {}).get("cleared_at"):
            continue  # still found: validation never closes a current finding
        alarm.closed_at = fleet.now()
        alarm.reason = "finding cleared and the host re-validated"
        n += 1
        closed = {"kind": alarm.kind.value, "reason": alarm.reason, "message": alarm.message}
        from gpufleet.service.core import webhooks

        webhooks.enqueue(s, fleet, "alarm-closed", host.name, closed | dict(alarm.data))
    return n


def open_alarms(s: Session, host_ids: list[int] | None = None) -> list[AlarmView]:
    """Open alarms (of ``host_ids``, or every host), oldest first."""
    stmt = (
        select(Alarm, Host.name)
        .join(Host, Host.id == Alarm.host_id)
        .where(Alarm.closed_at.is_(None))
        .order_by(Alarm.opened_at, Alarm.id)
    )
    if host_ids is not None:
        stmt = stmt.where(Alarm.host_id.in_(host_ids))
    return [
        AlarmView(
            host=name,
            kind=a.kind.value,
            severity=a.severity.value,
            opened_at=a.opened_at,
            message=a.message,
            acknowledged_by=a.acknowledged_by,
        )
        for a, name in s.execute(stmt)
    ]


# ------------------------------------------------------------ operators: list / ack / resolve


@dataclass
class AlarmRecord:
    """One alarm as ``gpufleet alarms list/show`` print it."""

    id: int
    host: str
    kind: str
    severity: str
    opened_at: datetime
    message: str
    acknowledged_at: datetime | None
    acknowledged_by: str | None
    closed_at: datetime | None
    reason: str | None
    data: dict[str, Any]


def _record(a: Alarm, host: str) -> AlarmRecord:
    return AlarmRecord(
        id=a.id,
        host=host,
        kind=a.kind.value,
        severity=a.severity.value,
        opened_at=a.opened_at,
        message=a.message,
        acknowledged_at=a.acknowledged_at,
        acknowledged_by=a.acknowledged_by,
        closed_at=a.closed_at,
        reason=a.reason,
        data=dict(a.data or {}),
    )


def list_alarms(
    fleet: Fleet, selector: str | None = None, *, include_closed: bool = False
) -> list[AlarmRecord]:
    """Alarms of the hosts ``selector`` matches (every host without one), open ones only
    unless ``include_closed``; oldest first. A selector that matches no host is NotFound."""
    with fleet.db.session() as s:
        hosts = {h.id: h.name for h in s.scalars(select_hosts(selector))}
        if is_explicit(selector) and not hosts:
            raise nothing_matches(selector, s)
        stmt = select(Alarm).where(Alarm.host_id.in_(hosts)).order_by(Alarm.opened_at, Alarm.id)
        if not include_closed:
            stmt = stmt.where(Alarm.closed_at.is_(None))
        return [_record(a, hosts[a.host_id]) for a in s.scalars(stmt)]


def _alarm(s: Session, alarm_id: int, *, for_update: bool = False) -> tuple[Alarm, Host]:
    stmt = select(Alarm, Host).join(Host, Host.id == Alarm.host_id).where(Alarm.id == alarm_id)
    row = s.execute(stmt.with_for_update(of=Alarm) if for_update else stmt).first()
    if row is None:
        raise NotFound(what="alarm", name=str(alarm_id))
    return row[0], row[1]


def show_alarm(fleet: Fleet, alarm_id: int) -> AlarmRecord:
    """One alarm by id (NotFound when there is none)."""
    with fleet.db.session() as s:
        alarm, host = _alarm(s, alarm_id)
        return _record(alarm, host.name)


def ack_alarm(fleet: Fleet, alarm_id: int, reason: str | None = None) -> AlarmRecord:
    """Acknowledge an open alarm (seen, being handled: it stays open) and record an
    ``alarm-acknowledged`` event. Acknowledging it again is refused (UsageError), as is a
    closed alarm."""
    with fleet.db.session() as s:
        alarm, host = _alarm(s, alarm_id, for_update=True)
        if alarm.closed_at is not None:
            raise UsageError(f"alarm {alarm_id} is closed ({alarm.reason or 'no reason'})")
        if alarm.acknowledged_at is not None:
            raise UsageError(
                f"alarm {alarm_id} was already acknowledged by {alarm.acknowledged_by}"
            )
        alarm.acknowledged_at = fleet.now()
        alarm.acknowledged_by = fleet.actor
        note = f": {reason}" if reason else ""
        record_event(
            s,
            fleet,
            EventKind.ALARM_ACKNOWLEDGED,
            f"alarm {alarm_id} ({alarm.kind.value}) acknowledged{note}",
            host=host,
            data={"alarm": alarm_id, "kind": alarm.kind.value, "reason": reason},
        )
        s.flush()
        return _record(alarm, host.name)


def resolve_alarm(fleet: Fleet, alarm_id: int, reason: str) -> AlarmRecord:
    """Close an alarm by hand: an audited admin act that needs a reason; records an
    ``alarm-resolved`` event. The host's state is not touched (a quarantined host still
    leaves quarantine only through ``unquarantine`` and validation)."""
    if not reason.strip():
        raise UsageError("resolving an alarm by hand needs a reason (--reason)")
    with fleet.db.session() as s:
        alarm, host = _alarm(s, alarm_id, for_update=True)
        if alarm.closed_at is not None:
            raise UsageError(f"alarm {alarm_id} is already closed ({alarm.reason or 'no reason'})")
        alarm.closed_at = fleet.now()
        alarm.reason = f"resolved by {fleet.actor}: {reason}"
        record_event(
            s,
            fleet,
            EventKind.ALARM_RESOLVED,
            f"alarm {alarm_id} ({alarm.kind.value}) resolved by hand: {reason}",
            host=host,
            data={"alarm": alarm_id, "kind": alarm.kind.value, "reason": reason},
        )
        closed = {"alarm": alarm_id, "kind": alarm.kind.value, "reason": alarm.reason}
        from gpufleet.service.core import webhooks  # here: the reads need none of it

        webhooks.enqueue(s, fleet, "alarm-closed", host.name, closed)
        s.flush()
        return _record(alarm, host.name)
