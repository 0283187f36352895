"""The vendors' conventions the exports apply (issue 15): the ``exports`` of each vendor's
:class:`~gpufleet.domain.vendors.VendorPlugin` (its labels, extended resource, Slurm GRES name
and ``File=``, runtime name), looked up by vendor. No vendor is named here: a plugin
is imported when a host of its vendor is seen (this module stays light for
``gpufleet labels HOST``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from gpufleet.domain.accelerator_exports import (
    VendorExport,
    inventories_from_digest,
    vendor_labels,
)
from gpufleet.domain.accelerators import Vendor, inventories_of
from gpufleet.domain.vendors import PluginView

if TYPE_CHECKING:
    from gpufleet.domain.facts import HostFacts

#: Vendor -> its plugin's exports (every registered vendor).
EXPORTS: Mapping[Vendor, VendorExport] = PluginView(lambda p: p.exports)


def accelerator_noun(vendor: str) -> str:
    """What a vendor's accelerators are called in counts: ``GPUs`` (NVIDIA, AMD), ``NPUs``
    (Huawei Ascend), ``accelerators`` for a vendor no installed plugin names. Taken from the
    kind the vendor's own exports name them by (its Slurm GRES name,
    :data:`gpufleet.service.hosts.vendor_exports.EXPORTS`), so there is no vendor table here: a
    vendor plugin that wants another word changes this one function."""
    try:
        export = EXPORTS[Vendor(vendor)]  # imports that vendor's plugin only
    except (ValueError, KeyError):  # no installed plugin names it
        return "accelerators"
    return f"{export.gres_name.upper()}s"


def host_accelerator_labels(facts: HostFacts) -> dict[str, str]:
    """The vendors' own labels for a host's facts (gpufleet's ``gpufleet.io/accelerator.*``
    are the domain's: :func:`gpufleet.domain.labels.derive_labels`)."""
    return vendor_labels(inventories_of(facts), EXPORTS)


def digest_accelerator_labels(digest: object) -> dict[str, str]:
    """The same labels from the stored digest
    (:func:`~gpufleet.domain.accelerator_exports.inventory_digest`)."""
    return vendor_labels(inventories_from_digest(digest), EXPORTS)
