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

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from gpufleet.domain.events import AlarmKind, AlarmSeverity, EventKind
from gpufleet.domain.racks import manifest_for
from gpufleet.domain.rules import Finding
from gpufleet.errors import NotFound, UsageError
from gpufleet.service.core import webhooks
from gpufleet.service.core.alarms import raise_alarm
from gpufleet.service.core.fleet import Fleet, record_event
from gpufleet.service.hosts.racks import manifests
from gpufleet.service.hosts.validate import validate
from gpufleet.store.tables import Alarm, FactSnapshot, Host

#: The health rules whose findings concern the whole NVLink domain.
RACK_RULES = frozenset({"nvl-fabric-rack", "nvl-fabric-failed"})
ACTOR = "rack-incidents"


@dataclass
class Incident:
    """One rack incident as a sweep reports it."""

    alarm_id: int
    nvl_domain: str
    rack: str | None
    hosts: list[str]
    trays: int
    drain: bool
    new: bool


def _domain_hosts(s: Session, domain: str) -> list[Host]:
    return list(s.scalars(select(Host).where(Host.nvl_domain == domain).order_by(Host.name)))


def _open_incident(s: Session, members: list[Host]) -> Alarm | None:
    ids = [h.id for h in members]
    return s.scalar(
        select(Alarm)
        .where(Alarm.host_id.in_(ids), Alarm.kind == AlarmKind.RACK_INCIDENT,
               Alarm.closed_at.is_(None))
        .order_by(Alarm.id)
        .limit(1)
    )


def _window_hosts(times: Mapping[int, datetime], window: timedelta) -> set[int]:
    """The largest set of hosts whose finding times fit in one ``window``."""
    ordered = sorted(times.items(), key=lambda kv: kv[1])
    best: set[int] = set()
    for i, (_, t0) in enumerate(ordered):
        group = {h for h, t in ordered[i:] if t - t0 <= window}
        if len(group) > len(best):
            best = group
    return best


def fold_findings(
    fleet: Fleet, at: datetime, findings: dict[int, list[Finding]]
) -> tuple[dict[int, list[Finding]], list[Incident]]:
    """Open or extend the rack incidents this sweep's findings make; returns the findings
    each host is still acted on for (rack rules of incident hosts removed) and the incidents.
    """
    st = fleet.settings
    window = timedelta(seconds=st.rack_incident_window_s)
    rack_hosts = {h for h, fs in findings.items() if any(f.rule in RACK_RULES for f in fs)}
    if not rack_hosts:
        return findings, []
    folded: set[int] = set()
    incidents: list[Incident] = []
    with fleet.db.session() as s:
        domains: dict[str, dict[int, datetime]] = {}
        for hid, domain in s.execute(
            select(Host.id, Host.nvl_domain).where(Host.id.in_(sorted(rack_hosts)),
                                                   Host.nvl_domain.is_not(None))
        ):
            if domain:
                domains.setdefault(domain, {})[hid] = at
        for domain, times in sorted(domains.items()):
            members = _domain_hosts(s, domain)
            ids = [h.id for h in members]
            earlier = {
                a.host_id: a for a in s.scalars(select(Alarm).where(
                    Alarm.host_id.in_(ids), Alarm.kind == AlarmKind.HEALTH,
                    Alarm.closed_at.is_(None), Alarm.opened_at >= at - window))
                if a.data.get("rule") in RACK_RULES
            }
            for hid, a in earlier.items():
                times.setdefault(hid, a.opened_at)
            incident = _open_incident(s, members)
            group = set(times) if incident is not None else _window_hosts(times, window)
            if incident is None and len(group) < st.rack_incident_hosts:
                continue
            inc = _record(s, fleet, at, domain, members, group, incident)
            for a in earlier.values():
                if a.host_id in group:
                    a.closed_at = at
                    a.reason = f"part of rack incident (alarm {inc.alarm_id})"
            folded |= group & set(findings)
            incidents.append(inc)
    kept = {
        hid: ([f for f in fs if f.rule not in RACK_RULES] if hid in folded else fs)
        for hid, fs in findings.items()
    }
    return kept, incidents


def _record(
    s: Session, fleet: Fleet, at: datetime, domain: str, members: list[Host], group: set[int],
    incident: Alarm | None,
) -> Incident:
    names = {h.id: h.name for h in members}
    before = set(incident.data.get("hosts", [])) if incident is not None else set()
    affected = sorted(before | {names[h] for h in group if h in names})
    rack = next((h.nvl_rack for h in members if h.nvl_rack), None)
    models = s.scalars(select(FactSnapshot.gpu_model).where(
        FactSnapshot.id.in_([h.latest_snapshot_id for h in members if h.latest_snapshot_id])))
    manifest = manifest_for(list(models), manifests(fleet))
    trays = max(len(members), manifest.trays if manifest else 0)
    drain = len(affected) >= fleet.settings.rack_drain_share * trays
    selector = ",".join(h.name for h in members)
    message = (
        f"rack incident: NVLink domain {domain} (rack {rack or '?'}): rack-scoped fabric "
        f"findings on {len(affected)} of {trays} trays ({', '.join(affected)}); its hosts are "
        "restricted (out of NVLink-domain placement)"
        + ("; recommended: drain the rack (maintenance of every tray, approve by running "
           "the command in the alarm's data)" if drain else "")
    )
    data: dict[str, Any] = {
        "nvl_domain": domain, "rack": rack, "hosts": affected, "trays": trays,
        "drain_recommended": drain,
        "drain_command": f"gpufleet maintenance on '{selector}' --reason 'rack incident'"
        if drain else None,
    }
    anchor = members[0]
    if incident is None:
        incident = raise_alarm(s, fleet, anchor, AlarmKind.RACK_INCIDENT,
                               AlarmSeverity.CRITICAL, message, data)
        s.flush()
        new = True
    else:
        new = False
        was = incident.data
        if was.get("hosts") != affected or was.get("drain_recommended") != drain:
            incident.message, incident.data = message, data
            record_event(s, fleet, EventKind.ALARM, message, data=data, actor=ACTOR)
    why = f"rack incident (alarm {incident.id})"
    s.execute(
        update(Host).where(Host.id.in_([h.id for h in members]), Host.nvl_restricted.is_(None))
        .values(nvl_restricted=why).execution_options(synchronize_session=False)
    )
    return Incident(incident.id, domain, rack, affected, trays, drain, new)


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
        members = _domain_hosts(s, host.nvl_domain)
        incident = _open_incident(s, members)
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
