"""Read models of the dashboard's operations pages (issue 29 item 6): the inspection page
(latest sweep, findings, the health rules in force and their version), the host page's
charts of the stored GPU samples and the overview's fleet heatmap (hosts x GPUs by health).
(The campaigns page reads :func:`gpufleet.service.campaigns.campaign.list_campaigns`, a
context above this one.)"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import and_, func, select

from gpufleet.domain.rules import Rule
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.health.inspect import load_policy
from gpufleet.service.health.inspect_report import HW_THROTTLE, InspectReport, build_report
from gpufleet.store.repo import host_by_name
from gpufleet.store.tables import GpuSampleRow, Host, HostSampleRow

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


#: Hosts the overview's heatmap shows at most (by name).
HEATMAP_HOSTS = 256
#: A GPU this hot in its latest sample is shown as a warning (the shipped warm rule's limit).
WARM_C = 85.0


@dataclass(frozen=True)
class HeatCell:
    index: int
    level: str  # ok / warning / alarm
    why: str


@dataclass(frozen=True)
class HeatRow:
    host: str
    state: str
    at: datetime
    cells: tuple[HeatCell, ...]


@dataclass
class Heatmap:
    """Hosts x GPUs from each host's latest stored sample, coloured by health."""

    rows: list[HeatRow]
    more: bool  # hosts past :data:`HEATMAP_HOSTS` left out


def _level(
    unusable: bool, ecc: int | None, failure: bool | None, pending: bool | None,
    reasons: int | None, temp: float | None,
) -> tuple[str, str]:
    if unusable:
        return "alarm", "unusable"
    if ecc:
        return "alarm", f"uncorrectable ECC {ecc}"
    if failure:
        return "alarm", "row remap failure"
    if pending:
        return "warning", "row remap pending"
    if (reasons or 0) & HW_THROTTLE:
        return "warning", "hardware throttling"
    if temp is not None and temp >= WARM_C:
        return "warning", f"{temp:g} C"
    return "ok", "" if temp is None else f"{temp:g} C"


def fleet_heatmap(fleet: Fleet, limit: int = HEATMAP_HOSTS) -> Heatmap:
    """Each sampled host's GPUs in its latest sample: alarm (unusable, uncorrectable ECC,
    row-remap failure), warning (remap pending, hardware throttling, at or over
    :data:`WARM_C`) or ok; the first ``limit`` hosts by name."""
    latest = (
        select(GpuSampleRow.host_id, func.max(GpuSampleRow.at).label("at"))
        .group_by(GpuSampleRow.host_id)
        .subquery()
    )
    hosts = (
        select(Host.id, Host.name, Host.state, Host.unusable_gpus, latest.c.at)
        .join(latest, latest.c.host_id == Host.id)
        .order_by(Host.name)
        .limit(limit + 1)
    )
    with fleet.db.session() as s:
        picked = s.execute(hosts).all()
        ids = [r[0] for r in picked[:limit]]
        samples = s.execute(
            select(
                GpuSampleRow.host_id, GpuSampleRow.gpu_index, GpuSampleRow.ecc_vol_unc,
                GpuSampleRow.remap_failure, GpuSampleRow.remap_pending, GpuSampleRow.reasons,
                GpuSampleRow.temperature_c,
            )
            .join(latest, and_(latest.c.host_id == GpuSampleRow.host_id,
                               latest.c.at == GpuSampleRow.at))
            .where(GpuSampleRow.host_id.in_(ids))
            .order_by(GpuSampleRow.host_id, GpuSampleRow.gpu_index)
        ).all()
    cells: dict[int, list[HeatCell]] = {}
    bad = {
        r[0]: {u.get("index") for u in (r[3] or [])} for r in picked[:limit]
    }
    for hid, idx, ecc, failure, pending, reasons, temp in samples:
        level, why = _level(idx in bad[hid], ecc, failure, pending, reasons, temp)
        cells.setdefault(hid, []).append(HeatCell(idx, level, why))
    rows = [
        HeatRow(name, str(state), at, tuple(cells.get(hid, [])))
        for hid, name, state, _, at in picked[:limit]
    ]
    return Heatmap(rows, len(picked) > limit)
