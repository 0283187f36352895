"""Ascend chip names -> the device plugin's device types and the scheduling values built on
them (pure).

The reference is the Ascend device plugin's own mapping, ``GetDeviceTypeByChipName`` in
Ascend/mind-cluster ``component/ascend-common/devmanager/common/utils.go`` (its patterns
``Pattern1980B = ^910B\\d`` and ``Pattern1980 = ^910B?`` in ``devmanager/common/constants.go``
of earlier releases): ``310P...`` -> Ascend310P, ``...310B...`` -> Ascend310B, ``...310...``
-> Ascend310, ``910B`` followed by a digit (``910B1``-``910B4``, the second generation, 64 GB
HBM) -> Ascend910B, and ``910`` / ``910A`` / a bare ``910B`` -> Ascend910: the *first*
generation, whose B bin prints its chip name as ``910B`` (32 GB HBM per die, like the 910A).
A bare ``910B`` therefore gets first-generation values, never ``module-910b-8``.
"""

from __future__ import annotations

import re

ASCEND910 = "Ascend910"
ASCEND910B = "Ascend910B"
ASCEND310 = "Ascend310"
ASCEND310B = "Ascend310B"
ASCEND310P = "Ascend310P"

_310P = re.compile(r"^310P")
_910B = re.compile(r"^910B\d")
_910 = re.compile(r"^910B?")


def chip_name(model: str) -> str:
    """``Ascend 910A`` (``npu-smi info -m``) / ``910A`` (the table) -> ``910A``."""
    return model.removeprefix("Ascend").strip().upper()


def device_type(model: str) -> str | None:
    """The device plugin's device type of a chip name (module doc); None if it has none."""
    name = chip_name(model)
    if _310P.match(name):
        return ASCEND310P
    if "310B" in name:
        return ASCEND310B
    if "310" in name:
        return ASCEND310
    if _910B.match(name):
        return ASCEND910B
    if _910.match(name):
        return ASCEND910
    return None


def family(model: str) -> str | None:
    """``910B3``/``910A``/``Ascend 910A`` -> ``910``; ``310P3`` -> ``310P``; ``310`` -> ``310``."""
    name = chip_name(model)
    if name.startswith("910"):
        return "910"
    if name.startswith("310P"):
        return "310P"
    if name.startswith("310"):
        return "310"
    return None


def resource_name(model: str) -> str | None:
    fam = family(model)
    return None if fam is None else f"huawei.com/Ascend{fam}"


def first_generation_910b(model: str) -> bool:
    """A first-generation 910 whose chip name prints as a bare ``910B``."""
    return chip_name(model) == "910B"


def accelerator_type(model: str, count: int) -> str | None:
    """Volcano's ``accelerator-type`` for a host with ``count`` chips of ``model``:
    ``module-910b-8``/``-16`` for the second generation, ``module`` (8) / ``half`` (4) for
    the first (a bare ``910B`` included); None where the convention is not known."""
    kind = device_type(model)
    if kind == ASCEND910B and count in (8, 16):
        return f"module-910b-{count}"
    if kind == ASCEND910 and count == 8:
        return "module"
    if kind == ASCEND910 and count == 4:
        return "half"
    return None
