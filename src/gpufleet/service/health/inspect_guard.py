"""The blast-radius guard of the inspection sweep (:mod:`gpufleet.service.health.inspect`).

When automatic quarantines within ``GPUFLEET_GUARD_WINDOW_MINUTES`` would exceed *both* the
share of the fleet (``GPUFLEET_GUARD_SHARE``, capped at ``GPUFLEET_GUARD_HOSTS``) *and* the
minimum count ``GPUFLEET_GUARD_MIN_HOSTS`` (issue 24 item 9: a small fleet still quarantines
a critical fault), automatic quarantine stops at that limit and one fleet alarm (kind
``blast-radius``) is raised. A host whose quarantine the guard holds keeps its critical alarm
(data ``held``): it stays out of placement and capacity (restricted), though not quarantined.
Manual actions are untouched.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select, update

from gpufleet.domain.events import AlarmSeverity, EventKind
from gpufleet.domain.states import HostState
from gpufleet.service.core import webhooks
from gpufleet.service.core.fleet import Fleet, record_event
from gpufleet.service.health.rack_incidents import incidents_since
from gpufleet.store.tables import FleetAlarm, Host, InspectQuarantine

GUARD_KIND = "blast-radius"


def guard_limit(fleet_size: int, share: float, most: int, min_hosts: int) -> int:
    """Automatic quarantines allowed within the window: the share of the fleet (capped at
    ``most``), but never fewer than ``min_hosts`` (nor than one host)."""
    return max(1, min_hosts, min(most, math.floor(share * fleet_size)))


@dataclass
class Budget:
    """Automatic quarantines left to this sweep under the blast-radius guard."""

    left: int

    def take(self) -> bool:
        if self.left <= 0:
            return False
        self.left -= 1
        return True


def guard_budget(fleet: Fleet, at: datetime) -> int:
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
        # issue 27: a rack incident counts once, however many trays it restricts
        recent += incidents_since(s, at - timedelta(minutes=st.guard_window_minutes))
    # Trips only past both the share and the minimum count (a small fleet still quarantines).
    limit = guard_limit(fleet_size, st.guard_share, st.guard_hosts, st.guard_min_hosts)
    return max(0, limit - recent)


def trip_guard(fleet: Fleet, at: datetime, held: list[str]) -> str:
    st = fleet.settings
    message = (
        f"blast-radius guard tripped: more than {st.guard_share:.0%} of the fleet (at most "
        f"{st.guard_hosts} hosts) and more than {st.guard_min_hosts} hosts would be quarantined "
        f"within {st.guard_window_minutes:g} min; "
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
            webhooks.enqueue(s, fleet, "alarm-opened", None, note)
    return message


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
