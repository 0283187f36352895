"""The Iluvatar CoreX vendor plugin: ``ixsmi`` -> accelerator records and labels.

``ixsmi`` (:mod:`gpufleet.vendors.iluvatar.ixsmi`, IX-ML 4.1.0 and 4.3.0 captured) gives per
GPU its index, name, bus id, clocks, fan, temperature, perf state, power and its cap (``N/A``:
absent), memory used/total, utilisation and compute mode; the banner the IX-ML, driver and
"CUDA" (CoreX runtime) versions. No serial, UUID, firmware, ECC or health word: the records'
health is unknown, a GPU ixsmi no longer lists is what the checks see (fewer devices).

Count: one record per GPU as ixsmi (and Iluvatar's ixml, device plugin and feature discovery)
counts them. A BI-V150 card carries two GPUs: each capture lists 16 GPUs of 32768 MiB on an
"8-card" host. ixsmi never prints the card; it prints power once per pair (``N/A / N/A`` on
the first GPU, the pair's watts on the second), so :func:`boards` pairs them from that pattern
(an inference from the real captures, kept apart from the count: None when the pattern does
not hold). Summing the records' power counts each card once (absent is not zero).

Not shipped, for want of a real capture: ``ixsmi -q`` (serials, UUIDs, VBIOS, ECC), process
rows (only ``No running processes found`` is captured: the box is not read), lspci lines of an
Iluvatar GPU (so no ``pci_classes``).

PCI: the vendor id ``1e3e`` comes from kernel source, not from pci.ids or a capture: the
openEuler kernel's Phytium pswiotlb header (``include/linux/pswiotlb.h``) defines
``BL_PCI_VENDOR_ID_ILUVATAR 0x1E3E`` for its DMA pass-through list, beside NVIDIA's ``0x10de``
and MetaX's ``0x9999``. The plain-lspci name ``Iluvatar CoreX`` (``lspci_name``) is the
vendor's brand, an assumption no capture attests (no pci.ids entry was looked up); the id
decides wherever lspci prints it (``lspci -nn``'s ``[1e3e:...]``, or a plain ``Device
1e3e:...`` from a database without the vendor): only a plain lspci naming the vendor
otherwise would miss the GPUs.

Exports follow Iluvatar's own Kubernetes components (Deep-Spark, Apache-2.0):

* extended resource ``iluvatar.com/gpu`` (Deep-Spark/ix-device-plugin,
  ``deployment/ix-device-plugin/values.yaml``: ``resourceName: iluvatar.com/gpu`` with
  ``splitboard: true``, one unit per GPU as ixsmi lists them; with ``splitboard: false``
  ``pkg/gpuallocator/deviceset.go`` exposes one unit per board: then the count is the
  :func:`boards`'); the older README's ``iluvatar.ai/gpu`` is not used;
* node labels of Deep-Spark/ix-feature-discovery ``pkg/label/ixml.go`` (prefix
  ``iluvatar.com``): ``gpu.product``, ``gpu.count``, ``gpu.memory`` (MiB) when the GPUs are
  one product, ``ix.driver-version.{full,major,minor,revision}`` and
  ``cuda.runtime-version.{full,major,minor}`` from the banner;
* Slurm GRES ``gpu`` typed by the model (``gpu:bi-v150:16``), no ``File=`` (the device plugin
  hands ``/dev/iluvatar<minor>``, ``pkg/config/const.go``; the minor is not in ixsmi's report);
* runtime ``corex``; Ansible group ``gpu_<model>`` without the brand (``gpu_bi_v150``).
"""

from __future__ import annotations

from collections.abc import Mapping

from gpufleet.domain.accelerator_exports import VendorExport
from gpufleet.domain.accelerators import (
    UNKNOWN_MODEL,
    Accelerator,
    AcceleratorInventory,
    SoftwareVersions,
)
from gpufleet.domain.labels import sanitize_label_value
from gpufleet.domain.vendors import (
    Vendor,
    VendorCollector,
    VendorInspector,
    VendorPlugin,
    VendorSection,
)
from gpufleet.errors import ParseError
from gpufleet.vendors.iluvatar.ixsmi import IXSMI, IxSmi, parse_ixsmi

ILUVATAR = Vendor("iluvatar")
PCI_VENDOR_ID = "1e3e"
RESOURCE = "iluvatar.com/gpu"
LABEL_PREFIX = "iluvatar.com"
_BRAND = "Iluvatar "


def to_inventory(smi: IxSmi) -> AcceleratorInventory:
    """One :class:`Accelerator` per GPU row; the banner's driver, runtime and tool versions."""
    accs = tuple(
        Accelerator(
            vendor=ILUVATAR,
            index=g.index,
            model=g.name.removeprefix(_BRAND) or UNKNOWN_MODEL,
            bus_id=g.bus_id,
            memory_total_mib=g.memory_total_mib,
            memory_used_mib=g.memory_used_mib,
            temperature_c=float(g.temperature_c),
            power_w=g.power_w,
            power_limit_w=g.power_cap_w,
            product_name=g.name,
        )
        for g in smi.gpus
    )
    return AcceleratorInventory(
        vendor=ILUVATAR,
        accelerators=accs,
        versions=SoftwareVersions(driver=smi.driver, runtime=smi.cuda, tool=smi.ixml),
    )


