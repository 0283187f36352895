"""Rack incidents (issue 27 item 4): one incident for a rack, not one quarantine per tray.

A switch tray fault in an NVL72 rack shows on every compute tray of its NVLink domain. When
rack-scoped fabric findings (rules :data:`RACK_RULES`) come from ``GPUFLEET_RACK_INCIDENT_HOSTS``
or more hosts of one domain within ``GPUFLEET_RACK_INCIDENT_WINDOW`` seconds (this sweep's, and
the open alarms of those rules opened within the window before it), they become **one** rack
incident: one ``rack-incident`` alarm on the domain's first tray (the dedup key: one open per
host and kind), the folded hosts' own alarms of those rules closed, their findings not acted on
one by one. Every host of the domain is restricted (``hosts.nvl_restricted``: out of
NVLink-domain placement, still allocatable where a request does not need the domain). While
the incident is open, later rack findings of the domain join it. At
``GPUFLEET_RACK_DRAIN_SHARE`` of the rack's trays affected it recommends draining the rack
(maintenance of every tray: the command is in the alarm, an operator approves by running it).
The blast-radius guard counts an incident once (:func:`incidents_since`).
:func:`resolve_incident` closes it, lifts the restriction and re-validates its hosts.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from gpufleet.domain.events import AlarmKind, EventKind
from gpufleet.domain.rules import Finding
from gpufleet.errors import NotFound, UsageError
from gpufleet.service.core import webhooks
from gpufleet.service.core.fleet import Fleet, record_event
from gpufleet.service.hosts.rack_fold import (
    RACK_RULES,
    Incident,
    domain_hosts,
    fold_hosts,
    open_incident,
)
from gpufleet.service.hosts.validate import validate
from gpufleet.store.tables import Alarm, Host


def fold_findings(
    fleet: Fleet, at: datetime, findings: dict[int, list[Finding]]
) -> tuple[dict[int, list[Finding]], list[Incident]]:
    """Open or extend the rack incidents this sweep's findings make; returns the findings
    each host is still acted on for (rack rules of incident hosts removed) and the incidents.
    """
    rack_hosts = {h for h, fs in findings.items() if any(f.rule in RACK_RULES for f in fs)}
    folded, incidents = fold_hosts(fleet, at, dict.fromkeys(rack_hosts, at))
    kept = {
        hid: ([f for f in fs if f.rule not in RACK_RULES] if hid in folded else fs)
        for hid, fs in findings.items()
    }
    return kept, incidents


def incidents_since(s: Session, since: datetime) -> int:
    """Rack incidents opened since ``since`` (the guard counts each once)."""
    return s.scalar(select(func.count()).select_from(Alarm).where(
        Alarm.kind == AlarmKind.RACK_INCIDENT, Alarm.opened_at > since)) or 0


def open_incidents(fleet: Fleet) -> list[dict[str, Any]]:
    """The open rack incidents, oldest first."""
    with fleet.db.session() as s:
        rows = s.execute(
            select(Alarm, Host.name).join(Host, Host.id == Alarm.host_id)
            .where(Alarm.kind == AlarmKind.RACK_INCIDENT, Alarm.closed_at.is_(None))
            .order_by(Alarm.opened_at, Alarm.id)
        ).all()
        return [{"id": a.id, "host": name, "opened_at": a.opened_at.isoformat(),
                 "message": a.message, **a.data} for a, name in rows]


def resolve_incident(fleet: Fleet, name: str, reason: str) -> dict[str, Any]:
    """Close the open incident of the rack or domain ``name`` (rack id, domain or one of its
    hosts), lift its hosts' restriction and re-validate them (collect, checks, states)."""
    if not reason.strip():
        raise UsageError("resolving a rack incident needs a reason (--reason)")
    with fleet.db.session() as s:
        host = s.scalar(select(Host).where(
            (Host.name == name) | (Host.nvl_rack == name) | (Host.nvl_domain == name)).limit(1))
        if host is None or host.nvl_domain is None:
            raise NotFound(f"no NVLink domain for {name!r} (a rack id, domain or host)")
        members = domain_hosts(s, host.nvl_domain)
        incident = open_incident(s, members)
        if incident is None:
            raise NotFound(f"no open rack incident for {name!r}")
        incident.closed_at = fleet.now()
        incident.reason = f"resolved by {fleet.actor}: {reason}"
        s.execute(update(Host).where(Host.id.in_([h.id for h in members]))
                  .values(nvl_restricted=None).execution_options(synchronize_session=False))
        record_event(s, fleet, EventKind.ALARM_RESOLVED,
                     f"rack incident {incident.id} resolved: {reason}",
                     host=members[0], data={"alarm": incident.id, "reason": reason})
        webhooks.enqueue(s, fleet, "alarm-closed", members[0].name,
                         {"alarm": incident.id, "kind": AlarmKind.RACK_INCIDENT.value,
                          "reason": incident.reason})
        selector = ",".join(h.name for h in members)
        out = {"alarm": incident.id, "nvl_domain": host.nvl_domain, "hosts": [
            h.name for h in members]}
    report = validate(fleet, selector)
    out["validated"] = {v.host: v.state for v in report.verdicts}
    return out
