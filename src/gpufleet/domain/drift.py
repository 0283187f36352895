"""Drift: where a host's software differs from its pool's baseline, and fleet-wide summaries.

What is compared, and how, is the pin table (:mod:`gpufleet.domain.pins`).

Only pinned baseline fields are compared, and only against facts that were collected: an
unknown driver version (nvidia-smi failed) is not drift, the GPU checks report that. The
container toolkit and fabric manager are the exception: a pinned one that is not installed
is drift (the host lacks what the baseline promises).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gpufleet.domain.facts import HostFacts
from gpufleet.domain.pins import PINS, os_image_matches, os_image_name
from gpufleet.domain.reasons import N_
from gpufleet.domain.spec import Baseline

__all__ = [
    "DRIFT_FIELDS",
    "DriftItem",
    "DriftSummary",
    "PoolDrift",
    "PoolField",
    "diff_against_baseline",
    "os_image_matches",
    "os_image_name",
    "pool_drift",
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


# --- issue 26: drift at pool level ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PoolField:
    """One pinned field across a pool: the pool baseline's value, how many hosts have it,
    and the hosts of each other value (``None``: not set on the host)."""

    field: str
    expected: str
    matching: int
    others: dict[str, list[str]]  # actual value ("unset" when None) -> hosts

    def describe(self, tr: Callable[[str], str] | None = None) -> str:
        """``"driver 590.48.01 on 1 host, 595.10.01 on 5"`` (its words translated by
        ``tr``, the CLI's ``_``; None: English)."""
        t = tr or _same
        n = self.matching
        head = N_("{field} {value} (baseline) on {n} host") if n == 1 else N_(
            "{field} {value} (baseline) on {n} hosts")
        parts = [t(head).format(field=self.field, value=self.expected, n=n)]
        parts += [t(N_("{value} on {n}")).format(value=value, n=len(hosts))
                  for value, hosts in self.others.items()]
        return t(N_(", ")).join(parts)


@dataclass(frozen=True, slots=True)
class PoolDrift:
    """A pool compared with its own baseline: which hosts match it, which follow another
    baseline (a campaign's target: the pool is half migrated), and field by field."""

    pool: str
    baseline: str
    hosts: list[str]
    matching: list[str]
    on_other: dict[str, list[str]]  # the other baseline a host follows -> hosts
    fields: list[PoolField]

    @property
    def drifts(self) -> bool:
        """Whether any host differs from the pool's baseline or follows another one."""
        return bool(self.on_other or self.fields)

    def describe(self, tr: Callable[[str], str] | None = None) -> str:
        """``"pool train: baseline b-old; 1 of 6 hosts match it; 5 follow b-new (gpu-02,
        ...); driver 590.48.01 (baseline) on 1 host, 595.10.01 on 5"`` (its words translated
        by ``tr``; None: English)."""
        t = tr or _same
        head = t(N_("pool {pool}: baseline {baseline}; {n} of {total} hosts match it")).format(
            pool=self.pool, baseline=self.baseline, n=len(self.matching), total=len(self.hosts))
        parts = [head]
        for other, hosts in self.on_other.items():
            more = t(N_(", {n} more")).format(n=len(hosts) - 5) if len(hosts) > 5 else ""
            shown = t(N_(", ")).join(hosts[:5]) + more
            parts.append(t(N_("{n} follow {baseline} ({hosts})")).format(
                n=len(hosts), baseline=other, hosts=shown))
        parts += [f.describe(tr) for f in self.fields]
        return t(N_("; ")).join(parts)


def _same(message: str) -> str:
    return message


def pool_drift(
    pool: str,
    baseline: str,
    against_pool: Mapping[str, list[DriftItem]],
    follows: Mapping[str, str],
) -> PoolDrift:
    """``pool`` (baseline ``baseline``) from each of its hosts' differences from the pool's
    baseline (``against_pool``: host -> items, every compared host a key, [] when none)
    and the baseline each host follows (``follows``: host -> name)."""
    hosts = sorted(against_pool)
    on_other: dict[str, list[str]] = defaultdict(list)
    for h in hosts:
        own = follows.get(h, baseline)
        if own != baseline:
            on_other[own].append(h)
    values: dict[tuple[str, str], dict[str, list[str]]] = {}
    for h in hosts:
        for item in against_pool[h]:
            by_value = values.setdefault((item.field, item.expected), defaultdict(list))
            by_value[item.actual if item.actual is not None else "unset"].append(h)
    order = {f: i for i, f in enumerate(DRIFT_FIELDS)}
    fields = [
        PoolField(
            field,
            expected,
            len(hosts) - len({h for hs in by_value.values() for h in hs}),
            dict(sorted(by_value.items(), key=lambda kv: (-len(kv[1]), kv[0]))),
        )
        for (field, expected), by_value in sorted(
            values.items(), key=lambda kv: (order.get(kv[0][0].split(".")[0], 99), kv[0])
        )
    ]
    matching = [h for h in hosts if not against_pool[h] and h not in
                {x for xs in on_other.values() for x in xs}]
    return PoolDrift(pool, baseline, hosts, matching, dict(sorted(on_other.items())), fields)
