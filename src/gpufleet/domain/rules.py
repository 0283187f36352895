"""Health rules: a versioned policy over inspection samples (``gpufleet inspect``).

The shipped policy is ``src/gpufleet/domain/data/health_rules.yaml``; a site overlay changes
rules by id or adds new ones (:meth:`RulePolicy.merged`). Evaluation is pure:
:func:`evaluate_host` reads one host's samples (oldest first, the newest being the sweep just
taken) and the fleet medians of that sweep (:func:`fleet_medians`, for the straggler rules) and
returns the findings. Nothing here reads a clock: windows are measured back from the newest
sample's time.

Not crying wolf: a rule fires only when its condition held in ``consecutive`` samples in a row,
never inside its ``grace`` after the host booted or the NVIDIA driver was (re)loaded (the
later of the two: :attr:`HostSample.settled_s`), never on hosts without the topology it
``requires`` (no NVLink rule on PCIe GPUs); Xid and counter rules count within a ``window``;
a firing rule drops the findings of the rules it ``clears`` on the same GPU/port.
"""

from __future__ import annotations

import operator
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from importlib import resources
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gpufleet.domain.preflight import XID_ACTIONS, Action
from gpufleet.domain.samples import (
    CLOCK_REASONS,
    EVENT_KINDS,
    FABRIC_CONDITIONS,
    GPU_METRICS,
    HOST_METRICS,
    OBSERVE_KINDS,
    PORT_METRICS,
    SCOPE_KINDS,
    DiskSample,
    GpuSample,
    HostSample,
    PortSample,
    ProbeFailure,
    XidSeen,
    same_pci,
)
from gpufleet.domain.xid import XidPolicy
from gpufleet.errors import ConfigError

__all__ = [
    "CLOCK_REASONS",
    "GPU_METRICS",
    "HOST_METRICS",
    "PORT_METRICS",
    "SCOPE_KINDS",
    "Action",
    "DiskSample",
    "Finding",
    "GpuSample",
    "HostSample",
    "PortSample",
    "ProbeFailure",
    "Rule",
    "RulePolicy",
    "Severity",
    "XidSeen",
    "evaluate_host",
    "fleet_medians",
    "same_boot",
    "same_pci",
]


class Severity(StrEnum):
    """How bad a finding is: ``critical`` takes the host out of new allocations."""

    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


# ------------------------------------------------------------------------------ policy

_OPS: dict[str, Callable[[float, float], bool]] = {
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
    "==": operator.eq,
    "!=": operator.ne,
}


