"""One host's accelerators for its pages (issue 29 item 5): the CLI's ``hosts show``, its
``--json`` (the API's ``HostDetailOut.accelerators`` / ``software``) and the dashboard's host
page read this one model, whatever the vendor.

It is read from the vendor-neutral inventory (:func:`~gpufleet.domain.accelerators.
inventories_of`): NVIDIA GPUs mapped from ``nvidia-smi`` and every other vendor's records as
its plugin reported them, so an Ascend, AMD or Hygon host shows its NPUs/GPUs/DCUs, health,
error codes and its own software stack (driver, firmware, CANN/ROCm/DTK ...), and never an
NVIDIA phrase: the ``nvidia-smi`` error is shown only on a host whose accelerators are not
all of other vendors (:func:`~gpufleet.domain.accelerators.other_vendor_host`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpufleet.domain.accelerators import Health, Vendor, inventories_of, other_vendor_host
from gpufleet.domain.facts import HostFacts
from gpufleet.domain.vendors import plugin
from gpufleet.service.hosts.vendor_exports import accelerator_noun

#: Counters that count errors or faults (ECC, RAS, PCIe replays, error packets, an absent
#: optical module, lanes losing signal or lock); not plain statistics (link-up counts).
ERROR_COUNTER = re.compile(r"err|ecc|correctable|replay|fail|absent|_los_|_lol_|drop|retired")


@dataclass(frozen=True)
class AcceleratorRow:
    """One accelerator (any vendor), as the host pages show it."""

    vendor: str
    index: int
    model: str
    serial: str | None
    uuid: str | None
    bus_id: str | None
    memory_total_mib: int | None
    memory_used_mib: int | None
    temperature_c: float | None
    power_w: float | None
    power_limit_w: float | None
    #: ok / warning / alarm / unknown (the vendor tool's word, folded; NVIDIA states none)
    health: str
    #: the vendor's error codes and states (NVIDIA: the GPU's error state, a row-remap
    #: failure or pending remap), and the error counters (:data:`ERROR_COUNTER`) not zero
    error_codes: list[str] = field(default_factory=list)
    error_counters: dict[str, int] = field(default_factory=dict)
    firmware: dict[str, str] = field(default_factory=dict)

    @property
    def main_firmware(self) -> tuple[str, str] | None:
        """The one firmware version an identifier table shows: the VBIOS, else the entry
        named firmware, else the only one; None when none or no entry stands out."""
        fw = self.firmware
        for key in ("VBIOS", *(k for k in fw if "firmware" in k.lower())):
            if key in fw:
                return key, fw[key]
        return next(iter(fw.items())) if len(fw) == 1 else None

    @property
    def errors(self) -> list[str]:
        """The error codes, then the counters as ``name=count``."""
        return [*self.error_codes, *(f"{k}={n}" for k, n in self.error_counters.items())]

    @property
    def bad(self) -> bool:
        """In alarm, or reporting an error code or an uncorrectable error count."""
        return (
            self.health == Health.ALARM
            or bool(self.error_codes)
            or any("uncorrectable" in k for k in self.error_counters)
        )


@dataclass(frozen=True)
class VendorSoftware:
    """One vendor present on the host: what its accelerators are and its software stack."""

    vendor: str
    #: what the vendor's accelerators are called (GPUs, NPUs, DCUs, accelerators)
    noun: str
    description: str
    count: int
    models: list[str]
    driver: str | None
    firmware: str | None
    runtime: str | None
    #: the runtime's name (``CUDA``, ``CANN``, ``ROCM``, ``DTK`` ...) from the vendor plugin
    runtime_name: str | None
    tool: str | None
    tool_version: str | None
    #: why the vendor's tool could not vouch for its accelerators (None: it answered)
    error: str | None = None
    #: NVIDIA only: its GPUs on the PCI bus (the driver may see fewer); None: not counted
    on_pci: int | None = None


@dataclass(frozen=True)
class HostAccelerators:
    """A host's vendors (software stacks) and its accelerators, vendor then index order."""

    vendors: list[VendorSoftware]
    accelerators: list[AcceleratorRow]

    @property
    def noun(self) -> str:
        nouns = {v.noun for v in self.vendors}
        return nouns.pop() if len(nouns) == 1 else "accelerators"


def _nvidia_states(facts: HostFacts) -> dict[int, list[str]]:
    """NVIDIA GPUs' row-remap state as error codes (the inventory record has no field)."""
    out: dict[int, list[str]] = {}
    for g in facts.gpus:
        rr = g.remapped_rows
        if rr is not None and (rr.failure or rr.pending):
            out[g.index] = ["row remap failure" if rr.failure else "row remap pending"]
    return out


def host_accelerators(facts: HostFacts) -> HostAccelerators:
    """The accelerators and vendor stacks of the host ``facts`` describe."""
    remaps = _nvidia_states(facts)
    rows: list[AcceleratorRow] = []
    vendors: list[VendorSoftware] = []
    nvidia_host = not other_vendor_host(facts)
    inventories = list(inventories_of(facts))
    present = {inv.vendor for inv in inventories}
    present |= set(facts.accelerator_errors)  # a vendor whose tool failed: shown, with why
    if nvidia_host and (facts.nvidia_smi_error or facts.pci_gpus):
        present.add(Vendor.NVIDIA)  # nvidia-smi failed on an NVIDIA host (or one of none)
    for vendor in sorted(present):
        p = plugin(vendor)
        inv = next((i for i in inventories if i.vendor == vendor), None)
        accs = inv.accelerators if inv is not None else ()
        ver = inv.versions if inv is not None else None
        is_core = p.collector is None  # collected by the core: nvidia-smi
        error = facts.accelerator_errors.get(vendor)
        if is_core and nvidia_host:
            error = facts.nvidia_smi_error
        vendors.append(
            VendorSoftware(
                vendor=str(vendor),
                noun=accelerator_noun(vendor),
                description=p.description,
                count=len(accs),
                models=sorted({a.model for a in accs}),
                driver=ver.driver if ver else None,
                firmware=ver.firmware if ver else None,
                runtime=ver.runtime if ver else None,
                runtime_name=p.exports.runtime.upper() if p.exports.runtime else None,
                tool=p.collector.tool if p.collector else None,
                tool_version=ver.tool if ver else None,
                error=error,
                on_pci=len(facts.pci_gpus) if is_core and facts.pci_devices is not None else None,
            )
        )
        for a in accs:
            extra = remaps.get(a.index, []) if is_core else []
            rows.append(
                AcceleratorRow(
                    vendor=str(a.vendor),
                    index=a.index,
                    model=a.model,
                    serial=a.serial,
                    uuid=a.uuid,
                    bus_id=a.bus_id,
                    memory_total_mib=a.memory_total_mib,
                    memory_used_mib=a.memory_used_mib,
                    temperature_c=a.temperature_c,
                    power_w=a.power_w,
                    power_limit_w=a.power_limit_w,
                    health=str(a.health),
                    error_codes=[*a.error_codes, *extra],
                    error_counters={
                        c.name: c.count
                        for c in a.error_counters
                        if c.count and ERROR_COUNTER.search(c.name)
                    },
                    firmware=dict(a.firmware),
                )
            )
    return HostAccelerators(vendors=vendors, accelerators=rows)
