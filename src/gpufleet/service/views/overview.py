"""Fleet-wide reads for the API and the Prometheus exporter: job failures, and the
metrics aggregate (a few GROUP BY queries per scrape, never one query per host)."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Text, desc, func, select

from gpufleet.domain.events import AlarmSeverity
from gpufleet.domain.leases import LeaseState
from gpufleet.domain.states import HostState
from gpufleet.service.core.fleet import Fleet
from gpufleet.store.repo import host_by_name
from gpufleet.store.tables import Alarm, FactSnapshot, FailureRow, Host, Lease


@dataclass
class FailureView:
    """One recorded job failure."""

    job: str
    host: str
    gpu: str | None
    at: datetime
    category: str
    rule: str | None
    message: str
    source: str
    actor: str


def list_failures(
    fleet: Fleet,
    *,
    host: str | None = None,
    since: datetime | None = None,
    limit: int = 500,
) -> list[FailureView]:
    """Recorded job failures, newest first, of one host and/or at or after ``since``."""
    stmt = (
        select(FailureRow, Host.name)
        .join(Host, Host.id == FailureRow.host_id)
        .order_by(desc(FailureRow.at), desc(FailureRow.id))
        .limit(limit)
    )
    if since is not None:
        stmt = stmt.where(FailureRow.at >= since)
    with fleet.db.session() as s:
        if host is not None:
            stmt = stmt.where(FailureRow.host_id == host_by_name(s, host).id)
        return [
            FailureView(
                f.job_id, name, f.gpu, f.at, f.category, f.rule, f.message, f.source, f.actor
            )
            for f, name in s.execute(stmt)
        ]


# --- metrics ----------------------------------------------------------------------------------


@dataclass
class FleetMetrics:
    """What ``/metrics`` exposes, read in one pass over a few aggregates."""

    at: datetime
    #: (state, pool or "") -> hosts
    hosts: Counter[tuple[str, str]] = field(default_factory=Counter)
    #: (model or "unknown", state) -> GPUs
    gpus: Counter[tuple[str, str]] = field(default_factory=Counter)
    #: (model or "unknown", profile) -> GPUs on available hosts validated for the profile
    validated_gpus: Counter[tuple[str, str]] = field(default_factory=Counter)
    #: (severity, kind) -> open alarms
    alarms: Counter[tuple[str, str]] = field(default_factory=Counter)
    #: lease state -> leases
    leases: Counter[str] = field(default_factory=Counter)
    #: active leases that end within ``expiring_within``
    leases_expiring: int = 0
    expiring_within: timedelta = timedelta(hours=24)
    #: hosts (not retired) never collected
    never_collected: int = 0
    #: seconds since the oldest last collection of a host that is not retired (None: none)
    oldest_collection_age_s: float | None = None
    #: seconds since the newest collection of any host (None: none)
    newest_collection_age_s: float | None = None


def _profiles(text: Any) -> list[str]:
    """The profiles list as grouped by its JSON text (PostgreSQL JSONB or SQLite TEXT)."""
    if text is None:
        return []
    value = json.loads(text) if isinstance(text, str) else text
    return [str(p) for p in value] if isinstance(value, list) else []


def fleet_metrics(fleet: Fleet, expiring_within: timedelta = timedelta(hours=24)) -> FleetMetrics:
    """The metrics aggregate: hosts by state and pool, GPUs by model and state, validated
    GPUs per model and profile, open alarms, leases, collection ages."""
    now = fleet.now()
    out = FleetMetrics(at=now, expiring_within=expiring_within)
    profiles_text = func.cast(Host.profiles, Text)
    host_stmt = (
        select(
            Host.state,
            Host.pool,
            FactSnapshot.gpu_model,
            profiles_text,
            func.count(Host.id),
            func.coalesce(func.sum(FactSnapshot.gpu_count), 0),
            func.count(Host.last_collected_at),
            func.min(Host.last_collected_at),
            func.max(Host.last_collected_at),
        )
        .outerjoin(FactSnapshot, FactSnapshot.id == Host.latest_snapshot_id)
        .group_by(Host.state, Host.pool, FactSnapshot.gpu_model, profiles_text)
    )
    alarm_stmt = (
        select(Alarm.severity, Alarm.kind, func.count(Alarm.id))
        .where(Alarm.closed_at.is_(None))
        .group_by(Alarm.severity, Alarm.kind)
    )
    lease_stmt = select(Lease.state, func.count(Lease.id)).group_by(Lease.state)
    expiring_stmt = select(func.count(Lease.id)).where(
        Lease.state == LeaseState.ACTIVE, Lease.ends_at <= now + expiring_within
    )
    oldest: datetime | None = None
    newest: datetime | None = None
    with fleet.db.session() as s:
        for state, pool, model, ptext, n, gpus, collected, first, last in s.execute(host_stmt):
            st = HostState(state).value
            m = model or "unknown"
            out.hosts[(st, pool or "")] += int(n)
            out.gpus[(m, st)] += int(gpus)
            if st == HostState.AVAILABLE.value:
                for p in _profiles(ptext):
                    out.validated_gpus[(m, p)] += int(gpus)
            if st == HostState.RETIRED.value:
                continue
            out.never_collected += int(n) - int(collected)
            if first is not None and (oldest is None or first < oldest):
                oldest = first
            if last is not None and (newest is None or last > newest):
                newest = last
        for sev, kind, n in s.execute(alarm_stmt):
            out.alarms[(AlarmSeverity(sev).value, str(getattr(kind, "value", kind)))] += int(n)
        for state, n in s.execute(lease_stmt):
            out.leases[LeaseState(state).value] += int(n)
        out.leases_expiring = int(s.scalar(expiring_stmt) or 0)
    if oldest is not None:
        out.oldest_collection_age_s = max(0.0, (now - oldest).total_seconds())
    if newest is not None:
        out.newest_collection_age_s = max(0.0, (now - newest).total_seconds())
    return out
