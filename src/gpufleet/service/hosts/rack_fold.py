"""Rack incidents' core (issue 27 item 4), in the hosts context so that validation feeds
them as the inspection does: findings from ``GPUFLEET_RACK_INCIDENT_HOSTS`` or more hosts of
one NVLink domain within ``GPUFLEET_RACK_INCIDENT_WINDOW`` seconds become **one** rack
incident (one ``rack-incident`` alarm on the domain's first tray; its hosts restricted, out of
NVLink-domain placement, never quarantined for it). :func:`fold_hosts` is the grouping both
use; :func:`fold_validations` reads validation's ``nvl_fabric`` failures. The inspection's
side, the guard's count and resolving are in :mod:`gpufleet.service.health.rack_incidents`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from gpufleet.domain.events import AlarmKind, AlarmSeverity, EventKind
from gpufleet.domain.health import Fault
from gpufleet.domain.racks import manifest_for
from gpufleet.service.core.alarms import raise_alarm
from gpufleet.service.core.fleet import Fleet, record_event
from gpufleet.service.hosts.racks import manifests
from gpufleet.store.tables import Alarm, FactSnapshot, Host, Validation

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


def domain_hosts(s: Session, domain: str) -> list[Host]:
    return list(s.scalars(select(Host).where(Host.nvl_domain == domain).order_by(Host.name)))


def open_incident(s: Session, members: list[Host]) -> Alarm | None:
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


def record_incident(
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


def fold_hosts(
    fleet: Fleet, at: datetime, found: Mapping[int, datetime]
) -> tuple[set[int], list[Incident]]:
    """Open or extend the rack incidents of hosts with a rack-scoped fabric finding (host id
    -> when it was found): with the open inspection alarms of :data:`RACK_RULES` opened within
    the window, ``GPUFLEET_RACK_INCIDENT_HOSTS`` or more hosts of one NVLink domain within
    ``GPUFLEET_RACK_INCIDENT_WINDOW`` seconds (or any while the domain's incident is open) make
    or join its incident. Returns the hosts folded into an incident and the incidents."""
    st = fleet.settings
    window = timedelta(seconds=st.rack_incident_window_s)
    folded: set[int] = set()
    incidents: list[Incident] = []
    if not found:
        return folded, incidents
    with fleet.db.session() as s:
        domains: dict[str, dict[int, datetime]] = {}
        for hid, domain in s.execute(
            select(Host.id, Host.nvl_domain).where(Host.id.in_(sorted(found)),
                                                   Host.nvl_domain.is_not(None))
        ):
            if domain:
                domains.setdefault(domain, {})[hid] = found[hid]
        for domain, times in sorted(domains.items()):
            members = domain_hosts(s, domain)
            ids = [h.id for h in members]
            earlier = {
                a.host_id: a for a in s.scalars(select(Alarm).where(
                    Alarm.host_id.in_(ids), Alarm.kind == AlarmKind.HEALTH,
                    Alarm.closed_at.is_(None), Alarm.opened_at >= at - window))
                if a.data.get("rule") in RACK_RULES
            }
            for hid, a in earlier.items():
                times.setdefault(hid, a.opened_at)
            incident = open_incident(s, members)
            group = set(times) if incident is not None else _window_hosts(times, window)
            if incident is None and len(group) < st.rack_incident_hosts:
                continue
            inc = record_incident(s, fleet, at, domain, members, group, incident)
            for a in earlier.values():
                if a.host_id in group:
                    a.closed_at = at
                    a.reason = f"part of rack incident (alarm {inc.alarm_id})"
            folded |= group & set(found)
            incidents.append(inc)
    return folded, incidents


#: What a validation's ``nvl_fabric`` result says when it is a rack-scoped finding: it
#: failed (or the fabric never registered) with one of these faults (issue 27).
_FABRIC_FAULTS = frozenset({Fault.NVL_FABRIC_RACK.value, Fault.NVL_FABRIC_FAILED.value})


def _fabric_failed(results: list[dict[str, Any]]) -> bool:
    return any(
        r.get("name") == "nvl_fabric" and r.get("status") == "fail"
        and r.get("fault") in _FABRIC_FAULTS
        and (r.get("evidence") or {}).get("outcome") in ("fails", "pending")
        for r in results
    )


def fold_validations(fleet: Fleet, at: datetime, host_ids: Sequence[int]) -> dict[int, int]:
    """Issue 27: validation's fabric failures feed the rack incidents as the inspection's
    findings do. The hosts of ``host_ids`` whose latest validation (within the window before
    ``at``) failed ``nvl_fabric`` with a rack-scoped fault or an unregistered fabric, with the
    other hosts of their NVLink domains whose latest validation in the window did, are folded
    (:func:`fold_hosts`). Returns host id -> the incident's alarm id."""
    window = timedelta(seconds=fleet.settings.rack_incident_window_s)
    with fleet.db.session() as s:
        domains = set(s.scalars(select(Host.nvl_domain).where(
            Host.id.in_(list(host_ids)), Host.nvl_domain.is_not(None))))
        if not domains:
            return {}
        latest: dict[int, Validation] = {}
        for v in s.scalars(
            select(Validation).join(Host, Host.id == Validation.host_id)
            .where(Host.nvl_domain.in_(sorted(d for d in domains if d)),
                   Validation.at >= at - window)
            .order_by(Validation.at.desc(), Validation.id.desc())
        ):
            latest.setdefault(v.host_id, v)
        found = {hid: v.at for hid, v in latest.items() if _fabric_failed(v.results)}
    if not any(h in found for h in host_ids):
        return {}
    folded, incidents = fold_hosts(fleet, at, found)
    by_domain = {inc.nvl_domain: inc.alarm_id for inc in incidents}
    with fleet.db.session() as s:
        return {hid: by_domain[d] for hid, d in s.execute(
            select(Host.id, Host.nvl_domain).where(Host.id.in_(sorted(folded))))
            if d in by_domain}
