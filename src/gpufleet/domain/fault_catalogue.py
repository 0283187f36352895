"""Vendor fault catalogues as data (issue 28 item 3): a vendor's own error codes, the handling
level the vendor gives each, mapped onto gpufleet's recommended-action ladder, with the vendor's
cause and suggestion text (Chinese and English where the vendor has both).

A vendor plugin ships its catalogue as data files in ``vendors/<name>/data`` (Huawei: the
Ascend device plugin's ``faultCode.json`` levels and the FaultDiag knowledge base; AMD: the
GPU operator's remediation ConfigMap and its Node Problem Detector AFIDs; provenance in each
``data/PROVENANCE.md``) and exposes it as ``VendorPlugin.faults``, a loader called on first
use only (the JSON is never read at import: ``gpufleet --help`` pays nothing for it).

A catalogue answers :meth:`FaultCatalogue.lookup` with a :class:`FaultEntry` (its level, a
:class:`~gpufleet.domain.rules.Severity` and an :class:`~gpufleet.domain.preflight.Action`), or
None for a code it does not know: the caller decides what an unknown code means
(:func:`gpufleet.domain.device_health.device_findings` fails closed to the policy's device rule,
as if the tool had given no code). An operator overlay (``GPUFLEET_FAULT_CATALOGUE``, read by
:func:`with_overlay`) changes a code's level, severity or action, or adds a code::

    huawei:
      "80E18005": {action: reboot}              # one field changed, the rest kept
      "8C03A000": {level: SeparateNPUCodes}     # another level: its severity and action
    amd:
      AMDGPUHBMError: {severity: warning, action: none}

Anything the overlay says that cannot be applied is refused with the file, line and code.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import yaml

from gpufleet.domain.preflight import Action
from gpufleet.domain.rules import Severity
from gpufleet.errors import ConfigError

#: Severity, mildest first (a code in two levels takes the worse one).
SEVERITY_ORDER: tuple[Severity, ...] = (Severity.INFO, Severity.WARNING, Severity.CRITICAL)
ACTION_ORDER: tuple[Action, ...] = tuple(Action)
_FIELDS = frozenset({"level", "severity", "action"})


def rank(severity: Severity, action: Action) -> tuple[int, int]:
    """How bad a (severity, action) is: severity first, then the ladder's rung."""
    return SEVERITY_ORDER.index(severity), ACTION_ORDER.index(action)


@dataclass(frozen=True, slots=True)
class Level:
    """A vendor handling level and what gpufleet does about it (``means``: for people)."""

    name: str
    severity: Severity
    action: Action
    means: str = ""


@dataclass(frozen=True, slots=True)
class FaultText:
    """The vendor's own words about a code (empty where the vendor has none)."""

    cause_en: str = ""
    cause_zh: str = ""
    suggestion_en: tuple[str, ...] = ()
    suggestion_zh: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class FaultEntry:
    """One code as the catalogue (and the overlay) judge it."""

    vendor: str
    code: str
    level: str
    severity: Severity
    action: Action
    text: FaultText = field(default_factory=FaultText)
    source: str = ""  # the file that decided (the vendor's data file, or the overlay:line)

    def as_data(self) -> dict[str, Any]:
        """The entry for an alarm's ``data`` (JSON)."""
        return {
            "code": self.code,
            "level": self.level,
            "severity": self.severity.value,
            "action": self.action.value,
            "cause_en": self.text.cause_en,
            "cause_zh": self.text.cause_zh,
            "suggestion_en": list(self.text.suggestion_en),
            "suggestion_zh": list(self.text.suggestion_zh),
            "source": self.source,
        }

    def describe(self) -> str:
        """``8C03A000 (RestartNPUCodes -> reset_gpu): cause / 原因. Suggestion: ... / ...``."""
        head = f"{self.code} ({self.level} -> {self.action.value})"
        cause = " / ".join(c for c in (self.text.cause_en, self.text.cause_zh) if c)
        steps = [" ".join(s.strip() for s in x if s.strip()) for x in
                 (self.text.suggestion_en, self.text.suggestion_zh)]
        suggestion = " / ".join(s for s in steps if s)
        out = f"{head}: {cause}" if cause else head
        return f"{out}. Suggestion: {suggestion}" if suggestion else out


