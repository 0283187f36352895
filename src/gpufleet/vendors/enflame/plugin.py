"""The Enflame GCU vendor plugin: ``efsmi`` -> accelerator records and labels.

``efsmi`` (:mod:`gpufleet.vendors.enflame.efsmi`, V1.2.0.301 captured) gives per card its
index, name (``S60``), firmware, PCI bus id, ECC mode, temperature, DPM state, power and its
cap, memory (net of ECC), GCU virtualisation mode, utilisation and serial number; its version
row efsmi's and the driver's versions. One card is one PCI function and one logical device in
the capture (lspci lists the two S60s at the bus ids efsmi prints). No health word or error
count: the records' health is unknown, a card efsmi no longer lists is what the checks see
(fewer devices than lspci).

ECC shrinks memory: on the captured host card 0 (ECC off) has 49120 MiB, card 1 (ECC on) 42976
MiB. Each record keeps its ECC mode beside its memory (``firmware["ECC"]``), the memory label
is left out when the cards differ, and the host firmware version is None when the cards run
different firmware (33.6.2 and 33.6.5 on that host).

Not shipped, for want of a real capture: ``efsmi -q`` / per-device queries (UUID, error
counts, PCIe link), process lists, ``N/A`` readings, virtual (VGCU) rows.

Exports follow Enflame's Kubernetes conventions:

* extended resource ``enflame.com/gcu`` (Enflame's device plugin, as HAMi's Enflame device,
  Project-HAMi/HAMi ``pkg/device/enflame``, defaults ``--enflame-gcu-resource-name`` to; the
  sharing plugin EnflameTechnology/gcushare ``gcushare-device-plugin/pkg/consts/const.go``
  names ``enflame.com/shared-gcu`` / ``drs-gcu`` beside it, not advertised here);
* node labels of Enflame's GCU Feature Discovery (its README in the TopsCloud release, found
  as a stored copy whose repository the index does not name): ``enflame.com/gcu.present``,
  ``gcu.count``, ``gcu.model``, ``gcu.memory`` (MiB, only when every card reports the same);
  ``gcu.machine`` and ``gcu.family`` are not in efsmi's summary and are not emitted;
* Slurm GRES ``gcu`` (gcushare's ``DEVICE_TYPE``), no ``File=`` (the device node minor is not
  in efsmi's summary);
* runtime ``topsplatform`` (the TopsPlatform the lspci capture names); Ansible group
  ``gcu_<model>`` (``gcu_s60``). PCI vendor id ``1e36``, class Processing accelerators
  (``1200``; NFD's label ``pci-1200_1e36.present`` on Enflame nodes).
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
from gpufleet.vendors.enflame.efsmi import EFSMI, Efsmi, parse_efsmi

ENFLAME = Vendor("enflame")
PCI_VENDOR_ID = "1e36"
RESOURCE = "enflame.com/gcu"
LABEL_PREFIX = "enflame.com"


def to_inventory(smi: Efsmi) -> AcceleratorInventory:
    """One :class:`Accelerator` per card; the firmware when every card runs the same."""
    accs = tuple(
        Accelerator(
            vendor=ENFLAME,
            index=c.index,
            model=c.name or UNKNOWN_MODEL,
            bus_id=c.bus_id,
            serial=c.serial,
            memory_total_mib=c.memory_mib,
            temperature_c=float(c.temperature_c),
            power_w=c.power_w,
            power_limit_w=c.power_cap_w,
            firmware={"FW": c.firmware, "ECC": "on" if c.ecc else "off"},
        )
        for c in smi.cards
    )
    firmware = {c.firmware for c in smi.cards}
    return AcceleratorInventory(
        vendor=ENFLAME,
        accelerators=accs,
        versions=SoftwareVersions(
            driver=smi.driver,
            firmware=firmware.pop() if len(firmware) == 1 else None,
            tool=smi.version,
        ),
    )


def parse_sections(outputs: Mapping[str, str]) -> AcceleratorInventory:
    """The inventory from the ``efsmi`` section."""
    if "efsmi" not in outputs:
        raise ParseError(EFSMI, "section missing from the collection")
    return to_inventory(parse_efsmi(outputs["efsmi"]))


def labels(inventory: AcceleratorInventory) -> dict[str, str]:
    """GCU Feature Discovery's labels (module docstring)."""
    p = LABEL_PREFIX
    if not inventory.accelerators:
        return {}
    out = {f"{p}/gcu.present": "true", f"{p}/gcu.count": str(inventory.count)}
    models = inventory.models()
    if len(models) == 1 and models[0] != UNKNOWN_MODEL:
        out[f"{p}/gcu.model"] = sanitize_label_value(models[0])
    sizes = {a.memory_total_mib for a in inventory.accelerators}
    if len(sizes) == 1 and None not in sizes:
        out[f"{p}/gcu.memory"] = str(sizes.pop())
    return out


def group(model: str) -> str | None:
    """``gcu_<model>``: ``S60`` -> ``gcu_s60``."""
    from gpufleet.domain.ansible import group_name  # ansible imports the facts

    rest = model.strip()
    return group_name("gcu", rest) if rest else None


def _resource(_: AcceleratorInventory) -> str:
    return RESOURCE


COLLECTOR = VendorCollector(
    vendor=ENFLAME,
    tool="efsmi",
    primary="efsmi",
    sections=(VendorSection("efsmi", "$TO efsmi", tool="efsmi", args=""),),
    read=parse_sections,
)

#: The inspection probe asks efsmi's summary (temperature, power per card); a card efsmi no
#: longer lists is what the sweep sees (fewer devices).
INSPECTOR = VendorInspector(
    vendor=ENFLAME,
    primary="efsmi",
    inspect_sections=COLLECTOR.sections,
    parse_inspect=parse_sections,
)

PLUGIN = VendorPlugin(
    name=ENFLAME,
    pci_vendor_id=PCI_VENDOR_ID,
    lspci_name="Shanghai Enflame Technology",
    exports=VendorExport(
        labels=labels, resource=_resource, gres_name="gcu", runtime="topsplatform"
    ),
    collector=COLLECTOR,
    group=group,
    description="Enflame GCUs",
    inspector=INSPECTOR,
)
