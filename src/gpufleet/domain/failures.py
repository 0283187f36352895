"""Job failures: classify messages by a rule table, group them by host and GPU, and flag the
hosts where failures from several jobs concentrate. Pure: no I/O, no clock.

The flag rule (documented in docs/reference.md): a host is *flagged* when, in the window, it has
at least :data:`MIN_FAILURES` failures from at least :data:`MIN_JOBS` distinct jobs and its
failure count is at least :data:`SHARE_FACTOR` times the fleet mean (failures in the window
divided by the hosts of the fleet). One job failing five times on one host is the job; four
jobs failing on one host is the host.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from importlib import resources
from typing import Any

import yaml

from gpufleet.errors import ConfigError

MIN_FAILURES = 3
MIN_JOBS = 2
SHARE_FACTOR = 3.0
CATEGORIES = ("gpu", "driver", "network", "user", "unknown")


@dataclass(frozen=True)
class Rule:
    """One classification rule."""

    name: str
    category: str
    pattern: re.Pattern[str]


def shipped_rules_text() -> str:
    return resources.files("gpufleet.domain").joinpath("data/failure_rules.yaml").read_text()


def _parse(text: str, source: str) -> list[Rule]:
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not YAML: {exc}") from None
    items = doc.get("rules") if isinstance(doc, dict) else None
    if not isinstance(items, list):
        raise ConfigError(f"{source}: expected a mapping with a 'rules' list")
    out: list[Rule] = []
    for n, item in enumerate(items, 1):
        where = f"{source}: rule {n}"
        if not isinstance(item, dict) or set(item) != {"name", "category", "pattern"}:
            raise ConfigError(f"{where}: expected exactly name, category and pattern")
        if item["category"] not in CATEGORIES:
            raise ConfigError(
                f"{where}: category {item['category']!r} is not one of {', '.join(CATEGORIES)}"
            )
        try:
            pattern = re.compile(str(item["pattern"]), re.IGNORECASE)
        except re.error as exc:
            raise ConfigError(f"{where}: bad pattern: {exc}") from None
        out.append(Rule(str(item["name"]), str(item["category"]), pattern))
    return out


def load_rules(overlay_text: str | None = None, overlay_source: str = "overlay") -> list[Rule]:
    """The shipped rules, with an overlay's rules tried first (a same-named rule replaced)."""
    shipped = _parse(shipped_rules_text(), "failure_rules.yaml")
    if overlay_text is None:
        return shipped
    extra = _parse(overlay_text, overlay_source)
    names = {r.name for r in extra}
    return extra + [r for r in shipped if r.name not in names]


def classify(message: str, rules: Sequence[Rule]) -> tuple[str, str | None]:
    """(category, rule name) of a failure message; ("unknown", None) when no rule matches."""
    for rule in rules:
        if rule.pattern.search(message):
            return rule.category, rule.name
    return "unknown", None


@dataclass(frozen=True)
class Failure:
    """One recorded failure as the report sees it."""

    job: str
    host: str
    gpu: str | None
    at: datetime
    category: str
    message: str


@dataclass
class HostGroup:
    """The failures of one host in the window, with what else happened to it."""

    host: str
    failures: list[Failure]
    evidence: list[str] = field(default_factory=list)
    flagged: bool = False

    @property
    def jobs(self) -> int:
        return len({f.job for f in self.failures})

    @property
    def by_gpu(self) -> dict[str, int]:
        return dict(Counter(f.gpu or "?" for f in self.failures))

    @property
    def categories(self) -> dict[str, int]:
        return dict(Counter(f.category for f in self.failures))

    def line(self) -> str:
        """``gpu-07: 6 failures from 4 jobs, all on GPU 3, Xid 79 at 03:12, ...``."""
        n = len(self.failures)
        parts = [
            f"{self.host}: {n} failure{'s' if n != 1 else ''} from {self.jobs} "
            f"job{'s' if self.jobs != 1 else ''}"
        ]
        gpus = self.by_gpu
        if len(gpus) == 1 and "?" not in gpus:
            parts.append(f"all on GPU {next(iter(gpus))}")
        elif len(gpus) > 1:
            parts.append("GPUs " + ", ".join(f"{g} ({c})" for g, c in sorted(gpus.items())))
        return ", ".join(parts + self.evidence)


def group_failures(
    failures: Iterable[Failure],
    fleet_hosts: int,
    evidence: Mapping[str, list[str]] | None = None,
) -> list[HostGroup]:
    """Failures grouped by host (most first), flagged by the rule of the module docstring."""
    by_host: dict[str, list[Failure]] = {}
    for f in failures:
        by_host.setdefault(f.host, []).append(f)
    total = sum(len(v) for v in by_host.values())
    mean = total / max(1, fleet_hosts)
    groups = []
    for host, items in by_host.items():
        g = HostGroup(host, sorted(items, key=lambda f: f.at), list((evidence or {}).get(host, [])))
        g.flagged = (
            len(items) >= MIN_FAILURES and g.jobs >= MIN_JOBS and len(items) >= SHARE_FACTOR * mean
        )
        groups.append(g)
    return sorted(groups, key=lambda g: (-len(g.failures), g.host))


def rule_doc() -> dict[str, Any]:
    """The flag rule's thresholds (for --json output)."""
    return {"min_failures": MIN_FAILURES, "min_jobs": MIN_JOBS, "share_factor": SHARE_FACTOR}
