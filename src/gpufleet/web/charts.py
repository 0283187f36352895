"""Server-side SVG charts of the stored samples (issue 29 item 6): positions only.

The host page draws, per metric (temperature, power, uncorrectable ECC), a line per GPU on a
shared time axis, and a strip per GPU marking the samples in hardware throttling; the data is
:func:`gpufleet.service.views.operations.gpu_series`. Nothing is fetched, no script: the
template writes the polylines these functions place (x in 0..1000 of the view box).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from gpufleet.service.views.operations import GpuPoint, GpuSeries

LEFT, WIDTH, HEIGHT, TOP = 100.0, 880.0, 140.0, 10.0
#: Line colours, one per GPU (cycled).
PALETTE = ("#1565c0", "#2e7d32", "#ef6c00", "#6a1b9a", "#00838f", "#c62828", "#5d4037",
           "#283593", "#9e9d24", "#ad1457")
METRICS = (
    ("temperature_c", "chart.temperature", "°C"),
    ("power_w", "chart.power", "W"),
    ("ecc_uncorrectable", "chart.ecc", ""),
)


@dataclass(frozen=True)
class Line:
    gpu: int
    colour: str
    points: str  # "x,y x,y ..." for <polyline>
    last: float | None


def _x(at: datetime, first: datetime, span: timedelta) -> float:
    return LEFT + WIDTH * ((at - first) / span)


def _chart(series: list[GpuSeries], attr: str, first: datetime, span: timedelta) -> dict[str, Any]:
    values = [getattr(p, attr) for s in series for p in s.points if getattr(p, attr) is not None]
    if not values:
        return {"lines": [], "lo": None, "hi": None}
    vmin, vmax = min(values), max(values)
    lo, hi = (vmin - 1, vmax + 1) if vmax == vmin else (vmin, vmax)  # a flat line mid-height
    lines = []
    for i, s in enumerate(series):
        pts = [(p.at, getattr(p, attr)) for p in s.points if getattr(p, attr) is not None]
        xy = " ".join(
            f"{_x(at, first, span):.1f},{TOP + HEIGHT * (1 - (v - lo) / (hi - lo)):.1f}"
            for at, v in pts
        )
        lines.append(Line(s.index, PALETTE[i % len(PALETTE)], xy, pts[-1][1] if pts else None))
    return {"lines": lines, "lo": vmin, "hi": vmax}


def sample_charts(series: list[GpuSeries]) -> dict[str, Any]:
    """The charts of one host's samples: per metric its lines and value range, the
    throttle strips (x of each throttled sample per GPU) and five time ticks."""
    points: list[GpuPoint] = [p for s in series for p in s.points]
    if not points:
        return {"charts": [], "throttle": [], "ticks": [], "samples": 0}
    first, last = min(p.at for p in points), max(p.at for p in points)
    span = (last - first) or timedelta(minutes=1)
    fmt = "%H:%M:%S" if span < timedelta(hours=2) else "%m-%d %H:%M"
    ticks = [(LEFT + WIDTH * k / 4, (first + span * k / 4).strftime(fmt)) for k in range(5)]
    charts = [
        {"metric": attr, "key": key, "unit": unit, **_chart(series, attr, first, span)}
        for attr, key, unit in METRICS
    ]
    throttle = [
        (s.index, [_x(p.at, first, span) for p in s.points if p.throttled]) for s in series
    ]
    return {
        "charts": charts,
        "throttle": throttle,
        "ticks": ticks,
        "samples": len(points),
        "left": LEFT,
        "right": LEFT + WIDTH,
        "first": first,
        "last": last,
    }
