"""Xid policy: which ``NVRM: Xid`` codes are fatal, as a table the user can override.

The defaults (``data/xid_catalog.yaml``) follow NVIDIA's catalog as NVSentinel copies it.
Codes the table does not know are **non-fatal but flagged unknown**: a new driver brings new
codes faster than any table, and quarantining on every one of them would empty a fleet; the
``xid`` check warns on them so they show up, and a site that wants them fatal says so with
:meth:`XidPolicy.merged`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import yaml

from gpufleet.errors import ConfigError

_FIELDS = {"mnemonic", "action", "fatal", "description"}


@dataclass(frozen=True, slots=True)
class XidInfo:
    """One row of the catalog."""

    code: int
    mnemonic: str
    action: str
    fatal: bool
    description: str = ""
    known: bool = True  # False for codes the policy has no row for

    def describe(self) -> str:
        """``"Xid 79 (GPU_HAS_FALLEN_OFF_THE_BUS, RESTART_BM)"``."""
        return f"Xid {self.code} ({self.mnemonic}, {self.action})"


@dataclass(frozen=True, slots=True)
class XidPolicy:
    """Xid code -> :class:`XidInfo`; immutable, :meth:`merged` returns a new policy."""

    entries: Mapping[int, XidInfo] = field(default_factory=dict)

    @classmethod
    def load_default(cls) -> XidPolicy:
        """The packaged catalog."""
        text = resources.files("gpufleet.domain").joinpath("data/xid_catalog.yaml").read_text()
        return cls.from_yaml(text, source="xid_catalog.yaml")

    @classmethod
    def from_yaml(cls, text: str, *, source: str = "<xid policy>") -> XidPolicy:
        """Parse a catalog (``xids: [{code, mnemonic, action, fatal, description}]``)."""
        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{source}: invalid YAML: {exc}") from exc
        rows = data.get("xids") if isinstance(data, dict) else None
        if not isinstance(rows, list):
            raise ConfigError(f"{source}: expected a top-level 'xids' list")
        entries: dict[int, XidInfo] = {}
        for row in rows:
            if not isinstance(row, dict) or "code" not in row:
                raise ConfigError(f"{source}: each Xid row needs a 'code': {row!r}")
            code = _code(row["code"], source)
            entries[code] = _info(code, {k: v for k, v in row.items() if k != "code"}, source)
        return cls(entries)

    def merged(self, overrides: Mapping[int | str, bool | Mapping[str, Any]]) -> XidPolicy:
        """A copy with ``overrides`` applied: ``{109: False}`` flips the fatal flag,
        ``{200: {"mnemonic": ..., "action": ..., "fatal": True}}`` adds or edits a row."""
        entries = dict(self.entries)
        for raw_code, value in overrides.items():
            code = _code(raw_code, "xid overrides")
            base = entries.get(code) or self.lookup(code)
            if isinstance(value, bool):
                entries[code] = XidInfo(code, base.mnemonic, base.action, value, base.description)
            elif isinstance(value, Mapping):
                current = {
                    "mnemonic": base.mnemonic,
                    "action": base.action,
                    "fatal": base.fatal,
                    "description": base.description,
                }
                entries[code] = _info(code, {**current, **value}, "xid overrides")
            else:
                raise ConfigError(f"xid overrides: Xid {code}: expected true/false or a mapping")
        return XidPolicy(entries)

    def lookup(self, code: int) -> XidInfo:
        """The row for ``code``, or a non-fatal ``UNKNOWN`` row with ``known=False``."""
        info = self.entries.get(code)
        if info is None:
            return XidInfo(code, "UNKNOWN", "UNKNOWN", fatal=False, known=False)
        return info

    def is_fatal(self, code: int) -> bool:
        return self.lookup(code).fatal

    def is_known(self, code: int) -> bool:
        return code in self.entries


def _code(raw: object, source: str) -> int:
    # YAML and JSON configuration may give the code as a string key ("79").
    if isinstance(raw, bool):
        raise ConfigError(f"{source}: Xid code must be an integer, got {raw!r}")
    try:
        code = int(str(raw))
    except ValueError:
        raise ConfigError(f"{source}: Xid code must be an integer, got {raw!r}") from None
    if code <= 0:
        raise ConfigError(f"{source}: Xid code must be positive, got {code}")
    return code


def _info(code: int, row: Mapping[str, Any], source: str) -> XidInfo:
    unknown = set(row) - _FIELDS
    if unknown:
        raise ConfigError(f"{source}: Xid {code}: unknown field(s) {', '.join(sorted(unknown))}")
    fatal = row.get("fatal")
    if not isinstance(fatal, bool):
        raise ConfigError(f"{source}: Xid {code}: 'fatal' must be true or false")
    mnemonic = row.get("mnemonic") or "UNKNOWN"
    action = row.get("action") or "UNKNOWN"
    description = row.get("description") or ""
    if not all(isinstance(v, str) for v in (mnemonic, action, description)):
        raise ConfigError(f"{source}: Xid {code}: mnemonic, action, description must be text")
    return XidInfo(code, mnemonic, action, fatal, description)
