"""The Kunlunxin XPU vendor plugin: ``xpu_smi`` / ``xpu-smi`` -> accelerator records and labels.

``xpu_smi`` (:mod:`gpufleet.vendors.kunlunxin.xpu_smi`, two formats) gives per device its
DevID, model, PCI address and memory used/total (both formats), serial, ``/dev/xpuN`` node
and utilisation (runtime 4.x: K200, R300), and temperature, power and its cap, the volatile
uncorrectable ECC count, compute and SR-IOV modes (driver 5.x: P800), with the driver and
runtime (XRE / XPU-RT) versions. No format states a health word: the records' health is
unknown; a P800's ECC count is kept as the counter ``ecc_uncorrectable`` (the inspection's
``ecc_volatile_uncorrectable``).

Devices are counted as the tool counts them (one record per DevID): a K200 card shows two
devices with the same PCI address and serial (the capture's DevID 0/1 and 2/3), so the host's
four records are two physical cards; :func:`physical_cards` keeps that count apart (distinct
PCI addresses). lspci lists one function per card, so the bus never sees more devices than
the tool there: the count check compares the tool with the spec's count.

Not shipped, for want of a real capture: the R200's answer (named by NOTES.md, no capture in
the fixtures), ``xpu_smi -q`` style detail, process rows, firmware versions, a health word.

Exports follow Kunlunxin's device plugin conventions:

* extended resource ``kunlunxin.com/xpu`` (Project-HAMi/HAMi ``pkg/device/kunlun/config.go``:
  the ``kunlun-name`` default, ``kunlunxin.com/vxpu`` beside it for shares; Tencent TKE's
  Kunlunxin component advertises the same name);
* node labels: none. No label the vendor's device plugin writes was found (HAMi's Kunlun
  device reads only the resource's capacity; TKE's component is gated on the site-set label
  ``kunlun-device-enable=enable``, not derived from the hardware); gpufleet's own
  ``gpufleet.io/accelerator.*`` labels carry model and count;
* Slurm GRES ``xpu`` with ``File=/dev/xpu[<first>-<last>]`` (xpu_smi's ``INODE`` is
  ``/dev/xpu<DevID>`` in every 4.x capture, and containers get ``/dev/xpu0`` ..
  ``/dev/xpu7`` on the P800 host of the 5.x capture);
* runtime ``xre``; Ansible group ``xpu_<model>`` (``R300`` -> ``xpu_r300``, ``P800 OAM`` ->
  ``xpu_p800_oam``).

PCI: vendor ``1d22`` (``Baidu Technology`` in pci.ids, device ``3684`` "Kunlun AI
Accelerator"); the captured lspci, whose database lacks it, prints ``Communication
controller: Device 1d22:3684``: class ``0780`` counts as an accelerator of this vendor.
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
from gpufleet.domain.vendors import (
    Vendor,
    VendorCollector,
    VendorInspector,
    VendorPlugin,
    VendorSection,
)
from gpufleet.errors import ParseError
from gpufleet.vendors.kunlunxin.xpu_smi import XPU_SMI, XpuSmi, parse_xpu_smi

KUNLUNXIN = Vendor("kunlunxin")
PCI_VENDOR_ID = "1d22"
RESOURCE = "kunlunxin.com/xpu"

#: The binary is ``xpu_smi`` (older docs, ERNIE) or ``xpu-smi`` (PaddlePaddle's P800 page).
_FUNCTIONS = (
    "xpu_smi_any() { if command -v xpu_smi >/dev/null 2>&1; then $TO xpu_smi; "
    "else $TO xpu-smi; fi; }"
)


def to_inventory(smi: XpuSmi) -> AcceleratorInventory:
    """One :class:`Accelerator` per DevID (:class:`ParseError` where a 4.x ``INODE`` is not
    ``/dev/xpu<DevID>``: the device files would be unknown)."""
    accs = []
    for d in smi.devices:
        if d.inode is not None and d.inode != f"/dev/xpu{d.index}":
            raise ParseError(XPU_SMI, f"DevID {d.index}: INODE {d.inode} is not /dev/xpu{d.index}")
        accs.append(
            Accelerator(
                vendor=KUNLUNXIN,
                index=d.index,
                model=d.model or UNKNOWN_MODEL,
                bus_id=d.bus_id,
                serial=d.serial,
                memory_total_mib=d.memory_total_mib,
                memory_used_mib=d.memory_used_mib,
                error_counters=()
                if d.ecc_uncorrectable is None
                else (ErrorCounter("ecc_uncorrectable", d.ecc_uncorrectable),),
                temperature_c=None if d.temperature_c is None else float(d.temperature_c),
                power_w=None if d.power_w is None else float(d.power_w),
                power_limit_w=None if d.power_cap_w is None else float(d.power_cap_w),
            )
        )
    return AcceleratorInventory(
        vendor=KUNLUNXIN,
        accelerators=tuple(accs),
        versions=SoftwareVersions(driver=smi.driver, runtime=smi.runtime),
    )


def parse_sections(outputs: Mapping[str, str]) -> AcceleratorInventory:
    """The inventory from the ``xpu_smi`` section."""
    if "xpu_smi" not in outputs:
        raise ParseError(XPU_SMI, "section missing from the collection")
    return to_inventory(parse_xpu_smi(outputs["xpu_smi"]))


def physical_cards(inventory: AcceleratorInventory) -> int:
    """The physical cards: distinct PCI addresses (a K200's two devices share one)."""
    return len({a.bus_id or f"#{a.index}" for a in inventory.accelerators})


def labels(_: AcceleratorInventory) -> dict[str, str]:
    """None: no node label convention of the vendor's device plugin (module docstring)."""
    return {}


def group(model: str) -> str | None:
    """``xpu_<model>``: ``R300`` -> ``xpu_r300``, ``P800 OAM`` -> ``xpu_p800_oam``."""
    from gpufleet.domain.ansible import group_name  # ansible imports the facts

    rest = model.strip()
    return group_name("xpu", rest) if rest else None


def _resource(_: AcceleratorInventory) -> str:
    return RESOURCE


def device_files(inv: AcceleratorInventory) -> str | None:
    """``/dev/xpu[0-7]``: the DevIDs, when one contiguous range."""
    ids = sorted(a.index for a in inv.accelerators)
    if not ids or ids != list(range(ids[0], ids[0] + len(ids))):
        return None
    return f"/dev/xpu{ids[0]}" if len(ids) == 1 else f"/dev/xpu[{ids[0]}-{ids[-1]}]"


COLLECTOR = VendorCollector(
    vendor=KUNLUNXIN,
    tool="xpu_smi",
    primary="xpu_smi",
    sections=(
        VendorSection("xpu_smi", "xpu_smi_any", tool="xpu_smi", args="", functions=_FUNCTIONS),
    ),
    read=parse_sections,
)

#: The inspection probe asks xpu_smi's table (memory in use; on 5.x also temperature, power
#: and the ECC count); a device the tool no longer lists is what the sweep sees.
INSPECTOR = VendorInspector(
    vendor=KUNLUNXIN,
    primary="xpu_smi",
    inspect_sections=COLLECTOR.sections,
    parse_inspect=parse_sections,
)

PLUGIN = VendorPlugin(
    name=KUNLUNXIN,
    pci_vendor_id=PCI_VENDOR_ID,
    lspci_name="Baidu Technology",
    exports=VendorExport(
        labels=labels,
        resource=_resource,
        gres_name="xpu",
        gres_files=device_files,
        runtime="xre",
    ),
    collector=COLLECTOR,
    group=group,
    description="Kunlunxin XPUs",
    inspector=INSPECTOR,
    pci_classes=("0780", "Communication controller"),
)
