"""``gpufleet prune``: drop old fact snapshots, never evidence that something still cites.

A snapshot is kept when any of these holds: it is a host's latest; it is among a host's
``keep_last`` newest; it is newer than ``keep_days``; a validation was judged on it; a
``change-detected`` event names it. Collection results that pointed at a removed snapshot
keep their outcome and lose only the link. One transaction; an ``pruned`` event records it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import delete, select, update

from gpufleet.domain.events import EventKind
from gpufleet.errors import ConfigError
from gpufleet.service.core.fleet import Fleet, record_event
from gpufleet.store.tables import CollectionResult, Event, FactSnapshot, Host, Validation


@dataclass
class PruneReport:
    """What a prune removed (or would remove, with ``dry_run``)."""

    removed: int
    kept: int
    dry_run: bool


def prune(fleet: Fleet, *, keep_days: float, keep_last: int, dry_run: bool = False) -> PruneReport:
    """Remove fact snapshots older than ``keep_days`` beyond each host's ``keep_last`` newest,
    except those a validation or a change event points at, and each host's latest."""
    if not keep_days >= 0 or keep_days == float("inf"):
        raise ConfigError(f"--keep-days {keep_days}: use a finite number of days >= 0")
    if keep_last < 1:
        raise ConfigError(f"--keep-last {keep_last}: keep at least the newest snapshot (>= 1)")
    cutoff = fleet.now() - timedelta(days=keep_days)
    with fleet.db.session() as s:
        protected: set[int] = set()
        protected |= {i for i in s.scalars(select(Host.latest_snapshot_id)) if i is not None}
        protected |= {i for i in s.scalars(select(Validation.snapshot_id)) if i is not None}
        for data in s.scalars(select(Event.data).where(Event.kind == EventKind.CHANGE_DETECTED)):
            for key in ("snapshot", "previous_snapshot"):
                if isinstance(data.get(key), int):
                    protected.add(data[key])
        victims: list[int] = []
        total = 0
        per_host: dict[int, int] = {}
        rows = s.execute(
            select(FactSnapshot.id, FactSnapshot.host_id, FactSnapshot.collected_at).order_by(
                FactSnapshot.host_id, FactSnapshot.collected_at.desc(), FactSnapshot.id.desc()
            )
        )
        for sid, host_id, at in rows:
            total += 1
            rank = per_host[host_id] = per_host.get(host_id, 0) + 1
            if rank > keep_last and at < cutoff and sid not in protected:
                victims.append(sid)
        if victims and not dry_run:
            for i in range(0, len(victims), 500):
                chunk = victims[i : i + 500]
                s.execute(
                    update(CollectionResult)
                    .where(CollectionResult.snapshot_id.in_(chunk))
                    .values(snapshot_id=None)
                )
                s.execute(delete(FactSnapshot).where(FactSnapshot.id.in_(chunk)))
            record_event(
                s,
                fleet,
                EventKind.PRUNED,
                f"pruned {len(victims)} fact snapshot(s) older than {keep_days:g} days "
                f"(kept the newest {keep_last} per host and every cited one)",
                data={"removed": len(victims), "keep_days": keep_days, "keep_last": keep_last},
            )
    return PruneReport(removed=len(victims), kept=total - len(victims), dry_run=dry_run)
