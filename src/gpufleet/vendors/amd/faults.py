"""The AMD Instinct fault catalogue, from the GPU operator's own data files (``data/``,
``PROVENANCE.md``).

* ``rocm-gpu-operator_remediation_default-configmap.yaml``: the operator's default mapping of
  24 node conditions (``AMDGPUHBMError`` ...) to a remediation: ``physicalActionNeeded`` and
  the field-service text (``notifyRemediationMessage``, English only), which becomes the
  suggestion;
* ``rocm-gpu-operator_npd-config-inband.yaml``: the Node Problem Detector rules binding AMD
  fault ids (AFIDs) to those conditions (``--afid=30`` -> ``AMDGPUHardwareAssertionHwa``), so
  ``AFID 30`` (``afid:30``, ``30``) finds its condition;
* ``levels.yaml`` (gpufleet's): ``physicalActionNeeded`` / ``noPhysicalAction`` -> severity
  and recommended action.

No AMD tool gpufleet reads prints these codes yet (rocm-smi's JSON has no health; there is no
real capture of ``amdgpuhealth``): the catalogue judges codes a reader or a site gives it.
Nothing is read at import; each file once, on first use.
"""

from __future__ import annotations

import json
import re
from functools import cache
from importlib import resources
from typing import Any

import yaml

from gpufleet.domain.fault_catalogue import FaultCatalogue, FaultText, levels_from_yaml
from gpufleet.errors import ConfigError

REMEDIATION = "rocm-gpu-operator_remediation_default-configmap.yaml"
NPD = "rocm-gpu-operator_npd-config-inband.yaml"
LEVELS = "levels.yaml"
PHYSICAL, NO_PHYSICAL = "physicalActionNeeded", "noPhysicalAction"
_CONDITION = re.compile(r"^AMDGPU[A-Za-z0-9]+$")
_AFID = re.compile(r"^(?:afid[ :=]?)?([0-9]{1,5})$", re.IGNORECASE)


#: libyaml's loader where PyYAML was built with it (24 kB of ConfigMap: 60 ms -> a few).
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _read(name: str) -> str:
    return resources.files("gpufleet.vendors.amd").joinpath("data", name).read_text("utf-8")


@cache
def afids() -> dict[str, str]:
    """AFID -> node condition, from the NPD rules (``--afid=N`` in a rule's args)."""
    doc = yaml.load(_read(NPD), Loader=_LOADER)
    try:
        monitor = json.loads(doc["data"]["custom-plugin-monitor.json"])
        rules = monitor["rules"]
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"{NPD}: no custom-plugin-monitor rules ({exc})") from None
    out: dict[str, str] = {}
    for rule in rules:
        for arg in rule.get("args", []):
            m = re.fullmatch(r"--afid=([0-9]+)", str(arg))
            if m:
                out[m.group(1)] = str(rule["condition"])
    return out


def normalize(raw: str) -> str | None:
    """A node condition as spelt, or the condition an AFID is bound to; None otherwise."""
    text = raw.strip()
    if _CONDITION.match(text):
        return text
    m = _AFID.match(text)
    if m:
        return afids().get(m.group(1).lstrip("0") or "0")
    return None


@cache
def _remediations() -> list[dict[str, Any]]:
    rows = yaml.load(_read(REMEDIATION), Loader=_LOADER)
    if not isinstance(rows, list):
        raise ConfigError(f"{REMEDIATION}: expected a list of node conditions")
    for row in rows:
        if not isinstance(row, dict) or not isinstance(row.get("nodeCondition"), str):
            raise ConfigError(f"{REMEDIATION}: an item without a nodeCondition: {row!r:.80}")
        if not isinstance(row.get("physicalActionNeeded"), bool):
            cond = row["nodeCondition"]
            raise ConfigError(f"{REMEDIATION}: {cond}: physicalActionNeeded is not true/false")
    return rows


def _text(code: str) -> FaultText | None:
    for row in _remediations():
        if row["nodeCondition"] == code:
            message = str(row.get("notifyRemediationMessage") or "").strip()
            return FaultText(suggestion_en=(message,) if message else ())
    return None


@cache
def catalogue() -> FaultCatalogue:
    """The shipped catalogue (cached)."""
    levels = levels_from_yaml(_read(LEVELS), f"vendors/amd/data/{LEVELS}")
    codes = {
        row["nodeCondition"]: (PHYSICAL if row["physicalActionNeeded"] else NO_PHYSICAL,)
        for row in _remediations()
    }
    return FaultCatalogue(
        vendor="amd",
        levels=levels,
        codes=codes,
        normalize=normalize,
        texts=_text,
        source=REMEDIATION,
    )