def parse_sections(outputs: Mapping[str, str]) -> AcceleratorInventory:
    """The inventory from the ``ixsmi`` section."""
    if "ixsmi" not in outputs:
        raise ParseError(IXSMI, "section missing from the collection")
    return to_inventory(parse_ixsmi(outputs["ixsmi"]))


def boards(inventory: AcceleratorInventory) -> tuple[tuple[int, ...], ...] | None:
    """The GPUs of each physical card, by index: a GPU without a power reading (``N/A``)
    and the next one, which reads the pair's power, are one card; a GPU with its own reading
    is a card alone. None when a power-less GPU is not followed by one that reads (the
    pattern of the captures does not hold: the card count is unknown)."""
    gpus = sorted(inventory.accelerators, key=lambda a: a.index)
    out: list[tuple[int, ...]] = []
    at = 0
    while at < len(gpus):
        a = gpus[at]
        if a.power_w is not None:
            out.append((a.index,))
            at += 1
            continue
        if at + 1 >= len(gpus) or gpus[at + 1].power_w is None:
            return None
        out.append((a.index, gpus[at + 1].index))
        at += 2
    return tuple(out)


def _one_product(inv: AcceleratorInventory) -> Accelerator | None:
    names = {(a.product_name, a.memory_total_mib) for a in inv.accelerators}
    if len(names) != 1:
        return None
    first = inv.accelerators[0]
    return first if first.product_name else None


def labels(inventory: AcceleratorInventory) -> dict[str, str]:
    """ix-feature-discovery's labels (module docstring) from the inventory."""
    p = LABEL_PREFIX
    out: dict[str, str] = {}
    one = _one_product(inventory)
    if one is not None:
        out[f"{p}/gpu.product"] = sanitize_label_value(one.product_name)
        out[f"{p}/gpu.count"] = str(inventory.count)
        if one.memory_total_mib is not None:
            out[f"{p}/gpu.memory"] = str(one.memory_total_mib)
    driver = inventory.versions.driver
    if driver:
        parts = driver.split(".")
        if 2 <= len(parts) <= 3:
            out[f"{p}/ix.driver-version.full"] = sanitize_label_value(driver)
            out[f"{p}/ix.driver-version.major"] = sanitize_label_value(parts[0])
            out[f"{p}/ix.driver-version.minor"] = sanitize_label_value(parts[1])
            out[f"{p}/ix.driver-version.revision"] = sanitize_label_value(
                parts[2] if len(parts) == 3 else "")
    cuda = inventory.versions.runtime
    if cuda and len(parts := cuda.split(".")) == 2:
        out[f"{p}/cuda.runtime-version.full"] = sanitize_label_value(cuda)
        out[f"{p}/cuda.runtime-version.major"] = sanitize_label_value(parts[0])
        out[f"{p}/cuda.runtime-version.minor"] = sanitize_label_value(parts[1])
    return out


def group(model: str) -> str | None:
    """``gpu_<model>`` without the brand word: ``BI-V150`` -> ``gpu_bi_v150``."""
    from gpufleet.domain.ansible import group_name  # ansible imports the facts

    rest = model.strip().removeprefix(_BRAND).strip()
    return group_name("gpu", rest) if rest else None


def gres_type(inv: AcceleratorInventory) -> str | None:
    """The model, lower case, when the GPUs are one (``bi-v150``)."""
    models = inv.models()
    if len(models) != 1 or models[0] == UNKNOWN_MODEL:
        return None
    return models[0].lower()


def _resource(_: AcceleratorInventory) -> str:
    return RESOURCE


COLLECTOR = VendorCollector(
    vendor=ILUVATAR,
    tool="ixsmi",
    primary="ixsmi",
    sections=(VendorSection("ixsmi", "$TO ixsmi", tool="ixsmi", args=""),),
    read=parse_sections,
)

#: The inspection probe asks ixsmi's summary (temperature, power, memory in use per GPU); a
#: GPU ixsmi no longer lists is what the sweep sees (fewer devices).
INSPECTOR = VendorInspector(
    vendor=ILUVATAR,
    primary="ixsmi",
    inspect_sections=COLLECTOR.sections,
    parse_inspect=parse_sections,
)

PLUGIN = VendorPlugin(
    name=ILUVATAR,
    pci_vendor_id=PCI_VENDOR_ID,
    lspci_name="Iluvatar CoreX",
    exports=VendorExport(
        labels=labels,
        resource=_resource,
        gres_name="gpu",
        runtime="corex",
        gres_type=gres_type,
    ),
    collector=COLLECTOR,
    group=group,
    description="Iluvatar CoreX GPUs",
    inspector=INSPECTOR,
)
