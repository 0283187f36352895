"""Drift: where a host's software differs from its pool's baseline, and fleet-wide summaries.

What is compared, and how, is the pin table (:mod:`gpufleet.domain.pins`).

Only pinned baseline fields are compared, and only against facts that were collected: an
unknown driver version (nvidia-smi failed) is not drift, the GPU checks report that. The
container toolkit and fabric manager are the exception: a pinned one that is not installed
is drift (the host lacks what the baseline promises).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

from gpufleet.domain.facts import HostFacts
from gpufleet.domain.pins import PINS, os_image_matches, os_image_name
from gpufleet.domain.spec import Baseline

__all__ = [
    "DRIFT_FIELDS",
    "DriftItem",
    "DriftSummary",
    "diff_against_baseline",
    "os_image_matches",
    "os_image_name",
    "summarize_drift",
]

#: Fields of :class:`DriftItem`, from :data:`~gpufleet.domain.pins.PINS`; map pins (sysctls)
#: are reported per key as ``sysctl.<key>``.
DRIFT_FIELDS = tuple(p.drift_field for p in PINS)


@dataclass(frozen=True, slots=True)
class DriftItem:
    """One difference; ``actual`` None means "not set on the host" (a missing sysctl)."""

    field: str
    expected: str
    actual: str | None


@dataclass(frozen=True, slots=True)
class DriftSummary:
    """One (field, actual value) across the fleet."""

    field: str
    actual: str | None
    expected: str
    hosts: list[str]

    def describe(self) -> str:
        """``"driver 535.154.05 on 3 hosts, baseline 550.90.07"``."""
        n = len(self.hosts)
        actual = self.actual if self.actual is not None else "unset"
        return f"{self.field} {actual} on {n} host{'s' if n != 1 else ''}, baseline {self.expected}"


def diff_against_baseline(facts: HostFacts, baseline: Baseline) -> list[DriftItem]:
    """Every pinned baseline field the host differs from, in :data:`DRIFT_FIELDS` order."""
    return [
        DriftItem(m.field, m.expected, m.actual)
        for pin in PINS
        for m in pin.mismatches(facts, baseline)
    ]


def summarize_drift(items_by_host: Mapping[str, list[DriftItem]]) -> list[DriftSummary]:
    """Group drift by (field, actual value): most hosts first, then by field and value."""
    groups: dict[tuple[str, str | None, str], list[str]] = defaultdict(list)
    for host, items in items_by_host.items():
        for item in items:
            hosts = groups[(item.field, item.actual, item.expected)]
            if host not in hosts:
                hosts.append(host)
    summaries = [
        DriftSummary(field, actual, expected, sorted(hosts))
        for (field, actual, expected), hosts in groups.items()
    ]
    summaries.sort(key=lambda s: (-len(s.hosts), s.field, s.actual or ""))
    return summaries
