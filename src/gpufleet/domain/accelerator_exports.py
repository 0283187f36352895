"""How a mixed fleet's accelerators show outside gpufleet (issue 15): Kubernetes labels and
extended resources, Slurm GRES, Ansible groups with their versions, per-vendor/model counts.

Pure. What a vendor's own conventions are (its Kubernetes labels, its extended resource, the
name of its GRES and its device files, the name of its runtime) is not written here: each
vendor plugin declares them as a :class:`VendorExport` (:mod:`gpufleet.domain.vendors`), the
service hands them in (:data:`gpufleet.service.hosts.vendor_exports.EXPORTS`). This module only
applies them, the same way for every vendor:

* labels: gpufleet's own ``gpufleet.io/accelerator.{vendor,model,count}`` on every host, then
  the vendor's labels (Ascend device plugin / Volcano, AMD node labeller) beside them, every
  value through :func:`gpufleet.domain.labels.sanitize_label_value`;
* Slurm: one GRES per vendor on a node, ``<gres name>:<model>:<count>`` (``npu:910b3:8``,
  ``gpu:mi250:2``), the model as :func:`short_model` gives it;
* Ansible: one group per vendor and model (:func:`gpufleet.domain.accelerators.inventory_group`:
  ``npu_910b``, ``gpu_mi250``), whose variables are the versions every host of the group
  reports alike (driver, firmware, runtime: CANN, ROCm, CUDA).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpufleet.domain.accelerators import (
    UNKNOWN_MODEL,
    Accelerator,
    AcceleratorInventory,
    SoftwareVersions,
    Vendor,
    inventory_group,
)
from gpufleet.domain.labels import PREFIX, sanitize_label_value
from gpufleet.domain.slurm import Gres, sanitize_feature

#: gpufleet's own accelerator labels: ``<LABEL_PREFIX>.vendor`` / ``.model`` / ``.count``.
LABEL_PREFIX = f"{PREFIX}/accelerator"
#: The value of ``.vendor`` / ``.model`` on a host carrying several.
MIXED = "mixed"


def _none(_: AcceleratorInventory) -> None:
    return None


def _no_labels(_: AcceleratorInventory) -> dict[str, str]:
    return {}


@dataclass(frozen=True)
class VendorExport:
    """A vendor's conventions as the exports need them (the ``exports`` of its
    :class:`~gpufleet.domain.vendors.VendorPlugin`).

    ``labels``: the node labels in the vendor's own conventions (empty for NVIDIA, whose GFD
    labels :func:`gpufleet.domain.labels.derive_labels` writes); ``resource``: the extended
    resource its device plugin advertises for that inventory (None: unknown model);
    ``gres_name``: Slurm's GRES name (``gpu``, ``npu``); ``gres_files``: gres.conf ``File=``
    for the inventory (None: left to Slurm); ``runtime``: the name of its runtime stack
    (``cuda``, ``cann``, ``rocm``) for the Ansible variables; ``gres_type``: the GRES type
    where the vendor's convention is not the :func:`short_model` (None: it is).
    """

    labels: Callable[[AcceleratorInventory], Mapping[str, str]] = _no_labels
    resource: Callable[[AcceleratorInventory], str | None] = _none
    gres_name: str = "gpu"
    gres_files: Callable[[AcceleratorInventory], str | None] = _none
    runtime: str | None = None
    gres_type: Callable[[AcceleratorInventory], str | None] | None = None


Exports = Mapping[Vendor, VendorExport]


def short_model(model: str | None) -> str | None:
    """The model as schedulers and groups name it, lower case: ``NVIDIA H100 80GB HBM3`` ->
    ``h100``, ``910B3`` -> ``910b3``, ``INSTINCT MI250`` -> ``mi250``, ``Radeon Instinct MI50
    32GB`` -> ``mi50``; None when the tool named no model."""
    from gpufleet.domain.ansible import gpu_model  # the facts model: not for `labels HOST`

    if not model or model == UNKNOWN_MODEL:
        return None
    return gpu_model(model)


def _present(inventories: Iterable[AcceleratorInventory]) -> list[AcceleratorInventory]:
    return [inv for inv in inventories if inv.count]


# --------------------------------------------------------------------------- Kubernetes


def own_accelerator_labels(inventories: Sequence[AcceleratorInventory]) -> dict[str, str]:
    """gpufleet's own accelerator labels (vendor-neutral: the domain writes them with the
    others, :func:`gpufleet.domain.labels.derive_labels`): ``gpufleet.io/accelerator.vendor``
    (``nvidia``, ``huawei``, ``amd``; ``mixed`` for a host with several), ``.model``
    (:func:`short_model`; ``mixed`` for several models) and ``.count`` (every accelerator the
    tools report); none for a host without accelerators."""
    present = _present(inventories)
    if not present:
        return {}
    out: dict[str, str] = {}
    vendors = {inv.vendor.value for inv in present}
    out[f"{LABEL_PREFIX}.vendor"] = vendors.pop() if len(vendors) == 1 else MIXED
    models = {short_model(m) for inv in present for m in inv.models()}
    if len(models) == 1 and None not in models:
        out[f"{LABEL_PREFIX}.model"] = str(models.pop())
    elif len(models) > 1:
        out[f"{LABEL_PREFIX}.model"] = MIXED
    out[f"{LABEL_PREFIX}.count"] = str(sum(inv.count for inv in present))
    return {k: sanitize_label_value(v) for k, v in out.items()}


def vendor_labels(
    inventories: Sequence[AcceleratorInventory], exports: Exports
) -> dict[str, str]:
    """Each vendor's own labels (Ascend device plugin / Volcano, AMD node labeller), from
    its export (the service's, which knows the plugins); sanitised."""
    out: dict[str, str] = {}
    for inv in _present(inventories):
        export = exports.get(inv.vendor)
        if export is not None:
            out.update(export.labels(inv))
    return {k: sanitize_label_value(v) for k, v in out.items()}


def accelerator_labels(
    inventories: Sequence[AcceleratorInventory], exports: Exports
) -> dict[str, str]:
    """gpufleet's accelerator labels, then each vendor's own (sanitised, unknown left out)."""
    return own_accelerator_labels(inventories) | vendor_labels(inventories, exports)


def vendor_label_keys(
    inventories: Sequence[AcceleratorInventory], exports: Exports
) -> frozenset[str]:
    """The keys of the vendors' own labels on this host (not gpufleet's, not NVIDIA's GFD
    ones): the keys a k8s sync owns when it manages vendor labels."""
    keys: set[str] = set()
    for inv in _present(inventories):
        export = exports.get(inv.vendor)
        if export is not None:
            keys.update(export.labels(inv))
    return frozenset(keys)


def extended_resources(
    inventories: Sequence[AcceleratorInventory], exports: Exports
) -> dict[str, int]:
    """Extended resource -> accelerators the host has of it (``huawei.com/Ascend910: 8``,
    ``amd.com/gpu: 2``, ``nvidia.com/gpu: 8``); vendors without a known resource left out."""
    out: Counter[str] = Counter()
    for inv in _present(inventories):
        export = exports.get(inv.vendor)
        name = export.resource(inv) if export is not None else None
        if name:
            out[name] += inv.count
    return dict(out)


# --------------------------------------------------------------------------- Slurm


def gres_of(
    inventories: Sequence[AcceleratorInventory],
    exports: Exports,
    *,
    skip: Iterable[Vendor] = (),
) -> list[Gres]:
    """The GRES of a host's accelerators, one per vendor (vendor order), for the vendors with
    an export and not in ``skip`` (the caller writes NVIDIA's its own way). The type is the
    :func:`short_model` in Slurm's feature characters when the vendor's accelerators are all
    one model; none otherwise (a count alone is still schedulable)."""
    skipped = set(skip)
    out: list[Gres] = []
    for inv in _present(inventories):
        export = exports.get(inv.vendor)
        if export is None or inv.vendor in skipped:
            continue
        models = {short_model(m) for m in inv.models()}
        if export.gres_type is not None:
            kind = sanitize_feature(export.gres_type(inv) or "")
        else:
            kind = sanitize_feature(models.pop() or "") if len(models) == 1 else ""
        out.append(Gres(export.gres_name, kind.replace(".", "_") or None, inv.count,
                        export.gres_files(inv)))
    return out


# --------------------------------------------------------------------------- Ansible


def accelerator_groups(inventories: Sequence[AcceleratorInventory]) -> list[str]:
    """The vendor/model groups of a host (``npu_910b``, ``gpu_mi250``, ``gpu_h800``)."""
    return sorted({g for inv in _present(inventories) if (g := inventory_group(inv))})


def accelerator_vars(inv: AcceleratorInventory, exports: Exports) -> dict[str, Any]:
    """The variables one host's inventory of a vendor gives its group: the vendor, the
    versions its tools report (unknown ones left out) and the runtime's name."""
    export = exports.get(inv.vendor)
    v = inv.versions
    values: dict[str, Any] = {
        "accelerator_vendor": inv.vendor.value,
        "accelerator_driver_version": v.driver,
        "accelerator_firmware_version": v.firmware,
        "accelerator_runtime": export.runtime if export is not None and v.runtime else None,
        "accelerator_runtime_version": v.runtime,
    }
    return {k: val for k, val in values.items() if val}


# --------------------------------------------------------------------------- summaries


def model_counts(
    inventories: Sequence[AcceleratorInventory],
) -> dict[tuple[str, str], int]:
    """(vendor, model) -> accelerators of the host (the model as the tool names it)."""
    out: Counter[tuple[str, str]] = Counter()
    for inv in _present(inventories):
        for a in inv.accelerators:
            out[(inv.vendor.value, a.model)] += 1
    return dict(out)


# --------------------------------------------------------------------------- stored digest


def inventory_digest(inventories: Sequence[AcceleratorInventory]) -> list[dict[str, Any]]:
    """What the vendors' labels read of a host's accelerators, as a small JSON value (stored
    with a snapshot beside the other label inputs, so labels need not decode the facts):
    per vendor its versions and, per accelerator, index, model, PCI device id, memory and
    the full product name (AMD's labeller name; absent from digests stored before it).
    A vendor whose labels read more must add it here."""
    return [
        {
            "vendor": inv.vendor.value,
            "versions": [inv.versions.driver, inv.versions.firmware, inv.versions.runtime,
                         inv.versions.tool],
            "accelerators": [
                [a.index, a.model, a.pci_device_id, a.memory_total_mib, a.product_name]
                for a in inv.accelerators
            ],
        }
        for inv in _present(inventories)
    ]


def inventories_from_digest(digest: object) -> tuple[AcceleratorInventory, ...]:
    """The inventories :func:`inventory_digest` describes (only the fields it keeps); an
    unreadable value gives none (the caller then has no accelerator labels, never wrong
    ones)."""
    out: list[AcceleratorInventory] = []
    if not isinstance(digest, list):
        return ()
    try:
        for d in digest:
            vendor = Vendor(d["vendor"])
            driver, firmware, runtime, tool = d["versions"]
            out.append(
                AcceleratorInventory(
                    vendor=vendor,
                    accelerators=tuple(
                        Accelerator(vendor=vendor, index=int(i), model=str(m),
                                    pci_device_id=dev, memory_total_mib=mem,
                                    product_name=rest[0] if rest else None)
                        for i, m, dev, mem, *rest in d["accelerators"]
                    ),
                    versions=SoftwareVersions(driver, firmware, runtime, tool),
                )
            )
    except (KeyError, TypeError, ValueError):
        return ()
    return tuple(out)