class Rule(BaseModel):
    """One rule of the policy (see the comments in ``health_rules.yaml``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1, max_length=64, pattern=r"^[a-z0-9][a-z0-9-]*$")
    description: str = ""
    kind: Literal["threshold", "increase", "flag", "xid", "straggler", "observe", "device"]
    scope: Literal["gpu", "port", "disk", "host"] = "gpu"
    metric: str | None = None
    op: str = ">"
    value: float = 0.0
    window: float = Field(default=3600.0, gt=0)
    codes: tuple[int, ...] = ()
    count: int = Field(default=1, ge=1)
    ratio: float = Field(default=0.75, gt=0, le=1)
    load_pct: float = Field(default=50.0, ge=0, le=100)
    consecutive: int = Field(default=1, ge=1, le=100)
    grace: float = Field(default=0.0, ge=0)
    clears: tuple[str, ...] = ()
    requires: Literal["nvlink"] | None = None
    severity: Severity
    action: Action | None = None
    enabled: bool = True

    @model_validator(mode="after")
    def _check(self) -> Rule:
        if self.op not in _OPS:
            raise ValueError(f"op must be one of {' '.join(_OPS)}, not {self.op!r}")
        if self.kind == "device":  # a vendor plugin's fault (domain/device_health.py)
            from gpufleet.domain.device_health import device_rule_scope

            scope = device_rule_scope(self.metric, self.consecutive)
            if "scope" in self.model_fields_set and self.scope != scope:
                raise ValueError(f"a device rule on {self.metric} is about a {scope}")
            object.__setattr__(self, "scope", scope)
            return self
        if self.kind in ("xid", "observe"):
            if "scope" in self.model_fields_set and self.scope != "host":
                raise ValueError(f"an {self.kind} rule is about the host (scope: host)")
            object.__setattr__(self, "scope", "host")
        if self.kind not in SCOPE_KINDS[self.scope]:
            kinds = ", ".join(sorted(SCOPE_KINDS[self.scope]))
            raise ValueError(
                f"kind {self.kind} with scope {self.scope} cannot be evaluated "
                f"(scope {self.scope} takes: {kinds})"
            )
        if self.kind == "xid":
            if not self.codes:
                raise ValueError("an xid rule needs codes")
            return self
        if not self.metric:
            raise ValueError(f"a {self.kind} rule needs a metric")
        known: Iterable[str]
        if self.kind == "observe":
            known = OBSERVE_KINDS
        elif self.scope == "gpu":
            flags = CLOCK_REASONS | FABRIC_CONDITIONS
            known = GPU_METRICS | (flags if self.kind == "flag" else frozenset())
        elif self.scope == "port":
            known = PORT_METRICS
        elif self.scope == "disk":
            known = ("used_pct",)
        else:
            known = HOST_METRICS
        if self.metric not in known:
            raise ValueError(
                f"metric {self.metric!r} cannot be evaluated for kind {self.kind} scope "
                f"{self.scope} (known: {', '.join(sorted(known))})"
            )
        return self


@dataclass(frozen=True)
class RulePolicy:
    """The rules in force and the policy's version (shipped version, plus ``+site`` when an
    overlay changed it)."""

    version: str
    rules: tuple[Rule, ...]

    @classmethod
    def load_default(cls) -> RulePolicy:
        """The shipped policy."""
        text = resources.files("gpufleet.domain").joinpath("data/health_rules.yaml").read_text()
        return cls.from_yaml(text, source="health_rules.yaml")

    @classmethod
    def from_yaml(cls, text: str, *, source: str = "<health rules>") -> RulePolicy:
        """Read a complete policy (``version`` and ``rules``)."""
        doc = _load(text, source)
        rules = doc.get("rules")
        if not isinstance(rules, list):
            raise ConfigError(f"{source}: 'rules' must be a list")
        lines = _rule_lines(text)
        out = [_rule(r, source, i, lines) for i, r in enumerate(rules)]
        ids = [r.id for r in out]
        dup = sorted({i for i in ids if ids.count(i) > 1})
        if dup:
            raise ConfigError(f"{source}: rule id(s) defined twice: {', '.join(dup)}")
        policy = cls(str(doc.get("version", "unversioned")), tuple(out))
        policy.check_references(source)
        return policy

    def merged(self, text: str, *, source: str = "<overlay>") -> RulePolicy:
        """This policy with a site overlay applied: a rule with a known id changes only the
        fields the overlay gives, a new id adds a rule."""
        doc = _load(text, source)
        rules = doc.get("rules", [])
        if not isinstance(rules, list):
            raise ConfigError(f"{source}: 'rules' must be a list")
        by_id = {r.id: r for r in self.rules}
        order = [r.id for r in self.rules]
        lines = _rule_lines(text)
        for i, row in enumerate(rules):
            if not isinstance(row, dict) or not isinstance(row.get("id"), str):
                raise ConfigError(
                    f"{_where(source, i, lines)}: rules[{i}]: each rule needs an 'id'"
                )
            base = by_id.get(row["id"])
            if base is not None and base.kind in ("xid", "observe") and "scope" not in row:
                # a new kind re-derives its scope (an xid rule's forced "host" is not kept)
                dumped = base.model_dump(exclude_none=True, exclude={"scope"})
            else:
                dumped = base.model_dump(exclude_none=True) if base else {}
            merged = {**dumped, **row} if base else row
            by_id[row["id"]] = _rule(merged, source, i, lines)
            if base is None:
                order.append(row["id"])
        version = str(doc.get("version", f"{self.version}+site"))
        policy = RulePolicy(version, tuple(by_id[i] for i in order))
        policy.check_references(source)
        return policy

    def check_references(self, source: str) -> None:
        ids = {r.id for r in self.rules}
        for r in self.rules:
            missing = [c for c in r.clears if c not in ids]
            if missing:
                raise ConfigError(f"{source}: rule {r.id}: clears unknown rule(s) {missing}")

    def rule(self, rule_id: str) -> Rule:
        for r in self.rules:
            if r.id == rule_id:
                return r
        raise ConfigError(f"no health rule {rule_id!r}")

    @property
    def longest_window(self) -> timedelta:
        """How far back evaluation reads samples."""
        return timedelta(seconds=max((r.window for r in self.rules if r.enabled), default=0.0))

    @property
    def most_consecutive(self) -> int:
        return max((r.consecutive for r in self.rules if r.enabled), default=1)


def _load(text: str, source: str) -> dict[str, Any]:
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not YAML: {exc}") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise ConfigError(f"{source}: expected a mapping with 'version' and 'rules'")
    return doc


def _rule_lines(text: str) -> list[int]:
    """The 1-based line where each item of ``rules`` starts (empty when not composable)."""
    try:
        root = yaml.compose(text)
    except yaml.YAMLError:
        return []
    if not isinstance(root, yaml.MappingNode):
        return []
    for key, value in root.value:
        if getattr(key, "value", None) == "rules" and isinstance(value, yaml.SequenceNode):
            return [item.start_mark.line + 1 for item in value.value]
    return []


def _where(source: str, i: int, lines: Sequence[int]) -> str:
    return f"{source}:{lines[i]}" if i < len(lines) else source


def _rule(row: object, source: str, i: int, lines: Sequence[int] = ()) -> Rule:
    where_line = _where(source, i, lines)
    if not isinstance(row, dict):
        raise ConfigError(f"{where_line}: rules[{i}] must be a mapping")
    try:
        return Rule.model_validate(row)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "rule"
        msg = str(err["msg"]).removeprefix("Value error, ")
        raise ConfigError(f"{where_line}: rule {row.get('id', i)!r}: {where}: {msg}") from None


# ------------------------------------------------------------------------------ evaluation


@dataclass(frozen=True)
class Finding:
    """A rule that fired on a host (and GPU / port / path)."""

    rule: str
    severity: Severity
    action: Action
    message: str
    gpu_index: int | None = None
    gpu_uuid: str | None = None
    subject: str | None = None  # port or path
    #: more for the alarm's data (a vendor's fault codes with their text); not part of the key
    data: Mapping[str, Any] | None = field(default=None, compare=False)

    @property
    def key(self) -> tuple[str, int | None, str | None]:
        """What makes two findings the same (one alarm each)."""
        return self.rule, self.gpu_index, self.subject


def fleet_medians(
    samples: Iterable[HostSample], rules: Sequence[Rule]
) -> dict[tuple[str, str], float]:
    """Per (GPU model, metric) median over the GPUs under load, for the straggler rules."""
    wanted = {(r.metric or "", r.load_pct) for r in rules if r.kind == "straggler" and r.enabled}
    values: dict[tuple[str, str], list[float]] = {}
    for s in samples:
        for g in s.gpus or ():
            for metric, load in wanted:
                v = getattr(g, metric, None)
                if g.model and v is not None and (g.utilization_gpu_pct or 0) >= load:
                    values.setdefault((g.model, metric), []).append(float(v))
    return {k: statistics.median(v) for k, v in values.items() if v}


def _gpu_value(g: GpuSample, metric: str) -> float | bool | None:
    if metric in CLOCK_REASONS or metric in FABRIC_CONDITIONS:
        return metric in g.reasons
    value = getattr(g, metric)
    return value if isinstance(value, bool | int | float) or value is None else None


def _gpu_holds(
    rule: Rule, g: GpuSample, medians: Mapping[tuple[str, str], float]
) -> tuple[bool, str]:
    metric = rule.metric or ""
    if rule.kind == "flag":
        v = _gpu_value(g, metric)
        return v is True, f"{metric} set"
    if rule.kind == "threshold":
        v = _gpu_value(g, metric)
        if v is None or isinstance(v, bool):
            return False, ""
        return _OPS[rule.op](float(v), rule.value), f"{metric} {v:g} {rule.op} {rule.value:g}"
    if rule.kind == "straggler":
        v = _gpu_value(g, metric)
        median = medians.get((g.model or "", metric))
        if v is None or isinstance(v, bool) or median is None or median <= 0:
            return False, ""
        if (g.utilization_gpu_pct or 0) < rule.load_pct:
            return False, ""
        return float(v) < rule.ratio * median, (
            f"{metric} {v:g} under load, fleet median {median:g} for {g.model}"
        )
    return False, ""


def _gpu_findings(
    rule: Rule, history: Sequence[HostSample], medians: Mapping[tuple[str, str], float]
) -> list[Finding]:
    latest = history[-1]
    out: list[Finding] = []
    for g in latest.gpus or ():
        if rule.kind == "increase":

            def read(s: HostSample, i: int = g.index) -> float | None:
                return _gpu_counter(s, i, rule)

            hit, why = _increase(rule, history, read)
        else:
            hit, why = _gpu_holds(rule, g, medians)
            if hit and rule.consecutive > 1:
                before = [
                    next((x for x in s.gpus or () if x.index == g.index), None)
                    for s in history[-rule.consecutive : -1]
                ]
                hit = len(before) == rule.consecutive - 1 and all(
                    x is not None and _gpu_holds(rule, x, medians)[0] for x in before
                )
                why += f" ({rule.consecutive} sweeps in a row)"
        if hit:
            out.append(_finding(rule, f"GPU {g.index}: {why}", gpu=g))
    return out


def _gpu_counter(s: HostSample, index: int, rule: Rule) -> float | None:
    g = next((x for x in s.gpus or () if x.index == index), None)
    v = _gpu_value(g, rule.metric or "") if g is not None else None
    return None if v is None or isinstance(v, bool) else float(v)


def _increase(
    rule: Rule, history: Sequence[HostSample], read: Callable[[HostSample], float | None]
) -> tuple[bool, str]:
    since = history[-1].at - timedelta(seconds=rule.window)
    values = [v for s in history if s.at >= since and (v := read(s)) is not None]
    if len(values) < 2:
        return False, ""
    grew = values[-1] - values[0] if values[-1] >= values[0] else values[-1]  # counter reset
    hit = _OPS[">"](grew, rule.value)
    return hit, f"{rule.metric} +{grew:g} in {rule.window:g} s"


def _port_findings(rule: Rule, history: Sequence[HostSample]) -> list[Finding]:
    out: list[Finding] = []
    metric = rule.metric or ""
    for p in history[-1].ports:

        def read(s: HostSample, name: str = p.name) -> float | None:
            q = next((x for x in s.ports if x.name == name), None)
            v = q.counters.get(metric) if q is not None else None
            return None if v is None else float(v)

        if rule.kind == "increase":
            hit, why = _increase(rule, history, read)
        else:
            v = read(history[-1])
            hit = v is not None and _OPS[rule.op](v, rule.value)
            why = f"{metric} {v:g}" if v is not None else ""
        if hit:
            out.append(_finding(rule, f"port {p.name}: {why}", subject=p.name))
    return out


def _disk_findings(rule: Rule, history: Sequence[HostSample]) -> list[Finding]:
    return [
        _finding(rule, f"{d.path} {d.used_pct:.0f}% used", subject=d.path)
        for d in history[-1].disks
        if _OPS[rule.op](d.used_pct, rule.value)
    ]


def _xid_findings(rule: Rule, history: Sequence[HostSample], xids: XidPolicy) -> list[Finding]:
    latest = history[-1]
    since = latest.at - timedelta(seconds=rule.window)
    # Faults belong to a boot (issue 24 item 4): an Xid seen in an earlier boot is history.
    seen = [
        x
        for s in history
        if s.at >= since and same_boot(s, latest)
        for x in s.xids
        if x.code in rule.codes
    ]
    if len(seen) < rule.count:
        return []
    # One finding per GPU the lines name (a line whose GPU is unknown: the host).
    by_gpu: dict[int | None, list[XidSeen]] = {}
    gpus = latest.gpus or ()
    for x in seen:
        g = next((g for g in gpus if same_pci(x.pci, g.pci_bus_id)), None)
        by_gpu.setdefault(g.index if g else None, []).append(x)
    out: list[Finding] = []
    for index, lines in by_gpu.items():
        if len(lines) < rule.count and len(by_gpu) > 1:
            continue
        codes = sorted({x.code for x in lines})
        action = rule.action or max(
            (XID_ACTIONS.get(xids.lookup(c).action, Action.ESCALATE) for c in codes),
            key=list(Action).index,
        )
        info = ", ".join(xids.lookup(c).describe() for c in codes)
        where = f"GPU {index}: " if index is not None else ""
        gpu = next((g for g in gpus if g.index == index), None)
        out.append(
            _finding(
                rule,
                f"{where}{len(lines)} x {info} in {rule.window:g} s",
                gpu=gpu,
                action=action,
                gpu_index=index,
            )
        )
    return out


def _finding(
    rule: Rule,
    message: str,
    *,
    gpu: GpuSample | None = None,
    subject: str | None = None,
    action: Action | None = None,
    gpu_index: int | None = None,
) -> Finding:
    return Finding(
        rule=rule.id,
        severity=rule.severity,
        action=action or rule.action or Action.NONE,
        message=f"{rule.id}: {message}",
        gpu_index=gpu.index if gpu is not None else gpu_index,
        gpu_uuid=gpu.uuid if gpu is not None else None,
        subject=subject,
    )


def evaluate_host(
    policy: RulePolicy,
    history: Sequence[HostSample],
    medians: Mapping[tuple[str, str], float],
    xids: XidPolicy,
) -> list[Finding]:
    """The findings of ``policy`` on one host's ``history`` (oldest first, newest = now)."""
    if not history:
        return []
    latest = history[-1]
    found: list[Finding] = []
    cleared: set[tuple[str, int | None, str | None]] = set()
    for rule in policy.rules:
        if not rule.enabled:
            continue
        if rule.requires == "nvlink" and not latest.nvlink:
            continue  # topology-aware: no NVLink rule on PCIe GPUs
        settled = latest.settled_s
        if rule.grace and settled is not None and settled < rule.grace:
            continue  # links still training after boot / driver load
        found += _rule_findings(rule, history, medians, xids)
        if rule.clears:
            # A cause seen once already explains its symptoms (a power brake, the slow
            # clocks), even before it has been seen often enough to fire itself.
            now = rule.model_copy(update={"consecutive": 1})
            for f in _rule_findings(now, history, medians, xids):
                cleared |= {(other, f.gpu_index, f.subject) for other in rule.clears}
    return [f for f in found if f.key not in cleared]