@dataclass(frozen=True)
class FaultCatalogue:
    """A vendor's codes -> handling level, the levels -> severity and action, the vendor's
    text per code (``texts``: a lookup, so a large knowledge base is read only when a code is
    shown), ``normalize`` (the code as the catalogue spells it, or None when it cannot be one
    of this vendor's codes) and per-code overrides from an overlay."""

    vendor: str
    levels: Mapping[str, Level]
    codes: Mapping[str, tuple[str, ...]]  # code -> its levels, as the vendor lists them
    normalize: Callable[[str], str | None]
    texts: Callable[[str], FaultText | None] = lambda _code: None
    source: str = ""
    overrides: Mapping[str, FaultEntry] = field(default_factory=dict)

    def lookup(self, raw: str) -> FaultEntry | None:
        """The entry for a code as a tool prints it; None when the catalogue does not know it.
        A code the vendor lists in two levels takes the worse (``A2301001``: RestartBusiness
        and SeparateNPU -> SeparateNPU)."""
        code = self.normalize(raw)
        if code is None:
            return None
        if code in self.overrides:
            return self.overrides[code]
        names = self.codes.get(code)
        if not names:
            return None
        worst = max((self.levels[n] for n in names), key=lambda lv: rank(lv.severity, lv.action))
        text = self.texts(code) or FaultText()
        return FaultEntry(
            self.vendor, code, worst.name, worst.severity, worst.action, text, self.source
        )

    def __len__(self) -> int:
        return len(set(self.codes) | set(self.overrides))


