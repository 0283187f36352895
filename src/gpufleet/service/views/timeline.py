"""One host's history on one time axis (the dashboard's timeline): collections, changes,
validations and state moves, alarms, leases, remediation, failures.

The audit log (``events``) is the source, with the collection attempts (``collect_results``
with their run's start) and the recorded job failures beside it; each item gets the lane it
is drawn in. Newest first, bounded by ``limit`` per source.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import desc, select

from gpufleet.domain.events import EventKind
from gpufleet.service.allocation.leases import list_leases
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.views.hosts import list_events
from gpufleet.service.views.overview import list_failures
from gpufleet.store.repo import host_by_name
from gpufleet.store.tables import CollectionResult, CollectionRun

#: The lanes, top to bottom, as the timeline draws them.
LANES = ("collection", "change", "state", "alarm", "lease", "remediation", "failure")

_LANE_OF: dict[str, str] = {
    EventKind.ENROLLED: "change",
    EventKind.UPDATED: "change",
    EventKind.CHANGE_DETECTED: "change",
    EventKind.CHANGE_DECLARED: "change",
    EventKind.HOST_KEY_PINNED: "change",
    EventKind.HOST_KEY_REKEYED: "change",
    EventKind.BASELINE: "change",
    EventKind.POOL: "change",
    EventKind.TRANSITION: "state",
    EventKind.PREFLIGHT: "state",
    EventKind.EVIDENCE: "state",
    EventKind.ETA: "state",
    EventKind.ALARM: "alarm",
    EventKind.ALARM_ACKNOWLEDGED: "alarm",
    EventKind.ALARM_RESOLVED: "alarm",
    EventKind.BMC: "remediation",
    EventKind.K8S_SYNC: "remediation",
    EventKind.SLURM: "remediation",
}


#: Lifecycle events (``transition`` data ``event``) drawn in the lease lane.
_LEASE_MOVES = {"allocate", "release", "reclaim", "reclaimed", "reclaim_failed"}


def lane_of(kind: str, data: dict[str, object] | None = None) -> str:
    """The lane an event kind is drawn in (lease-* and allocate/release moves in lease,
    unknown kinds in state)."""
    if kind == EventKind.TRANSITION.value and str((data or {}).get("event")) in _LEASE_MOVES:
        return "lease"
    if kind.startswith("lease-"):
        return "lease"
    if kind.startswith("remediat") or kind == "reimage":
        return "remediation"
    return _LANE_OF.get(kind, "state")


@dataclass(frozen=True)
class TimelineItem:
    """One mark on the axis."""

    at: datetime
    lane: str
    kind: str
    text: str
    actor: str | None = None
    bad: bool = False  # drawn as a problem (failed collection, alarm raised, failure)


def host_timeline(fleet: Fleet, name: str, *, limit: int = 200) -> list[TimelineItem]:
    """The host's items, newest first; NotFound for an unknown host."""
    with fleet.db.session() as s:
        host = host_by_name(s, name)
        cols = s.execute(
            select(CollectionResult, CollectionRun.started_at)
            .join(CollectionRun, CollectionRun.id == CollectionResult.run_id)
            .where(CollectionResult.host_id == host.id)
            .order_by(desc(CollectionResult.id))
            .limit(limit)
        ).all()
        items = [
            TimelineItem(
                at=started,
                lane="collection",
                kind=f"collect {c.outcome.value}",
                text=c.reason or c.outcome.value,
                bad=c.outcome.value != "ok",
            )
            for c, started in cols
        ]
        host_name = host.name
    for e in list_events(fleet, host_name, limit=limit):
        kind = str(e["kind"])
        items.append(
            TimelineItem(
                at=e["at"],
                lane=lane_of(kind, e["data"] if isinstance(e["data"], dict) else None),
                kind=kind,
                text=str(e["message"]),
                actor=e["actor"],
                bad=kind == EventKind.ALARM.value
                or (kind == EventKind.TRANSITION.value and "-> quarantined" in str(e["message"])),
            )
        )
    for lv in list_leases(fleet, host_name, include_ended=True)[:limit]:
        items.append(
            TimelineItem(
                at=lv.starts_at,
                lane="lease",
                kind=f"lease {lv.state}",
                text=f"lease {lv.id} to {lv.owner} ({lv.purpose}) until "
                f"{lv.ends_at.strftime('%Y-%m-%d %H:%M UTC')}",
                actor=lv.actor,
            )
        )
    for f in list_failures(fleet, host=host_name, limit=limit):
        items.append(
            TimelineItem(
                at=f.at,
                lane="failure",
                kind=f"failure {f.category}",
                text=f"job {f.job}: {f.message}",
                actor=f.actor,
                bad=True,
            )
        )
    items.sort(key=lambda i: i.at, reverse=True)
    return items