def same_boot(a: HostSample, b: HostSample) -> bool:
    """True unless both samples know their boot and the boots differ."""
    return a.boot_id is None or b.boot_id is None or a.boot_id == b.boot_id


def _host_holds(rule: Rule, s: HostSample) -> tuple[bool, str]:
    if rule.kind == "observe":
        f = s.failed(rule.metric or "")
        return f is not None, f.detail if f is not None else ""
    v = s.gpus_missing if rule.metric == "gpus_missing" else None
    if v is None:
        return False, ""
    why = f"{rule.metric} {v:g} ({len(s.gpus or ())} of {s.expected_gpus} GPUs answer)"
    return _OPS[rule.op](float(v), rule.value), why


def _host_findings(rule: Rule, history: Sequence[HostSample]) -> list[Finding]:
    """A host-scope rule (``observe`` or a host threshold) over the last ``consecutive``
    samples, all of the current boot."""
    latest = history[-1]
    if rule.kind == "observe" and rule.metric in EVENT_KINDS:
        since = latest.at - timedelta(seconds=rule.window)
        seen = [s for s in history if s.at >= since and same_boot(s, latest)]
        hits = [why for s in seen for hit, why in [_host_holds(rule, s)] if hit]
        if len(hits) < rule.count:
            return []
        return [_finding(rule, f"{hits[-1]} ({len(hits)} in {rule.window:g} s)")]
    hit, why = _host_holds(rule, latest)
    if not hit:
        return []
    if rule.consecutive > 1:
        before = history[-rule.consecutive : -1]
        if len(before) < rule.consecutive - 1 or not all(_host_holds(rule, s)[0] for s in before):
            return []
        why += f" ({rule.consecutive} sweeps in a row)"
    return [_finding(rule, why)]


def _rule_findings(
    rule: Rule,
    history: Sequence[HostSample],
    medians: Mapping[tuple[str, str], float],
    xids: XidPolicy,
) -> list[Finding]:
    latest = history[-1]
    if rule.kind == "device":
        return []  # judged on the sweep's vendor faults (device_health.device_findings)
    if rule.kind == "xid":
        return _xid_findings(rule, history, xids)
    if rule.scope == "gpu":
        return _gpu_findings(rule, history, medians) if latest.gpus is not None else []
    if rule.scope == "port":
        return _port_findings(rule, history)
    if rule.scope == "disk":
        return _disk_findings(rule, history)
    return _host_findings(rule, history)
