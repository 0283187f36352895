"""Vendor-neutral accelerator model (issue 15): what any vendor's plugin reports.

Pure domain: no I/O, no store. A vendor plugin (``gpufleet.vendors.<vendor>``, found by
:mod:`gpufleet.domain.vendors`) turns its tools' output into these records; checks and labels
read only these records, so the rest of gpufleet never needs to know which tool produced a
value, nor which vendors there are.

Host facts carry these records (``HostFacts.accelerators``, ``accelerator_versions``,
``accelerator_errors``); NVIDIA's still come from ``nvidia-smi`` (``HostFacts.nvidia_smi``)
and are mapped onto the same records by :func:`accelerators_of`, so consumers read one
shape for every vendor (see docs/architecture.md, "Accelerator facts").
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from gpufleet.domain.vendors import PluginView, bus_vendors, is_registered, plugin
from gpufleet.domain.vendors import Vendor as Vendor  # the records' vendor, re-exported

if TYPE_CHECKING:  # facts.py imports this module: no runtime import back
    from gpufleet.domain.facts import Gpu, HostFacts, PciDevice

#: Vendor -> PCI vendor id, lower-case hex as lspci -nn prints it (from the vendor plugins).
PCI_VENDOR_IDS: Mapping[Vendor, str] = PluginView(lambda p: p.pci_vendor_id)


def normalize_pci_address(address: str) -> str:
    """``"19:00.0"`` / ``"0000:19:00.0"`` / ``"00000000:19:00.0"`` -> ``"0000:19:00.0"``."""
    parts = address.strip().lower().split(":")
    if len(parts) == 2:
        return "0000:" + ":".join(parts)
    if len(parts) == 3:
        # nvidia-smi prints 8-digit domains, VMD uses 5 digits: keep at least 4.
        return f"{parts[0].lstrip('0').rjust(4, '0')}:{parts[1]}:{parts[2]}"
    raise ValueError(f"not a PCI address: {address!r}")


class Health(StrEnum):
    """Health as the vendor tool states it, folded onto three levels plus unknown."""

    OK = "ok"
    WARNING = "warning"
    ALARM = "alarm"  # Ascend "Alarm"/"Critical"; a fault that takes the device out
    UNKNOWN = "unknown"


class LinkState(StrEnum):
    UP = "up"
    DOWN = "down"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class ErrorCounter:
    """One named error counter (ECC, RAS block, PCIe replay, RoCE error packets)."""

    name: str
    count: int


@dataclass(frozen=True, slots=True)
class Link:
    """A device-to-device or device-to-network link (HCCS, XGMI, NVLink, RoCE port)."""

    kind: str  # "hccs", "xgmi", "pcie", "roce", "nvlink", ...
    peer: str | None  # peer device index as text, or None for a network port
    state: LinkState = LinkState.UNKNOWN
    speed: str | None = None


UNKNOWN_MODEL = "unknown"


@dataclass(frozen=True, slots=True)
class Accelerator:
    """One accelerator as the host reports it. ``index`` is the tool's own numbering."""

    vendor: Vendor
    index: int
    model: str  # vendor's model name ("910B3", "Instinct MI100"); UNKNOWN_MODEL if none
    bus_id: str | None = None  # normalised "0000:c1:00.0"
    pci_device_id: str | None = None  # lower-case hex without 0x ("738c"), as lspci -nn
    serial: str | None = None
    uuid: str | None = None
    memory_total_mib: int | None = None
    memory_used_mib: int | None = None
    health: Health = Health.UNKNOWN
    error_codes: tuple[str, ...] = ()
    error_counters: tuple[ErrorCounter, ...] = ()
    temperature_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    firmware: Mapping[str, str] = field(default_factory=dict)
    links: tuple[Link, ...] = ()
    #: The full product name the vendor's own tooling reads, where it differs from ``model``
    #: (AMD: the board's ``product_name``, "AMD INSTINCT MI250 (MCM) OAM AC MBA"); None if
    #: not reported. Vendor labels that must match the vendor's labeller read it.
    product_name: str | None = None


