"""Read models of the dashboard's operations pages (issue 29 item 6): the inspection page
(latest sweep, findings, the health rules in force and their version) and the host page's
charts of the stored GPU samples. (The campaigns page reads
:func:`gpufleet.service.campaigns.campaign.list_campaigns`, a context above this one.)"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import func, select

from gpufleet.domain.rules import Rule
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.health.inspect import load_policy
from gpufleet.service.health.inspect_report import HW_THROTTLE, InspectReport, build_report
from gpufleet.store.repo import host_by_name
from gpufleet.store.tables import GpuSampleRow, HostSampleRow

#: The period the inspection page and the host charts cover by default.
DEFAULT_PERIOD = timedelta(hours=24)
#: Samples one GPU's chart draws at most (the newest).
CHART_POINTS = 500


@dataclass
class InspectionView:
    """The last sweep, the report over the period and the rules in force."""

    report: InspectReport
    latest_sweep: datetime | None
    hosts_in_latest: int
    policy_version: str
    rules: list[Rule]


def inspection_view(fleet: Fleet, since: timedelta = DEFAULT_PERIOD) -> InspectionView:
    """What the inspection sweeps saw over ``since``, and the policy they judged by."""
    report = build_report(fleet, None, since)
    policy = load_policy(fleet)
    with fleet.db.session() as s:
        latest = s.scalar(select(func.max(HostSampleRow.at)))
        n = 0
        if latest is not None:
            n = int(s.scalar(select(func.count()).where(HostSampleRow.at == latest)) or 0)
    return InspectionView(report, latest, n, policy.version, list(policy.rules))


@dataclass
class GpuPoint:
    at: datetime
    temperature_c: float | None
    power_w: float | None
    ecc_uncorrectable: int | None
    throttled: bool


@dataclass
class GpuSeries:
    """One GPU's stored samples over the period, oldest first."""

    index: int
    model: str | None
    points: list[GpuPoint] = field(default_factory=list)


def gpu_series(fleet: Fleet, host: str, since: timedelta = DEFAULT_PERIOD) -> list[GpuSeries]:
    """The host's GPU samples of the last ``since`` (at most :data:`CHART_POINTS` per GPU),
    per GPU: temperature, power, volatile uncorrectable ECC and hardware throttling."""
    start = fleet.now() - since
    with fleet.db.session() as s:
        h = host_by_name(s, host)
        rows = s.execute(
            select(
                GpuSampleRow.gpu_index,
                GpuSampleRow.model,
                GpuSampleRow.at,
                GpuSampleRow.temperature_c,
                GpuSampleRow.power_w,
                GpuSampleRow.ecc_vol_unc,
                GpuSampleRow.reasons,
            )
            .where(GpuSampleRow.host_id == h.id, GpuSampleRow.at >= start)
            .order_by(GpuSampleRow.gpu_index, GpuSampleRow.at)
        ).all()
    out: dict[int, GpuSeries] = {}
    for idx, model, at, temp, power, ecc, reasons in rows:
        series = out.setdefault(idx, GpuSeries(idx, model))
        series.points.append(GpuPoint(at, temp, power, ecc, bool((reasons or 0) & HW_THROTTLE)))
    for series in out.values():
        series.points = series.points[-CHART_POINTS:]
    return [out[i] for i in sorted(out)]