def levels_from_yaml(text: str, source: str) -> dict[str, Level]:
    """A plugin's ``levels.yaml`` (``levels: {Name: {severity, action, means}}``)."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not YAML: {exc}") from None
    rows = doc.get("levels") if isinstance(doc, dict) else None
    if not isinstance(rows, dict) or not rows:
        raise ConfigError(f"{source}: expected a 'levels' mapping")
    out: dict[str, Level] = {}
    for name, row in rows.items():
        if not isinstance(row, dict) or set(row) - {"severity", "action", "means"}:
            raise ConfigError(f"{source}: level {name}: expected {{severity, action, means}}")
        sev = _choice(row, "severity", Severity, source, "level", str(name))
        act = _choice(row, "action", Action, source, "level", str(name))
        if sev is None or act is None:
            raise ConfigError(f"{source}: level {name}: needs a severity and an action")
        out[str(name)] = Level(str(name), sev, act, str(row.get("means", "")))
    return out


# --------------------------------------------------------------------------- overlay


def _lines(text: str, source: str) -> yaml.Node | None:
    try:
        return yaml.compose(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not YAML: {exc}") from None


def _value(node: yaml.Node) -> Any:
    return yaml.SafeLoader("").construct_object(node, deep=True)


def with_overlay(
    catalogues: Mapping[str, FaultCatalogue], text: str, *, source: str = "<fault overlay>"
) -> dict[str, FaultCatalogue]:
    """``catalogues`` (vendor -> catalogue) with an operator overlay applied (module doc).

    Refused (:class:`~gpufleet.errors.ConfigError` naming ``source:line`` and the code): a
    vendor without a catalogue, a code that is not quoted text or cannot be the vendor's code,
    an unknown field, a level the vendor does not have, a severity or action gpufleet does
    not know, a new code without a level or both a severity and an action, a code twice."""
    root = _lines(text, source)
    out = dict(catalogues)
    if root is None:
        return out
    if not isinstance(root, yaml.MappingNode):
        raise ConfigError(f"{source}:{root.start_mark.line + 1}: expected vendor: {{code: ...}}")
    for vkey, vnode in root.value:
        vendor = _value(vkey)
        where = f"{source}:{vkey.start_mark.line + 1}"
        if vendor not in out:
            known = ", ".join(sorted(out)) or "none"
            raise ConfigError(f"{where}: no fault catalogue for vendor {vendor!r} (known: {known})")
        if not isinstance(vnode, yaml.MappingNode):
            raise ConfigError(f"{where}: {vendor}: expected a mapping of codes")
        cat = out[vendor]
        overrides = dict(cat.overrides)
        seen: dict[str, str] = {}
        for ckey, cnode in vnode.value:
            entry = _override(cat, ckey, cnode, source)
            if entry.code in seen:
                raise ConfigError(
                    f"{entry.source}: {vendor} code {entry.code} given twice (first at "
                    f"{seen[entry.code]})"
                )
            seen[entry.code] = entry.source
            overrides[entry.code] = entry
        out[vendor] = replace(cat, overrides=overrides)
    return out


def _override(cat: FaultCatalogue, ckey: yaml.Node, cnode: yaml.Node, source: str) -> FaultEntry:
    line = ckey.start_mark.line + 1
    where = f"{source}:{line}"
    raw = _value(ckey)
    if not isinstance(ckey, yaml.ScalarNode) or not isinstance(raw, str):
        written = getattr(ckey, "value", raw)
        raise ConfigError(
            f"{where}: {cat.vendor} code {written}: quote the code (YAML reads it as the "
            f"{type(raw).__name__} {raw!r}: a leading 0 is octal)"
        )
    code = cat.normalize(raw)
    if code is None:
        raise ConfigError(f"{where}: {cat.vendor} code {raw!r}: not a {cat.vendor} fault code")
    row = _value(cnode)
    if not isinstance(row, dict) or not row:
        raise ConfigError(f"{where}: {cat.vendor} code {code}: expected {{level|severity|action}}")
    unknown = set(row) - _FIELDS
    if unknown:
        raise ConfigError(
            f"{where}: {cat.vendor} code {code}: unknown field(s) {', '.join(sorted(unknown))} "
            f"(known: {', '.join(sorted(_FIELDS))})"
        )
    base = cat.lookup(code)
    level_name = row.get("level", base.level if base else None)
    if level_name is None and not {"severity", "action"} <= set(row):
        raise ConfigError(
            f"{where}: {cat.vendor} code {code} is not in the catalogue: give its level, or "
            "both severity and action"
        )
    level = cat.levels.get(str(level_name)) if level_name is not None else None
    if "level" in row and level is None:
        known = ", ".join(cat.levels)
        raise ConfigError(
            f"{where}: {cat.vendor} code {code}: no level {row['level']!r} (known: {known})"
        )
    severity = _choice(row, "severity", Severity, where, cat.vendor, code)
    action = _choice(row, "action", Action, where, cat.vendor, code)
    if level is not None and "level" in row:  # a new level brings its severity and action
        sev, act = level.severity, level.action
    elif base is not None:
        sev, act = base.severity, base.action
    else:
        sev, act = Severity.CRITICAL, Action.ESCALATE  # both given (checked above)
    return FaultEntry(
        cat.vendor,
        code,
        str(level_name) if level_name is not None else "site",
        severity or sev,
        action or act,
        base.text if base is not None else (cat.texts(code) or FaultText()),
        where,
    )


def _choice(
    row: Mapping[str, Any], key: str, enum: Any, where: str, vendor: str, code: str
) -> Any:
    if key not in row:
        return None
    try:
        return enum(row[key])
    except ValueError:
        known = ", ".join(e.value for e in enum)
        raise ConfigError(
            f"{where}: {vendor} code {code}: {key} {row[key]!r} is not one of {known}"
        ) from None


def worst(entries: Sequence[FaultEntry]) -> FaultEntry | None:
    """The entry that decides for several codes of one device (None for none)."""
    return max(entries, key=lambda e: rank(e.severity, e.action), default=None)


@dataclass(frozen=True, slots=True)
class CodesVerdict:
    """What a device's error codes come to: the worst severity and action (the catalogue's
    entries, and ``fallback`` when a code is unknown or none is known), the known entries
    worst first, the codes the catalogue does not know."""

    severity: Severity
    action: Action
    found: tuple[FaultEntry, ...]
    unknown: tuple[str, ...]


def judge_codes(
    catalogue: FaultCatalogue, codes: Sequence[str], fallback: tuple[Severity, Action]
) -> CodesVerdict:
    """The verdict on one device's ``codes`` (the inspection's device findings and the
    validation's ``accelerator_health`` both judge by it): the worst code decides; an unknown
    code counts as ``fallback`` (the device's health as its tool states it), so an unknown
    code never makes a device look better than its tool says it is."""
    found: list[FaultEntry] = []
    unknown: list[str] = []
    for code in dict.fromkeys(codes):
        entry = catalogue.lookup(code)
        if entry is None:
            unknown.append(code)
        else:
            found.append(entry)
    verdicts = [(e.severity, e.action) for e in found]
    if unknown or not found:
        verdicts.append(fallback)
    severity, action = max(verdicts, key=lambda v: rank(*v))
    found.sort(key=lambda e: rank(e.severity, e.action), reverse=True)
    return CodesVerdict(severity, action, tuple(found), tuple(unknown))