@dataclass(frozen=True, slots=True)
class SoftwareVersions:
    """Host-level software stack pinned by baselines."""

    driver: str | None = None
    firmware: str | None = None
    runtime: str | None = None  # CANN toolkit for Ascend, ROCm for AMD, CUDA for NVIDIA
    tool: str | None = None  # npu-smi / rocm-smi version


@dataclass(frozen=True, slots=True)
class AcceleratorInventory:
    """Everything one vendor plugin reports for one host."""

    vendor: Vendor
    accelerators: tuple[Accelerator, ...]
    versions: SoftwareVersions = SoftwareVersions()

    @property
    def count(self) -> int:
        return len(self.accelerators)

    def models(self) -> list[str]:
        return sorted({a.model for a in self.accelerators})


# ---- configuration follows the node type: which vendor, which group ----

# PCI classes of accelerator functions (display/3D/VGA controllers, processing accelerators);
# excludes the HDMI audio functions of AMD boards and NVIDIA's NVSwitch bridges.
_ACCELERATOR_CLASS_IDS = frozenset({"0300", "0302", "0380", "1200"})
_ACCELERATOR_CLASS_NAMES = frozenset(
    {
        "VGA compatible controller",
        "3D controller",
        "Display controller",
        "Processing accelerators",
    }
)


def accelerators_on_bus(devices: Sequence[PciDevice]) -> dict[Vendor, int]:
    """Accelerator functions per vendor in ``lspci`` output (with or without ``-nn``): the
    vendor picks the plugin, so the operator never chooses a per-vendor script. Every vendor
    plugin's PCI id (and lspci vendor name, for output without ``-nn``) is matched, in the
    accelerator classes and the vendor's own (:attr:`VendorPlugin.pci_classes`)."""
    counts = _bus_counts(devices)
    return {Vendor(n): c for n, c in counts.items() if is_registered(n)}


def unread_on_bus(devices: Sequence[PciDevice]) -> dict[str, int]:
    """Accelerator functions of vendors no installed plugin reads
    (:data:`~gpufleet.domain.vendors.PCI_ACCELERATOR_VENDORS`), by vendor name."""
    return {n: c for n, c in _bus_counts(devices).items() if not is_registered(n)}


_UNNAMED = re.compile(r"^Device ([0-9a-f]{4}):[0-9a-f]{4}\b")


def _bus_counts(devices: Sequence[PciDevice]) -> dict[str, int]:
    out: dict[str, int] = {}
    known = bus_vendors() if devices else ()
    for d in devices:
        accelerator = (
            d.class_id in _ACCELERATOR_CLASS_IDS
            if d.class_id is not None
            else d.class_name in _ACCELERATOR_CLASS_NAMES
        )
        unnamed = _UNNAMED.match(d.description) if d.vendor_id is None else None
        for v in known:
            if d.vendor_id is not None:
                mine = d.vendor_id == v.pci_vendor_id
            elif unnamed is not None:  # plain lspci without the vendor in its database
                mine = unnamed.group(1) == v.pci_vendor_id
            else:
                mine = v.lspci_name is not None and d.description.startswith(v.lspci_name)
            if mine and (accelerator or (d.class_id or d.class_name) in v.classes):
                out[v.name] = out.get(v.name, 0) + 1
    return out


def inventory_group(inventory: AcceleratorInventory) -> str | None:
    """The Ansible group of a host by vendor and model, as the vendor's plugin names it
    (``npu_910b``, ``gpu_mi300x``, ``gpu_h800``); None when the host has none or mixed
    models."""
    models = inventory.models()
    if len(models) != 1 or models[0] == UNKNOWN_MODEL:
        return None
    return plugin(inventory.vendor).group(models[0])


# ---- the accelerators of a host, whatever the vendor (reads host facts) ----


