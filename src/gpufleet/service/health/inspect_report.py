"""``gpufleet inspect report``: what the inspection sweeps saw over a period.

:func:`build_report` reads the stored samples and health alarms (aggregates in SQL, the same
on SQLite and PostgreSQL); :func:`render_csv` and :func:`render_html` turn it into a file. The
HTML is one self-contained page (inline CSS and SVG, no script, nothing fetched) with small
charts: the per-model hourly peak temperature and the findings per rule.
"""

from __future__ import annotations

import csv
import html
import io
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import case, func, select

from gpufleet.domain.events import AlarmKind
from gpufleet.errors import ConfigError
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.core.select import is_explicit, nothing_matches, select_hosts
from gpufleet.service.health.inspect_store import REASON_BITS
from gpufleet.store.tables import Alarm, GpuSampleRow

#: Clock-event reasons that mean the hardware held the clocks down.
HW_THROTTLE = (
    REASON_BITS["hw_slowdown"]
    | REASON_BITS["hw_thermal_slowdown"]
    | REASON_BITS["hw_power_brake_slowdown"]
)
FORMATS = ("table", "csv", "html")


def parse_since(text: str) -> timedelta:
    """``30m``, ``24h``, ``7d`` or seconds -> a positive period; ConfigError otherwise."""
    t = text.strip().lower()
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    unit = units.get(t[-1:]) if t else None
    try:
        n = float(t[:-1] if unit else t) * (unit or 1)
    except ValueError:
        n = -1.0
    if not 0 < n < float("inf"):
        raise ConfigError(f"--since {text!r}: expected a period like 30m, 24h, 7d")
    return timedelta(seconds=n)


@dataclass
class HostRow:
    """One host over the period (the top-offender table and the CSV)."""

    host: str
    model: str
    gpus: int
    samples: int
    temperature_max: float | None
    ecc_uncorrectable_max: int | None
    throttled_samples: int
    findings: int
    worst: str  # critical / warning / -
    rules: list[str] = field(default_factory=list)

    @property
    def score(self) -> tuple[int, int, int, float]:
        rank = {"critical": 2, "warning": 1}.get(self.worst, 0)
        return (rank, self.findings, self.throttled_samples, self.temperature_max or 0.0)


@dataclass
class ModelRow:
    """One GPU model over the period."""

    model: str
    gpus: int
    samples: int
    temperature_avg: float | None
    temperature_max: float | None
    ecc_uncorrectable_max: int | None
    throttled_share: float
    #: (hour, peak temperature) for the chart, oldest first.
    hourly_peak: list[tuple[datetime, float]] = field(default_factory=list)


@dataclass
class InspectReport:
    since: datetime
    until: datetime
    hosts: list[HostRow]
    models: list[ModelRow]
    findings_by_rule: dict[str, int]

    @property
    def over_threshold(self) -> list[HostRow]:
        return [h for h in self.hosts if h.findings]

    @property
    def top_offenders(self) -> list[HostRow]:
        return sorted(self.over_threshold, key=lambda h: h.score, reverse=True)[:10]

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> InspectReport:
        """The report back from the API's answer (remote mode), times as times."""
        return cls(
            since=_time(d["since"]),
            until=_time(d["until"]),
            hosts=[HostRow(**h) for h in d["hosts"]],
            models=[
                ModelRow(**{**m, "hourly_peak": [(_time(p["hour"]), p["temperature_max"])
                                                 for p in m["hourly_peak"]]})
                for m in d["models"]
            ],
            findings_by_rule=dict(d["findings_by_rule"]),
        )


def _time(v: datetime | str) -> datetime:
    return v if isinstance(v, datetime) else datetime.fromisoformat(v)


