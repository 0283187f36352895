"""Upgraders of stored fact snapshots, keyed by format version. Pure: dicts in, dicts out.

A snapshot is stored as the JSON of :class:`~gpufleet.domain.facts.HostFacts` with its
``facts_version``. When the facts layout changes (a field renamed, a meaning changed), the
version goes up and one upgrader is registered here: ``UPGRADERS[n]`` turns a version ``n``
snapshot into a version ``n + 1`` one. :func:`upgrade_facts` applies them in order, from the
stored version to the current one, before the model validates the data, so history written by
any earlier gpufleet stays readable. History is never rewritten: upgrades happen on read.

A snapshot without ``facts_version`` is :data:`LEGACY_FACTS_VERSION` (1). A version with no
upgrader on its way to the current one is refused (fail closed), never read as if current.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: What a snapshot without a ``facts_version`` is: the layout before "None vs []".
LEGACY_FACTS_VERSION = 1

#: Lists that version 1 stored as ``[]`` when their tool failed (see the facts docstring).
_NONE_IF_LEGACY_EMPTY = ("xids", "ib_ports", "pci_devices", "block_devices")

Upgrader = Callable[[dict[str, Any]], dict[str, Any]]


def _v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    """Version 1 did not tell "not collected" from "none": its empty lists become ``None``
    (fail closed: an old snapshot never vouches for "no Xid"); non-empty lists were complete."""
    return {k: (None if k in _NONE_IF_LEGACY_EMPTY and v == [] else v) for k, v in data.items()}


# What version 3 knew of accelerator vendors besides NVIDIA (PCI vendor id -> vendor as
# stored in ``accelerator_errors``) and of accelerator PCI classes; frozen here on purpose:
# history is what it was when version 3 was written.
_V3_OTHER_VENDORS = {"19e5": "huawei", "1002": "amd"}
_V3_ACCELERATOR_CLASSES = frozenset({"0300", "0302", "0380", "1200"})


def _v2_to_v3(data: dict[str, Any]) -> dict[str, Any]:
    """Version 3 adds the vendor-neutral accelerator section. Version 2 never ran a vendor
    tool besides nvidia-smi (its NVIDIA facts are kept as they are: ``nvidia_smi``): no
    records, and for each other accelerator vendor its ``lspci`` listed, an error saying the
    tool was not run, so an old snapshot never vouches for an NPU it did not read."""
    errors: dict[str, str] = {}
    for dev in data.get("pci_devices") or []:
        if not isinstance(dev, dict) or dev.get("class_id") not in _V3_ACCELERATOR_CLASSES:
            continue
        vendor = _V3_OTHER_VENDORS.get(str(dev.get("vendor_id")))
        if vendor is not None:
            errors[vendor] = "not collected (snapshot written before facts version 3)"
    return {**data, "accelerators": [], "accelerator_versions": {}, "accelerator_errors": errors}


#: ``UPGRADERS[n]``: a version ``n`` snapshot -> a version ``n + 1`` one.
UPGRADERS: dict[int, Upgrader] = {
    1: _v1_to_v2,
    2: _v2_to_v3,
}


def stored_version(data: dict[str, Any]) -> int:
    """The format version of a stored snapshot (``facts_version``; absent: legacy)."""
    version = data.get("facts_version", LEGACY_FACTS_VERSION)
    if isinstance(version, bool) or not isinstance(version, int):
        raise ValueError(f"facts_version {version!r} is not a whole number")
    return version


def upgrade_facts(
    data: dict[str, Any], target: int, upgraders: dict[int, Upgrader] | None = None
) -> dict[str, Any]:
    """``data`` (a stored snapshot) brought to format ``target``: the upgraders from its
    version up, in order, each result stamped with its new ``facts_version``. A snapshot
    already at (or past) ``target`` is returned unchanged. ValueError when an upgrader on the
    way is missing."""
    chain = UPGRADERS if upgraders is None else upgraders
    version = stored_version(data)
    out = data
    while version < target:
        step = chain.get(version)
        if step is None:
            raise ValueError(
                f"facts_version {version}: no upgrader to version {version + 1} "
                f"(this gpufleet reads facts up to version {target})"
            )
        out = {**step(dict(out)), "facts_version": version + 1}
        version += 1
    return out
