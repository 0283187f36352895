"""The vendors' conventions the exports apply (issue 15): one
:class:`~gpufleet.domain.accelerator_exports.VendorExport` per vendor, built from the vendor
plugins (their labels and extended resources) plus the names schedulers give them.

* NVIDIA: resource ``nvidia.com/gpu``; GRES ``gpu`` (written by the NVIDIA path of
  :mod:`gpufleet.service.slurm`, ``--gpu-files``); its labels are GFD's, written by
  :func:`gpufleet.domain.labels.derive_labels`; runtime ``cuda``.
* Huawei Ascend: the Ascend device plugin / Volcano labels of the plugin; resource
  ``huawei.com/Ascend910`` (``Ascend310``/``Ascend310P`` by family); GRES ``npu`` with
  ``File=/dev/davinci[<first>-<last>]`` (the NPU logic ids), as Slurm sites running Ascend
  name it (``GresTypes=gpu,npu``, ``Gres=npu:910b3:8``, TRES ``gres/npu:910b3``); runtime
  ``cann``.
* AMD Instinct: AMD node labeller labels of the plugin; resource ``amd.com/gpu``; GRES ``gpu``
  (``gpu:mi250:2``) with no ``File=`` (the DRM render nodes' numbers are not in rocm-smi's
  report: Slurm's ``AutoDetect=rsmi`` or the site says them); runtime ``rocm``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from gpufleet.domain.accelerator_exports import (
    VendorExport,
    inventories_from_digest,
    vendor_labels,
)
from gpufleet.domain.accelerators import AcceleratorInventory, Vendor, inventories_of

if TYPE_CHECKING:
    from gpufleet.domain.facts import HostFacts

#: ``nvidia.com/gpu`` (as gpufleet.domain.k8s.GPU_RESOURCE; not imported: this module stays
#: light for ``gpufleet labels HOST``, the plugins are imported when a vendor's host is seen).
NVIDIA_RESOURCE = "nvidia.com/gpu"


def _ascend_labels(inv: AcceleratorInventory) -> dict[str, str]:
    from gpufleet.collect.vendors.ascend import plugin

    return plugin.labels(inv)


def _ascend_resource(inv: AcceleratorInventory) -> str | None:
    from gpufleet.collect.vendors.ascend import plugin

    models = inv.models()
    return plugin.resource_name(models[0]) if len(models) == 1 else None


def _amd_labels(inv: AcceleratorInventory) -> dict[str, str]:
    from gpufleet.collect.vendors.amd import plugin

    return plugin.labels(inv)


def _amd_resource(_: AcceleratorInventory) -> str:
    from gpufleet.collect.vendors.amd import plugin

    return plugin.RESOURCE


def _davinci_files(inv: AcceleratorInventory) -> str | None:
    """``/dev/davinci[0-7]``: the NPUs' logic ids, when they are one contiguous range."""
    ids = sorted(a.index for a in inv.accelerators)
    if not ids or ids != list(range(ids[0], ids[0] + len(ids))):
        return None
    return f"/dev/davinci{ids[0]}" if len(ids) == 1 else f"/dev/davinci[{ids[0]}-{ids[-1]}]"


EXPORTS: Mapping[Vendor, VendorExport] = {
    Vendor.NVIDIA: VendorExport(
        Vendor.NVIDIA, resource=lambda _: NVIDIA_RESOURCE, gres_name="gpu", runtime="cuda"
    ),
    Vendor.HUAWEI: VendorExport(
        Vendor.HUAWEI,
        labels=_ascend_labels,
        resource=_ascend_resource,
        gres_name="npu",
        gres_files=_davinci_files,
        runtime="cann",
    ),
    Vendor.AMD: VendorExport(
        Vendor.AMD,
        labels=_amd_labels,
        resource=_amd_resource,
        gres_name="gpu",
        runtime="rocm",
    ),
}


def host_accelerator_labels(facts: HostFacts) -> dict[str, str]:
    """The vendors' own labels for a host's facts (gpufleet's ``gpufleet.io/accelerator.*``
    are the domain's: :func:`gpufleet.domain.labels.derive_labels`)."""
    return vendor_labels(inventories_of(facts), EXPORTS)


def digest_accelerator_labels(digest: object) -> dict[str, str]:
    """The same labels from the stored digest
    (:func:`~gpufleet.domain.accelerator_exports.inventory_digest`)."""
    return vendor_labels(inventories_from_digest(digest), EXPORTS)