def build_report(fleet: Fleet, selector: str | None, since: timedelta) -> InspectReport:
    """The report of the hosts ``selector`` matches over the last ``since``."""
    until = fleet.now()
    start = until - since
    throttled = func.sum(case((GpuSampleRow.reasons.op("&")(HW_THROTTLE) > 0, 1), else_=0))
    with fleet.db.session() as s:
        names = {h.id: h.name for h in s.scalars(select_hosts(selector))}
        if is_explicit(selector) and not names:
            raise nothing_matches(selector, s)
        in_range = (
            GpuSampleRow.host_id.in_(names),
            GpuSampleRow.at >= start,
            GpuSampleRow.at <= until,
        )
        per_host = s.execute(
            select(
                GpuSampleRow.host_id,
                func.max(GpuSampleRow.model),
                func.count(func.distinct(GpuSampleRow.gpu_index)),
                func.count(),
                func.max(GpuSampleRow.temperature_c),
                func.max(GpuSampleRow.ecc_vol_unc),
                throttled,
            )
            .where(*in_range)
            .group_by(GpuSampleRow.host_id)
        ).all()
        per_model = s.execute(
            select(
                GpuSampleRow.model,
                func.count(func.distinct(GpuSampleRow.host_id * 1000 + GpuSampleRow.gpu_index)),
                func.count(),
                func.avg(GpuSampleRow.temperature_c),
                func.max(GpuSampleRow.temperature_c),
                func.max(GpuSampleRow.ecc_vol_unc),
                throttled,
            )
            .where(*in_range)
            .group_by(GpuSampleRow.model)
        ).all()
        peaks = s.execute(
            select(GpuSampleRow.model, GpuSampleRow.at, func.max(GpuSampleRow.temperature_c))
            .where(*in_range)
            .group_by(GpuSampleRow.model, GpuSampleRow.at)
        ).all()
        alarms = s.scalars(
            select(Alarm).where(
                Alarm.host_id.in_(names),
                Alarm.kind == AlarmKind.HEALTH,
                Alarm.opened_at <= until,
                (Alarm.closed_at.is_(None)) | (Alarm.closed_at >= start),
            )
        ).all()
    by_host: dict[int, list[Alarm]] = {}
    for a in alarms:
        by_host.setdefault(a.host_id, []).append(a)
    hosts: list[HostRow] = []
    for hid, model, gpus, n, tmax, ecc, thr in per_host:
        mine = by_host.get(hid, [])
        sev = {a.severity.value for a in mine}
        worst = "critical" if "critical" in sev else "warning" if sev else "-"
        hosts.append(
            HostRow(
                names[hid],
                model or "?",
                int(gpus),
                int(n),
                tmax,
                ecc,
                int(thr or 0),
                len(mine),
                worst,
                sorted({str(a.data.get("rule")) for a in mine}),
            )
        )
    hourly: dict[str, dict[datetime, float]] = {}
    for model, at, peak in peaks:
        if peak is None:
            continue
        hour = at.replace(minute=0, second=0, microsecond=0)
        cur = hourly.setdefault(model or "?", {})
        cur[hour] = max(cur.get(hour, peak), peak)
    models = [
        ModelRow(
            model or "?",
            int(gpus),
            int(n),
            float(avg) if avg is not None else None,
            tmax,
            ecc,
            (int(thr or 0) / int(n)) if n else 0.0,
            sorted(hourly.get(model or "?", {}).items()),
        )
        for model, gpus, n, avg, tmax, ecc, thr in per_model
    ]
    rules = Counter(str(a.data.get("rule")) for a in alarms)
    return InspectReport(
        start,
        until,
        sorted(hosts, key=lambda h: h.host),
        sorted(models, key=lambda m: m.model),
        dict(rules.most_common()),
    )


CSV_COLUMNS = (
    "host",
    "model",
    "gpus",
    "samples",
    "temperature_max",
    "ecc_uncorrectable_max",
    "throttled_samples",
    "findings",
    "worst",
    "rules",
)


