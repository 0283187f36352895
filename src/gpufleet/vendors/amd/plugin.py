"""The AMD Instinct vendor plugin: ``rocm-smi --json`` -> accelerator records and labels.

Labels follow AMD's node labeller (ROCm/k8s-device-plugin ``cmd/k8s-node-labeller/main.go``,
its ``labelGenerators``): ``amd.com/gpu.device-id`` (hex without ``0x``, e.g. ``738c``),
``amd.com/gpu.product-name`` (the full name the labeller reads, spaces as ``_`` and
parentheses dropped: ``AMD_INSTINCT_MI250_MCM_OAM_AC_MBA``, ``AMD_Instinct_MI100``),
``amd.com/gpu.vram`` (whole MiB, then GiB rounded half up as Go's ``math.Round`` does:
``32G``; 512 MiB is ``1G``) and ``amd.com/gpu.driver-version``. The labeller's family, SIMD
and CU counts come from the kernel's KFD topology, which rocm-smi does not print: they are
not emitted. The extended resource is ``amd.com/gpu``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from gpufleet.domain.accelerator_exports import VendorExport
from gpufleet.domain.accelerators import (
    UNKNOWN_MODEL,
    Accelerator,
    AcceleratorInventory,
    ErrorCounter,
    Link,
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
from gpufleet.vendors.amd.rocm_smi import (
    RocmSmi,
    labeller_product_name,
    parse_rocm_smi_json,
    product_name,
)

if TYPE_CHECKING:
    from gpufleet.domain.fault_catalogue import FaultCatalogue

AMD = Vendor("amd")

SECTIONS: Mapping[str, str] = {
    "rocm_smi_json": (
        "rocm-smi --showproductname --showid --showserial --showuniqueid --showbus "
        "--showmeminfo vram --showtemp --showpower --showmaxpower --showdriverversion "
        "--showfwinfo --showvbios --json"
    ),
}
RESOURCE = "amd.com/gpu"
_MIB = 1 << 20


def to_inventory(smi: RocmSmi) -> AcceleratorInventory:
    """One :class:`Accelerator` per card; the topology's link types (``pcie``/``xgmi``)
    become links to each peer (state unknown: rocm-smi reports no link status)."""
    peers: dict[int, list[Link]] = {}
    for t in smi.topology:
        if t.link_type is None:
            continue
        kind = t.link_type.lower()
        peers.setdefault(t.a, []).append(Link(kind=kind, peer=str(t.b)))
        peers.setdefault(t.b, []).append(Link(kind=kind, peer=str(t.a)))
    accs: list[Accelerator] = []
    for c in smi.cards:
        counters: tuple[ErrorCounter, ...] = ()
        if c.pcie_replay_count is not None:
            counters = (ErrorCounter("pcie_replay", c.pcie_replay_count),)
        fw = dict(c.firmware)
        if c.vbios:
            fw["VBIOS"] = c.vbios
        accs.append(
            Accelerator(
                vendor=AMD,
                index=c.index,
                model=product_name(c.series) or UNKNOWN_MODEL,
                bus_id=c.bus_id,
                pci_device_id=c.device_id,
                serial=c.serial,
                uuid=c.unique_id,
                memory_total_mib=None if c.vram_total_bytes is None else c.vram_total_bytes // _MIB,
                memory_used_mib=None if c.vram_used_bytes is None else c.vram_used_bytes // _MIB,
                error_counters=counters,
                temperature_c=c.temperature_junction_c
                if c.temperature_junction_c is not None
                else c.temperature_edge_c,
                power_w=c.power_average_w,
                power_limit_w=c.power_max_w,
                firmware=fw,
                links=tuple(sorted(peers.get(c.index, []), key=lambda ln: int(ln.peer or 0))),
                product_name=labeller_product_name(c.series, c.device_id),
            )
        )
    return AcceleratorInventory(
        vendor=AMD,
        accelerators=tuple(accs),
        versions=SoftwareVersions(driver=smi.driver_version),
    )


def parse_sections(outputs: Mapping[str, str]) -> AcceleratorInventory:
    if "rocm_smi_json" not in outputs:
        raise ParseError("rocm-smi --json", "section missing from the collection")
    return to_inventory(parse_rocm_smi_json(outputs["rocm_smi_json"]))


def labels(inventory: AcceleratorInventory) -> dict[str, str]:
    """Node-labeller-compatible labels; a label is left out when the cards disagree on it
    or rocm-smi does not report it."""
    out: dict[str, str] = {}

    def one(key: str, values: Sequence[str | None]) -> None:
        distinct = set(values)
        if len(distinct) == 1 and None not in distinct:
            out[key] = sanitize_label_value(next(iter(distinct)))

    accs = inventory.accelerators
    if not accs:
        return out
    one("amd.com/gpu.device-id", [a.pci_device_id for a in accs])
    one("amd.com/gpu.product-name", [_labeller_name(a.product_name) for a in accs])
    one("amd.com/gpu.vram", [_labeller_vram(a.memory_total_mib) for a in accs])
    if inventory.versions.driver:
        out["amd.com/gpu.driver-version"] = sanitize_label_value(inventory.versions.driver)
    return out


def _labeller_name(name: str | None) -> str | None:
    """The labeller's replacer: spaces -> ``_``, ``(`` and ``)`` dropped."""
    if name is None:
        return None
    return name.strip().replace(" ", "_").replace("(", "").replace(")", "") or None