def _nvidia_accelerator(gpu: Gpu) -> Accelerator:
    """One NVIDIA GPU of ``nvidia-smi`` as an :class:`Accelerator` record."""
    counters: list[ErrorCounter] = []
    for name, ecc in (("ecc_volatile", gpu.ecc_volatile), ("ecc_aggregate", gpu.ecc_aggregate)):
        if ecc is not None:
            if ecc.correctable is not None:
                counters.append(ErrorCounter(f"{name}_correctable", ecc.correctable))
            if ecc.uncorrectable is not None:
                counters.append(ErrorCounter(f"{name}_uncorrectable", ecc.uncorrectable))
    firmware = {"VBIOS": gpu.vbios_version} if gpu.vbios_version else {}
    return Accelerator(
        vendor=Vendor.NVIDIA,
        index=gpu.index,
        model=gpu.product_name or UNKNOWN_MODEL,
        bus_id=gpu.pci_bus_id,
        serial=gpu.serial,
        uuid=gpu.uuid,
        memory_total_mib=gpu.memory_total_mib,
        memory_used_mib=gpu.memory_used_mib,
        # nvidia-smi states no health word; a GPU in an error state is an alarm
        health=Health.ALARM if gpu.error else Health.UNKNOWN,
        error_codes=(gpu.error,) if gpu.error else (),
        error_counters=tuple(counters),
        temperature_c=gpu.temperature_c,
        power_w=gpu.power_draw_w,
        power_limit_w=gpu.power_limit_w,
        firmware=firmware,
    )


def accelerators_of(facts: HostFacts) -> tuple[Accelerator, ...]:
    """Every accelerator of a host as one record shape: NVIDIA GPUs mapped from
    ``nvidia-smi`` (``facts.gpus``), then the records vendor plugins reported
    (``facts.accelerators``: Ascend NPUs, AMD Instinct GPUs ...), in vendor then index order."""
    nvidia = tuple(_nvidia_accelerator(g) for g in facts.gpus)
    others = tuple(sorted(facts.accelerators, key=lambda a: (a.vendor, a.index)))
    return nvidia + others


def accelerator_versions(facts: HostFacts) -> dict[Vendor, SoftwareVersions]:
    """The host's software stack per vendor present: NVIDIA's driver/CUDA from
    ``nvidia-smi``, the others as their plugin reported them (driver, firmware, CANN/ROCm)."""
    out: dict[Vendor, SoftwareVersions] = {}
    if facts.nvidia_smi is not None and (facts.gpus or facts.driver_version):
        out[Vendor.NVIDIA] = SoftwareVersions(
            driver=facts.driver_version, runtime=facts.cuda_version
        )
    out.update(facts.accelerator_versions)
    return out


def inventories_of(facts: HostFacts) -> tuple[AcceleratorInventory, ...]:
    """The host's accelerators grouped per vendor (a host may carry several vendors)."""
    accs = accelerators_of(facts)
    versions = accelerator_versions(facts)
    vendors = sorted({a.vendor for a in accs} | set(versions))
    return tuple(
        AcceleratorInventory(
            vendor=v,
            accelerators=tuple(a for a in accs if a.vendor == v),
            versions=versions.get(v, SoftwareVersions()),
        )
        for v in vendors
    )


def other_vendor_host(facts: HostFacts) -> bool:
    """The host's accelerators are all of vendors other than NVIDIA: no NVIDIA GPU read or
    on PCI, and another vendor's accelerators read, failed or on PCI (``nvidia-smi``'s
    failure is then no news; :mod:`gpufleet.domain.checks.accelerator`)."""
    if facts.gpus or facts.pci_gpus:
        return False
    devices = facts.pci_devices or []
    others = {v for v, n in accelerators_on_bus(devices).items() if n and v != Vendor.NVIDIA}
    unread = unread_on_bus(devices)
    return bool(facts.accelerators or facts.accelerator_errors or others or unread)