def render_csv(report: InspectReport) -> str:
    """One row per host (the numbers behind the tables)."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for h in report.hosts:
        w.writerow(
            [
                h.host,
                h.model,
                h.gpus,
                h.samples,
                "" if h.temperature_max is None else f"{h.temperature_max:g}",
                "" if h.ecc_uncorrectable_max is None else h.ecc_uncorrectable_max,
                h.throttled_samples,
                h.findings,
                h.worst,
                ";".join(h.rules),
            ]
        )
    return out.getvalue()


def _num(v: float | int | None, fmt: str = "{:g}") -> str:
    return "-" if v is None else fmt.format(v)


def _sparkline(points: list[tuple[datetime, float]], width: int = 220, height: int = 48) -> str:
    if not points:
        return (
            f'<svg class="spark" width="{width}" height="{height}" role="img">'
            '<text x="4" y="28">no data</text></svg>'
        )
    values = [v for _, v in points]
    lo, hi = min(values), max(values)
    span = (hi - lo) or 1.0
    step = (width - 8) / max(1, len(values) - 1)
    xy = [
        (4 + i * step, height - 6 - (v - lo) / span * (height - 12)) for i, v in enumerate(values)
    ]
    path = " ".join(f"{x:.1f},{y:.1f}" for x, y in xy)
    hot = "#c62828" if hi >= 85 else "#1565c0"
    last_x, last_y = xy[-1]
    return (
        f'<svg class="spark" width="{width}" height="{height}" role="img" '
        f'aria-label="hourly peak temperature {lo:g} to {hi:g} C">'
        f'<polyline fill="none" stroke="{hot}" stroke-width="2" points="{path}"/>'
        f'<circle cx="{last_x:.1f}" cy="{last_y:.1f}" r="3" fill="{hot}"/>'
        f'<text x="{width - 4}" y="12" text-anchor="end">{hi:g} C</text></svg>'
    )


def _bars(counts: dict[str, int], width: int = 420) -> str:
    if not counts:
        return "<p>No findings in this period.</p>"
    top = max(counts.values())
    row = 22
    height = row * len(counts) + 4
    parts = [
        f'<svg class="bars" width="{width}" height="{height}" role="img" '
        'aria-label="findings per rule">'
    ]
    for i, (rule, n) in enumerate(counts.items()):
        w = max(2.0, (width - 190) * n / top)
        y = 2 + i * row
        parts.append(
            f'<text x="0" y="{y + 15}">{html.escape(rule)}</text>'
            f'<rect x="160" y="{y + 3}" width="{w:.1f}" height="15" fill="#ef6c00"/>'
            f'<text x="{164 + w:.1f}" y="{y + 15}">{n}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#212121}
h1{font-size:20px}h2{font-size:16px;margin-top:28px}
table{border-collapse:collapse}td,th{border-bottom:1px solid #ddd;padding:4px 10px;text-align:left}
th{background:#f5f5f5}.critical{color:#b71c1c;font-weight:600}.warning{color:#e65100}
svg text{font:11px system-ui,sans-serif;fill:#424242}.models td{vertical-align:middle}
"""


def render_html(report: InspectReport) -> str:
    """One self-contained page: summary, over-threshold hosts, top offenders, per-model table
    with hourly peak temperature sparklines, findings per rule as bars."""
    e = html.escape

    def host_rows(rows: list[HostRow]) -> str:
        return (
            "".join(
                f"<tr><td>{e(h.host)}</td><td>{e(h.model)}</td><td>{h.gpus}</td>"
                f"<td>{_num(h.temperature_max)}</td><td>{_num(h.ecc_uncorrectable_max)}</td>"
                f"<td>{h.throttled_samples}</td><td class='{e(h.worst)}'>{e(h.worst)}</td>"
                f"<td>{e(', '.join(h.rules)) or '-'}</td></tr>"
                for h in rows
            )
            or "<tr><td colspan='8'>none</td></tr>"
        )

    head = (
        "<tr><th>host</th><th>model</th><th>GPUs</th><th>max temp C</th>"
        "<th>max uncorr. ECC</th><th>HW throttled samples</th><th>worst</th><th>rules</th></tr>"
    )
    models = (
        "".join(
            f"<tr><td>{e(m.model)}</td><td>{m.gpus}</td><td>{m.samples}</td>"
            f"<td>{_num(m.temperature_avg, '{:.1f}')}</td><td>{_num(m.temperature_max)}</td>"
            f"<td>{_num(m.ecc_uncorrectable_max)}</td><td>{m.throttled_share:.1%}</td>"
            f"<td>{_sparkline(m.hourly_peak)}</td></tr>"
            for m in report.models
        )
        or "<tr><td colspan='8'>no samples</td></tr>"
    )
    period = f"{report.since:%Y-%m-%d %H:%M} to {report.until:%Y-%m-%d %H:%M} UTC"
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>gpufleet inspection report</title>
<style>{_CSS}</style></head><body>
<h1>gpufleet inspection report</h1>
<p>{e(period)}: {len(report.hosts)} hosts sampled, {len(report.over_threshold)} over
thresholds, {sum(report.findings_by_rule.values())} findings.</p>
<h2>Top offenders</h2><table>{head}{host_rows(report.top_offenders)}</table>
<h2>Per model</h2><table class="models"><tr><th>model</th><th>GPUs</th><th>samples</th>
<th>avg temp C</th><th>max temp C</th><th>max uncorr. ECC</th><th>HW throttled</th>
<th>hourly peak temperature</th></tr>{models}</table>
<h2>Findings per rule</h2>{_bars(report.findings_by_rule)}
<h2>Hosts over thresholds</h2><table>{head}{host_rows(report.over_threshold)}</table>
</body></html>
"""
