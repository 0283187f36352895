"""The Ascend fault catalogue, from the vendor's own data files (``data/``, ``PROVENANCE.md``).

* ``mind-cluster_faultCode.json``: the Ascend device plugin's NPU event ids by handling level
  (``NotHandleFaultCodes`` ... ``SeparateNPUCodes``); ``mind-cluster_rdma-plugin_fault_code.json``:
  the RoCE/DPU faults of the RDMA device plugin (``SubHealthFault``, ``SeparateDPU``);
* ``levels.yaml`` (gpufleet's): each level -> severity and recommended action;
* ``mind-cluster_kg-config.json``: FaultDiag's knowledge base, the cause and suggestion of an
  event id in Chinese and English (250 of its 1,050 faults are keyed by an event id), read
  only when a code's text is wanted (1.3 MB of JSON).

Codes are spelt as the device plugin lists them: upper-case hex without ``0x``
(``80E18005``; ``npu-smi info -t health`` prints ``8C03A000``, logs ``0x80e18005``), and five
9-digit ids (``200001002``). Nothing is read at import; each file once, on first use.
"""

from __future__ import annotations

import json
import re
from functools import cache
from importlib import resources
from typing import Any

from gpufleet.domain.fault_catalogue import FaultCatalogue, FaultText, levels_from_yaml
from gpufleet.errors import ConfigError

FAULT_CODES = "mind-cluster_faultCode.json"
RDMA_CODES = "mind-cluster_rdma-plugin_fault_code.json"
KNOWLEDGE = "mind-cluster_kg-config.json"
LEVELS = "levels.yaml"
_CODE = re.compile(r"^(?:0x)?([0-9a-f]{8}|[0-9]{9})$", re.IGNORECASE)


def _read(name: str) -> str:
    return resources.files("gpufleet.vendors.huawei").joinpath("data", name).read_text("utf-8")


def normalize(raw: str) -> str | None:
    """``0x80e18005`` -> ``80E18005``; None for what cannot be an Ascend event id."""
    m = _CODE.match(raw.strip())
    return m.group(1).upper() if m else None


@cache
def knowledge() -> dict[str, FaultText]:
    """Event id -> the knowledge base's text (bilingual cause and suggestion steps)."""
    doc = json.loads(_read(KNOWLEDGE)).get("knowledge-repository")
    if not isinstance(doc, dict):
        raise ConfigError(f"{KNOWLEDGE}: no 'knowledge-repository' mapping")
    out: dict[str, FaultText] = {}
    for key, entry in doc.items():
        code = normalize(key) if key.lower().startswith("0x") else None
        attr = entry.get("attribute") if isinstance(entry, dict) else None
        if code is None or not isinstance(attr, dict):
            continue  # symbolic faults (Comp_Network_Custom_01 ...) are not tool codes
        out[code] = FaultText(
            cause_en=str(attr.get("cause_en", "")).strip(),
            cause_zh=str(attr.get("cause_zh", "")).strip(),
            suggestion_en=_steps(attr.get("suggestion_en")),
            suggestion_zh=_steps(attr.get("suggestion_zh")),
        )
    return out


def _steps(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value.strip(),) if value.strip() else ()
    if isinstance(value, list):
        return tuple(str(s).strip() for s in value if str(s).strip())
    return ()


def _text(code: str) -> FaultText | None:
    return knowledge().get(code)


@cache
def catalogue() -> FaultCatalogue:
    """The shipped catalogue (cached; the knowledge base stays unread until a text is asked)."""
    levels = levels_from_yaml(_read(LEVELS), f"vendors/huawei/data/{LEVELS}")
    codes: dict[str, list[str]] = {}
    by_level = json.loads(_read(FAULT_CODES))
    if not isinstance(by_level, dict):
        raise ConfigError(f"{FAULT_CODES}: expected a mapping of levels")
    for level, ids in by_level.items():
        _add(codes, levels, level, ids, FAULT_CODES)
    rdma = json.loads(_read(RDMA_CODES)).get("faults")
    if not isinstance(rdma, list):
        raise ConfigError(f"{RDMA_CODES}: expected a 'faults' list")
    for fault in rdma:
        _add(codes, levels, str(fault.get("faultlevel")), [fault.get("faultcode")], RDMA_CODES)
    return FaultCatalogue(
        vendor="huawei",
        levels=levels,
        codes={c: tuple(dict.fromkeys(ls)) for c, ls in codes.items()},
        normalize=normalize,
        texts=_text,
        source=f"{FAULT_CODES}, {RDMA_CODES}",
    )


def _add(
    codes: dict[str, list[str]], levels: dict[str, Any], level: str, ids: Any, source: str
) -> None:
    if level not in levels:  # a level the vendor added: never silently dropped
        raise ConfigError(f"{source}: level {level!r} has no entry in {LEVELS}")
    if not isinstance(ids, list):
        raise ConfigError(f"{source}: {level}: expected a list of codes")
    for raw in ids:
        code = normalize(str(raw))
        if code is None:
            raise ConfigError(f"{source}: {level}: {raw!r} is not an event id")
        codes.setdefault(code, []).append(level)
