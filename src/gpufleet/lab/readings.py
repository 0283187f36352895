"""Readings that move by themselves, for the lab's rendered answers (issue 8).

The lab renders every host the same way at every collection; a real host's temperatures,
power draw, utilization and nvidia-smi's timestamp differ between any two reads.
:func:`vary_readings` moves them in an answer the lab rendered, so a test or a bench can
collect a fleet whose readings change (``domain.telemetry``: they write no new snapshot).
"""

from __future__ import annotations

import re
from collections.abc import Callable

#: Reading -> (pattern of the rendered value, step per round, format): nvidia-smi XML,
#: nvidia-smi ``-q`` text, rocm-smi JSON.
_VARIED = (
    (r"(<gpu_temp>)(\d+)( C</gpu_temp>)", 7, "{:.0f}"),
    (r"(<power_draw>)([\d.]+)( W</power_draw>)", 11.5, "{:.2f}"),
    (r"(<gpu_util>)(\d+)( %</gpu_util>)", 1, "{:.0f}"),
    (r"(GPU Current Temp\s+: )(\d+)( C)", 7, "{:.0f}"),
    (r"(Power Draw\s+: )([\d.]+)( W)", 11.5, "{:.2f}"),
    (r'("Temperature \(Sensor \w+\) \(C\)": ")([\d.]+)(")', 7, "{:.1f}"),
    (r'("Average Graphics Package Power \(W\)": ")([\d.]+)(")', 11.5, "{:.1f}"),
)


def _add(delta: float, fmt: str) -> Callable[[re.Match[str]], str]:
    def sub(m: re.Match[str]) -> str:
        return f"{m.group(1)}{fmt.format(float(m.group(2)) + delta)}{m.group(3)}"

    return sub


def vary_readings(output: str, k: int) -> str:
    """A lab host's rendered answer with its readings moved ``k`` steps (temperatures +7 C,
    power +11.5 W, utilization +1 %, nvidia-smi's timestamp), as a real host's would be."""
    for pat, step, fmt in _VARIED:
        output = re.sub(pat, _add(step * k, fmt), output)
    return re.sub(
        r"(<timestamp>)[^<]+(</timestamp>)", rf"\g<1>Mon Dec  1 10:{k:02d}:00 2026\g<2>", output
    )
