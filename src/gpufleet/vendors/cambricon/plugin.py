"""The Cambricon MLU vendor plugin: ``cnmon`` -> accelerator records and labels.

``cnmon`` (:mod:`gpufleet.vendors.cambricon.cnmon`, three captured layouts) gives per card
its index, name, firmware, utilisation, ECC error count (v5.10.31; ``N/A`` before), fan,
temperature, power and its cap, memory used/total, the PCI bus id (v5) and the driver
(banner from v5, per card in v4). One card row is one physical card and one logical device in
every capture (``VF`` is ``/``; virtual functions are refused, no capture shows their rows).
Not shipped, for want of a real capture: ``cnmon version``, ``cnmon info`` (serials, UUIDs),
virtual-function rows. cnmon states no health word: the records' health is unknown; a
non-zero ECC error count is kept as the counter ``ecc_errors``.

Exports follow Cambricon's device plugin (Cambricon/cambricon-k8s-device-plugin):

* extended resource ``cambricon.com/mlu`` (``device-plugin/pkg/mlu/const.go``: ``normalMlu``
  under the ``cambricon.com`` domain; gpustack/runtime's manufacturer table says the same);
* node labels ``Model`` and ``DriverVersion`` (``device-plugin/pkg/nodeLabel/nodelabel.go``:
  the model of card 0 and the driver as ``v<major>.<minor>.<build>``), the model as cnmon
  prints it; ``MCUVersion`` and ``CPUType`` are not in cnmon's summary and are not emitted;
* Slurm GRES ``mlu`` with ``File=/dev/cambricon_dev[<first>-<last>]`` (the device plugin's
  ``mluDeviceName`` ``/dev/cambricon_dev`` + card index);
* runtime ``neuware``; Ansible group ``mlu_<model>`` (``MLU370-X8`` -> ``mlu_370_x8``).
"""

from __future__ import annotations

from collections.abc import Mapping

from gpufleet.domain.accelerator_exports import VendorExport
from gpufleet.domain.accelerators import (
    UNKNOWN_MODEL,
    Accelerator,
    AcceleratorInventory,
    ErrorCounter,
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
from gpufleet.vendors.cambricon.cnmon import CNMON, Cnmon, parse_cnmon

CAMBRICON = Vendor("cambricon")
PCI_VENDOR_ID = "cabc"  # gpustack/runtime's manufacturer -> PCI vendor id table
RESOURCE = "cambricon.com/mlu"
MODEL_LABEL = "Model"
DRIVER_LABEL = "DriverVersion"


def to_inventory(smi: Cnmon) -> AcceleratorInventory:
    """One :class:`Accelerator` per card; the driver from the banner or, in v4, the cards'
    one driver; the firmware when every card runs the same."""
    accs = tuple(
        Accelerator(
            vendor=CAMBRICON,
            index=c.index,
            model=c.name or UNKNOWN_MODEL,
            bus_id=c.bus_id,
            memory_total_mib=c.memory_total_mib,
            memory_used_mib=c.memory_used_mib,
            error_counters=()
            if c.ecc_errors is None
            else (ErrorCounter("ecc_errors", c.ecc_errors),),
            temperature_c=float(c.temperature_c),
            power_w=c.power_w,
            power_limit_w=c.power_cap_w,
            firmware={"Firmware": c.firmware},
        )
        for c in smi.cards
    )
    drivers = {c.driver for c in smi.cards if c.driver}
    driver = smi.driver or (drivers.pop() if len(drivers) == 1 else None)
    firmware = {c.firmware for c in smi.cards}
    return AcceleratorInventory(
        vendor=CAMBRICON,
        accelerators=accs,
        versions=SoftwareVersions(
            driver=driver,
            firmware=firmware.pop() if len(firmware) == 1 else None,
            tool=smi.version,
        ),
    )


def parse_sections(outputs: Mapping[str, str]) -> AcceleratorInventory:
    """The inventory from the ``cnmon`` section."""
    if "cnmon" not in outputs:
        raise ParseError(CNMON, "section missing from the collection")
    return to_inventory(parse_cnmon(outputs["cnmon"]))


def labels(inventory: AcceleratorInventory) -> dict[str, str]:
    """The device plugin's ``Model`` (card 0's) and ``DriverVersion`` labels."""
    out: dict[str, str] = {}
    first = min(inventory.accelerators, key=lambda a: a.index, default=None)
    if first is not None and first.model != UNKNOWN_MODEL:
        out[MODEL_LABEL] = sanitize_label_value(first.model)
    if inventory.versions.driver:
        out[DRIVER_LABEL] = sanitize_label_value(inventory.versions.driver)
    return out


def group(model: str) -> str | None:
    """``mlu_<model>`` without the ``MLU`` prefix: ``MLU370-X8`` -> ``mlu_370_x8``."""
    from gpufleet.domain.ansible import group_name  # ansible imports the facts

    rest = model.strip()
    if rest.upper().startswith("MLU"):
        rest = rest[3:].lstrip("-_ ")
    return group_name("mlu", rest) if rest else None


def _resource(_: AcceleratorInventory) -> str:
    return RESOURCE


def device_files(inv: AcceleratorInventory) -> str | None:
    """``/dev/cambricon_dev[0-7]``: the cards' indices, when one contiguous range."""
    ids = sorted(a.index for a in inv.accelerators)
    if not ids or ids != list(range(ids[0], ids[0] + len(ids))):
        return None
    base = "/dev/cambricon_dev"
    return f"{base}{ids[0]}" if len(ids) == 1 else f"{base}[{ids[0]}-{ids[-1]}]"


COLLECTOR = VendorCollector(
    vendor=CAMBRICON,
    tool="cnmon",
    primary="cnmon",
    sections=(VendorSection("cnmon", "$TO cnmon", tool="cnmon", args=""),),
    read=parse_sections,
)

#: The inspection probe asks cnmon's summary (temperature, power, memory in use, ECC errors
#: per card); a card cnmon no longer lists is what the sweep sees (fewer devices).
INSPECTOR = VendorInspector(
    vendor=CAMBRICON,
    primary="cnmon",
    inspect_sections=COLLECTOR.sections,
    parse_inspect=parse_sections,
)

PLUGIN = VendorPlugin(
    name=CAMBRICON,
    pci_vendor_id=PCI_VENDOR_ID,
    lspci_name="Cambricon",
    exports=VendorExport(
        labels=labels,
        resource=_resource,
        gres_name="mlu",
        gres_files=device_files,
        runtime="neuware",
    ),
    collector=COLLECTOR,
    group=group,
    description="Cambricon MLUs",
    inspector=INSPECTOR,
)
