"""Drift: where a host's software differs from its pool's baseline, and fleet-wide summaries.

Only pinned baseline fields are compared, and only against facts that were collected: an
unknown driver version (nvidia-smi failed) is not drift, the GPU checks report that. The
container toolkit and fabric manager are the exception: a pinned one that is not installed
is drift (the host lacks what the baseline promises).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

from gpufleet.domain.facts import HostFacts, OsRelease
from gpufleet.domain.spec import Baseline

#: Fields of :class:`DriftItem`; sysctls are reported as ``sysctl.<key>``.
DRIFT_FIELDS = (
    "os_image",
    "kernel",
    "driver",
    "cuda",
    "vbios",
    "container_toolkit",
    "fabric_manager",
    "sysctl",
)


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


def os_image_name(os: OsRelease | None) -> str | None:
    """How a host's OS is shown: PRETTY_NAME, else ``"ID VERSION_ID"``."""
    if os is None:
        return None
    if os.pretty_name:
        return os.pretty_name
    joined = " ".join(p for p in (os.id, os.version_id) if p)
    return joined or None


def os_image_matches(expected: str, os: OsRelease) -> bool:
    """True if ``expected`` equals PRETTY_NAME or ``"ID VERSION_ID"`` (case and spacing aside)."""
    want = _norm(expected)
    candidates = [os.pretty_name, " ".join(p for p in (os.id, os.version_id) if p)]
    return any(c and _norm(c) == want for c in candidates)


def _norm(value: str) -> str:
    # sysctl values come tab-separated from /proc and space-separated from configs.
    return " ".join(value.split()).lower()


def diff_against_baseline(facts: HostFacts, baseline: Baseline) -> list[DriftItem]:
    """Every pinned baseline field the host differs from, in :data:`DRIFT_FIELDS` order."""
    items: list[DriftItem] = []
    if baseline.os_image and facts.os and not os_image_matches(baseline.os_image, facts.os):
        items.append(DriftItem("os_image", baseline.os_image, os_image_name(facts.os)))
    pairs = (
        ("kernel", baseline.kernel, facts.kernel),
        ("driver", baseline.driver, facts.driver_version),
        ("cuda", baseline.cuda, facts.cuda_version),
    )
    for name, expected, actual in pairs:
        if expected and actual and expected.strip() != actual.strip():
            items.append(DriftItem(name, expected, actual))
    if baseline.vbios:
        accepted = {v.strip().lower() for v in baseline.vbios}
        seen: list[str] = []
        for gpu in facts.gpus:
            v = gpu.vbios_version
            if v and v.strip().lower() not in accepted and v not in seen:
                seen.append(v)
        items.extend(DriftItem("vbios", ", ".join(baseline.vbios), v) for v in seen)
    tools = (
        ("container_toolkit", baseline.container_toolkit, facts.container_toolkit),
        ("fabric_manager", baseline.fabric_manager, facts.fabricmanager_version),
    )
    for name, expected, actual in tools:
        # Not installed is drift too when the baseline pins it (unlike a section not collected).
        if expected and expected.strip() != (actual or "").strip():
            items.append(DriftItem(name, expected, actual))
    # An empty sysctl map means "not collected", not "all unset".
    if baseline.sysctls and facts.sysctls:
        for key, expected in sorted(baseline.sysctls.items()):
            actual = facts.sysctls.get(key)
            if actual is None or _norm(actual) != _norm(expected):
                items.append(DriftItem(f"sysctl.{key}", expected, actual))
    return items


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
