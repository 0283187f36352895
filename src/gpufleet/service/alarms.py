"""Alarms: what an operator must look at on a host (a changed SSH host key, a duplicate
machine). Each is a row of the ``alarms`` table, open until closed; raising one also appends
an ``alarm`` event to the audit log. All inside the caller's transaction."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.domain.events import AlarmKind, AlarmSeverity, EventKind
from gpufleet.service.fleet import Fleet, record_event
from gpufleet.store.tables import Alarm, Host


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
    per host and kind) and record the ``alarm`` event either way."""
    record_event(s, fleet, EventKind.ALARM, message, host=host, data=data)
    alarm = s.scalar(
        select(Alarm).where(Alarm.host_id == host.id, Alarm.kind == kind, Alarm.closed_at.is_(None))
    )
    if alarm is None:
        alarm = Alarm(
            host_id=host.id,
            kind=kind,
            severity=severity,
            opened_at=fleet.now(),
            message=message,
            data=data or {},
        )
        s.add(alarm)
    return alarm


def close_alarms(s: Session, fleet: Fleet, host: Host, kind: AlarmKind, reason: str) -> int:
    """Close the host's open alarms of ``kind`` with ``reason``; how many were open."""
    n = 0
    for alarm in s.scalars(
        select(Alarm).where(Alarm.host_id == host.id, Alarm.kind == kind, Alarm.closed_at.is_(None))
    ):
        alarm.closed_at = fleet.now()
        alarm.reason = reason
        n += 1
    return n


@dataclass
class AlarmView:
    """An alarm for ``hosts show`` and the summary."""

    host: str
    kind: str
    severity: str
    opened_at: datetime
    message: str
    acknowledged_by: str | None = None
    closed_at: datetime | None = None
    reason: str | None = None


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