def _labeller_vram(mib: int | None) -> str | None:
    """``int(math.Round(float64(mib) / 1024))``: Go rounds half away from zero (Python's
    ``round`` would give ``0G`` for 512 MiB)."""
    return None if mib is None else f"{(mib + 512) // 1024}G"


COLLECTOR = VendorCollector(
    vendor=AMD,
    tool="rocm-smi",
    primary="rocm_smi_json",
    sections=(
        VendorSection(
            "rocm_smi_json",
            "$TO rocm-smi " + SECTIONS["rocm_smi_json"].removeprefix("rocm-smi "),
            tool="rocm-smi",
            args=SECTIONS["rocm_smi_json"].removeprefix("rocm-smi "),
        ),
    ),
    read=parse_sections,
)


#: The inspection probe asks rocm-smi the collection's question (temperatures, power and its
#: cap, VRAM in use, per card): its JSON answer is what the captures hold. rocm-smi reports no
#: health and no ECC count in it (``--showrasinfo`` has no real capture): a card it no longer
#: lists is what the sweep sees (fewer cards than the facts), or the tool failing.
INSPECTOR = VendorInspector(
    vendor=AMD,
    primary="rocm_smi_json",
    inspect_sections=COLLECTOR.sections,
    parse_inspect=parse_sections,
)


def _resource(_: AcceleratorInventory) -> str:
    return RESOURCE


#: AMD Instinct. Exports: the node labeller's labels; resource ``amd.com/gpu``; GRES ``gpu``
#: (``gpu:mi250:2``) with no ``File=`` (the DRM render nodes' numbers are not in rocm-smi's
#: report: Slurm's ``AutoDetect=rsmi`` or the site says them); runtime ``rocm``; groups
#: ``gpu_<model>`` (``gpu_mi100``, ``gpu_mi300x``).
def _faults() -> FaultCatalogue:
    """The AMD fault catalogue (``faults.py``; its data read on first use)."""
    from gpufleet.vendors.amd.faults import catalogue

    return catalogue()


PLUGIN = VendorPlugin(
    name=AMD,
    pci_vendor_id="1002",
    lspci_name="Advanced Micro Devices",
    exports=VendorExport(labels=labels, resource=_resource, gres_name="gpu", runtime="rocm"),
    collector=COLLECTOR,
    description="AMD Instinct GPUs",
    inspector=INSPECTOR,
    faults=_faults,
)
