"""The health side of ``/metrics`` (issue 12, item 6): per-GPU readings of each host's latest
inspection sample, the age of that sample, the blast-radius guard, how fast the fleet acts on
a fault (time to act) and how long background runs take.

Time to act, per inspection alarm (kind ``health``) opened within :data:`ACT_WINDOW`:

* *seen*: the alarm's ``opened_at``: the inspection stores it as the time of the sample in
  which the finding first appeared (the sweep's probe time);
* *alarmed*: the first ``alarm`` event of the host at or after *seen* (when the alarm was
  committed and the webhooks called);
* *out of allocation*: the first ``transition`` event of the host to ``quarantined`` at or
  after *seen* (critical alarms of an available or validating host; a held or leased host has
  none and counts only in the first histogram). Only critical alarms count here.

Every value here is bounded by the fleet: host names, GPU indexes, models, run kinds;
never a job, run or alarm id.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import func, select

from gpufleet.domain.events import AlarmKind, AlarmSeverity, EventKind
from gpufleet.domain.states import HostState
from gpufleet.domain.times import as_utc
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.health.inspect_store import REASON_BITS
from gpufleet.store.tables import (
    Alarm,
    Event,
    FleetAlarm,
    GpuSampleRow,
    Host,
    HostSampleRow,
    JobRun,
)

#: Alarms opened this long ago or less feed the time-to-act histograms.
ACT_WINDOW = timedelta(days=7)
#: Runs finished this long ago or less feed the run-duration histogram.
RUN_WINDOW = timedelta(days=7)
#: Hardware clock slowdowns (throttling the GPU did not choose).
HW_THROTTLE = (
    REASON_BITS["hw_slowdown"]
    | REASON_BITS["hw_thermal_slowdown"]
    | REASON_BITS["hw_power_brake_slowdown"]
)
#: Software slowdowns (the driver's thermal or power cap).
SW_THROTTLE = REASON_BITS["sw_thermal_slowdown"] | REASON_BITS["sw_power_cap"]


@dataclass(frozen=True)
class GpuReading:
    host: str
    gpu: int
    model: str
    temperature_c: float | None
    power_w: float | None
    ecc_volatile_uncorrected: int | None
    ecc_aggregate_uncorrected: int | None
    ecc_aggregate_corrected: int | None
    hw_throttled: bool
    sw_throttled: bool


@dataclass
class HealthMetrics:
    at: datetime
    gpus: list[GpuReading] = field(default_factory=list)
    #: host -> seconds since its latest inspection sample (hosts not retired, sampled once)
    inspection_age_s: dict[str, float] = field(default_factory=dict)
    #: fleet alarm kind -> open (the blast-radius guard: ``inspect-guard``)
    fleet_alarms: dict[str, int] = field(default_factory=dict)
    #: seconds from the sample that saw a fault to its alarm
    seen_to_alarm_s: list[float] = field(default_factory=list)
    #: seconds from the sample that saw a fault to the host's quarantine
    seen_to_quarantine_s: list[float] = field(default_factory=list)
    #: run kind -> durations (created to finished) of runs finished within RUN_WINDOW
    run_durations_s: dict[str, list[float]] = field(default_factory=dict)


def _utc(dt: datetime) -> datetime:
    return as_utc(dt)  # naive means UTC: gpufleet.domain.times


def health_metrics(fleet: Fleet) -> HealthMetrics:
    """Read the aggregate: one query per family, never one per host."""
    now = _utc(fleet.now())
    out = HealthMetrics(at=now)
    with fleet.db.session() as s:
        latest = (
            select(HostSampleRow.host_id, func.max(HostSampleRow.at).label("at"))
            .group_by(HostSampleRow.host_id)
            .subquery()
        )
        for name, at in s.execute(
            select(Host.name, latest.c.at)
            .join(latest, latest.c.host_id == Host.id)
            .where(Host.state != HostState.RETIRED)
        ):
            out.inspection_age_s[name] = max(0.0, (now - _utc(at)).total_seconds())
        rows = s.execute(
            select(Host.name, GpuSampleRow)
            .join(latest, latest.c.host_id == Host.id)
            .join(
                GpuSampleRow,
                (GpuSampleRow.host_id == latest.c.host_id) & (GpuSampleRow.at == latest.c.at),
            )
            .where(Host.state != HostState.RETIRED)
            .order_by(Host.name, GpuSampleRow.gpu_index)
        )
        for name, g in rows:
            out.gpus.append(
                GpuReading(
                    host=name,
                    gpu=g.gpu_index,
                    model=g.model or "unknown",
                    temperature_c=g.temperature_c,
                    power_w=g.power_w,
                    ecc_volatile_uncorrected=g.ecc_vol_unc,
                    ecc_aggregate_uncorrected=g.ecc_agg_unc,
                    ecc_aggregate_corrected=g.ecc_agg_corr,
                    hw_throttled=bool(g.reasons & HW_THROTTLE),
                    sw_throttled=bool(g.reasons & SW_THROTTLE),
                )
            )
        for kind, n in s.execute(
            select(FleetAlarm.kind, func.count(FleetAlarm.id))
            .where(FleetAlarm.closed_at.is_(None))
            .group_by(FleetAlarm.kind)
        ):
            out.fleet_alarms[kind] = int(n)
        since = now - ACT_WINDOW
        alarms = list(
            s.execute(
                select(Alarm.host_id, Alarm.opened_at, Alarm.severity).where(
                    Alarm.kind == AlarmKind.HEALTH, Alarm.opened_at >= since
                )
            )
        )
        if alarms:
            hosts = {h for h, _, _ in alarms}
            alarm_events: dict[int, list[datetime]] = defaultdict(list)
            quarantines: dict[int, list[datetime]] = defaultdict(list)
            for host_id, kind, at, data in s.execute(
                select(Event.host_id, Event.kind, Event.at, Event.data)
                .where(
                    Event.host_id.in_(hosts),
                    Event.kind.in_([EventKind.ALARM, EventKind.TRANSITION]),
                    Event.at >= since,
                )
                .order_by(Event.at)
            ):
                if kind is EventKind.ALARM:
                    alarm_events[host_id].append(_utc(at))
                elif (data or {}).get("to") == HostState.QUARANTINED.value:
                    quarantines[host_id].append(_utc(at))
            for host_id, opened, severity in alarms:
                seen = _utc(opened)
                a = next((t for t in alarm_events[host_id] if t >= seen), None)
                if a is not None:
                    out.seen_to_alarm_s.append((a - seen).total_seconds())
                if severity is not AlarmSeverity.CRITICAL:
                    continue
                q = next((t for t in quarantines[host_id] if t >= seen), None)
                if q is not None:
                    out.seen_to_quarantine_s.append((q - seen).total_seconds())
        for kind, created, finished in s.execute(  # finished_at is not null: the where
            select(JobRun.kind, JobRun.created_at, JobRun.finished_at).where(
                JobRun.finished_at.is_not(None), JobRun.finished_at >= now - RUN_WINDOW
            )
        ):
            out.run_durations_s.setdefault(str(kind.value), []).append(
                max(0.0, (_utc(finished or created) - _utc(created)).total_seconds())
            )
    return out
