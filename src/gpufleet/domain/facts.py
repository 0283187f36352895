"""Typed facts about a host: what it *has*, as collected. Pure data, no I/O.

Parsers in ``gpufleet.collect`` produce these records from real tool output; the store
serialises them (``model_dump(mode="json")``) into fact snapshots; checks, labels and drift
read them. Every field that an older driver or tool may omit is optional (``None``), never
a made-up default.

*Not collected* is not *empty*: the lists a check relies on (``xids``, ``ib_ports``,
``pci_devices``, ``block_devices``) are ``None`` when their tool failed, was missing or could
not be read, and ``[]`` only when the tool answered and listed nothing.

*Bounds*: every value that reaches the store is bounded here (string lengths within the store's
columns and the kernel's own limits, counts and sizes within what any real server has), so a
value that parses but does not fit is refused the same way on SQLite and PostgreSQL, before the
database sees it. The collector turns such a refusal into a ``bad output`` for that host.

*Stored snapshots* carry ``facts_version`` (:data:`FACTS_VERSION`); an older one is upgraded on
read by the registry in :mod:`gpufleet.domain.facts_upgrade`. Snapshots written before
version 2 did not distinguish "not collected" from "none": a failed ``dmesg``/``ibstat``/
``lspci``/``lsblk`` was stored as ``[]``. Reading such a snapshot (no ``facts_version``) turns
those empty lists into ``None`` (fail closed): an old snapshot never vouches for "no Xid".
A non-empty list was a complete parse then too and is kept.

*Accelerators of other vendors* (version 3): ``accelerators`` holds the vendor-neutral records
(:class:`gpufleet.domain.accelerators.Accelerator`) that vendor plugins report (Ascend NPUs,
AMD Instinct GPUs), ``accelerator_versions`` their software stacks, ``accelerator_errors`` a
vendor whose accelerators ``lspci`` lists but whose tool was missing or unreadable (fail
closed). NVIDIA GPUs stay in ``nvidia_smi``; :func:`gpufleet.domain.accelerators.accelerators_of`
gives every vendor's accelerators as one shape. A version-2 snapshot never ran vendor tools:
its upgrader leaves ``accelerators`` empty and records an error for each non-NVIDIA
accelerator vendor its ``lspci`` listed, so history never vouches for an unread NPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, model_validator

from gpufleet.domain.accelerators import Accelerator, SoftwareVersions, Vendor
from gpufleet.domain.facts_upgrade import LEGACY_FACTS_VERSION, Upgrader, upgrade_facts

#: Version of the facts layout written by this code (see the module docstring). Raising it
#: needs an upgrader from the previous version in ``facts_upgrade.UPGRADERS``.
FACTS_VERSION = 3


@dataclass(frozen=True)
class FactsFormat:
    """The facts format a read brings a snapshot to: its version and the upgraders up to it
    (None: :data:`~gpufleet.domain.facts_upgrade.UPGRADERS`). Passed as the validation
    context (``HostFacts.model_validate(doc, context=FactsFormat(...))``) it reads stored
    history as a next format would, before that format ships; the default is this one."""

    version: int | None = None  # None: FACTS_VERSION
    upgraders: dict[int, Upgrader] | None = None


# Bounds (see the module docstring). Linux caps a release and a hostname at 64 characters
# (__NEW_UTS_LEN), a module name at 56; the rest stay inside the store's columns.
MAX_GPUS = 64
MAX_GPU_MEMORY_MIB = 1 << 24  # 16 TiB per GPU
MAX_HOST_MEMORY_KIB = 1 << 40  # 1 PiB of RAM
MAX_CPUS = 1 << 16
SHORT = 64  # uuid, serial, vbios, kernel release, hostname, IB CA names
NAME = 128  # product names, OS names, DMI strings, models
TEXT = 2048  # free text from a tool (Xid message, lspci description)


class Fact(BaseModel):
    """Base for all fact records: immutable, unknown keys refused."""

    model_config = ConfigDict(frozen=True, extra="forbid")


# --------------------------------------------------------------------------- GPUs


class EccErrors(Fact):
    """ECC error counters of one GPU (sum over memory locations), volatile or aggregate."""

    correctable: int | None = None
    uncorrectable: int | None = None


class RetiredPages(Fact):
    """Dynamic page retirement (pre-Ampere)."""

    single_bit: int | None = None
    double_bit: int | None = None
    pending: bool | None = None


class RemappedRows(Fact):
    """Row remapping (Ampere and later)."""

    correctable: int | None = None
    uncorrectable: int | None = None
    pending: bool | None = None
    failure: bool | None = None


class MigDevice(Fact):
    """One MIG device (GPU instance / compute instance) on a GPU."""

    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    profile: str | None = None
    memory_total_mib: int | None = None
    memory_used_mib: int | None = Field(default=None, ge=0, le=MAX_GPU_MEMORY_MIB)
    memory_free_mib: int | None = Field(default=None, ge=0, le=MAX_GPU_MEMORY_MIB)
    sm_count: int | None = None


class ClockEventReasons(Fact):
    """Why the clocks are held down ("clocks event reasons", "clocks throttle reasons"
    before R535): each flag True while active; the counters are microseconds spent in that
    state since the driver loaded (R535+, where printed)."""

    gpu_idle: bool | None = None
    applications_clocks_setting: bool | None = None
    sw_power_cap: bool | None = None
    hw_slowdown: bool | None = None
    hw_thermal_slowdown: bool | None = None
    hw_power_brake_slowdown: bool | None = None
    sw_thermal_slowdown: bool | None = None
    sync_boost: bool | None = None
    display_clocks_setting: bool | None = None
    sw_power_cap_us: int | None = Field(default=None, ge=0)
    sync_boost_us: int | None = Field(default=None, ge=0)
    sw_thermal_slowdown_us: int | None = Field(default=None, ge=0)
    hw_thermal_slowdown_us: int | None = Field(default=None, ge=0)
    hw_power_brake_us: int | None = Field(default=None, ge=0)


class TemperatureThresholds(Fact):
    """The GPU's temperature limits. Older drivers print absolute thresholds (``shutdown_c``
    ...); newer ones on some boards print them relative to T.Limit instead (``*_tlimit_c``:
    degrees of headroom, negative past the limit), with ``tlimit_c`` the current headroom."""

    shutdown_c: float | None = None
    slowdown_c: float | None = None
    max_operating_c: float | None = None
    memory_max_c: float | None = None
    target_c: float | None = None
    tlimit_c: float | None = None
    shutdown_tlimit_c: float | None = None
    slowdown_tlimit_c: float | None = None
    max_operating_tlimit_c: float | None = None
    memory_max_tlimit_c: float | None = None


class GpuFabric(Fact):
    """``Fabric`` of ``nvidia-smi -q`` (NVSwitch systems, R520+): the GPU's registration with
    the fabric manager. ``state`` is ``Completed`` once the GPU joined the fabric
    (``Not Started`` / ``In Progress`` before: CUDA fails with error 802 meanwhile)."""

    state: str | None = Field(default=None, max_length=SHORT)
    status: str | None = Field(default=None, max_length=NAME)
    clique_id: str | None = Field(default=None, max_length=SHORT)
    cluster_uuid: str | None = Field(default=None, max_length=SHORT)
    health_summary: str | None = Field(default=None, max_length=SHORT)
    #: ``Health`` block (R550+ and later): ``Full`` / ``Degraded`` bandwidth, the recovery
    #: and fault flags, ``incorrect_configuration`` (``None`` printed when there is none) and
    #: ``partition_assigned`` (R580 XML, where printed). Absent (None) when not reported.
    bandwidth: str | None = Field(default=None, max_length=SHORT)
    route_recovery_in_progress: bool | None = None
    route_unhealthy: bool | None = None
    access_timeout_recovery: bool | None = None
    incorrect_configuration: str | None = Field(default=None, max_length=NAME)
    partition_assigned: str | None = Field(default=None, max_length=SHORT)


class GpuPlatform(Fact):
    """``Platform Info`` of ``nvidia-smi -q`` (R550+): where the GPU sits in a rack-scale
    system (GB200/GB300 NVL72). ``chassis_serial`` is the rack's serial, ``slot_number`` the
    slot in the chassis (switch trays counted), ``tray_index`` the compute tray (switches not
    counted), ``host_id`` the node within the slot, ``module_id`` the GPU within the node.
    Absent (None) where the driver prints N/A (HGX, PCIe boards)."""

    chassis_serial: str | None = Field(default=None, max_length=SHORT)
    slot_number: int | None = Field(default=None, ge=0, le=1024)
    tray_index: int | None = Field(default=None, ge=0, le=1024)
    host_id: int | None = Field(default=None, ge=0, le=1024)
    peer_type: str | None = Field(default=None, max_length=SHORT)
    module_id: int | None = Field(default=None, ge=0, le=1024)
    gpu_fabric_guid: str | None = Field(default=None, max_length=SHORT)


class GpuProcess(Fact):
    """A process holding a GPU context."""

    pid: int
    name: str | None = None
    type: str | None = None
    used_memory_mib: int | None = None


class Gpu(Fact):
    """One GPU as the driver reports it (``nvidia-smi -q -x`` / ``-q`` / ``--query-gpu``)."""

    index: int = Field(ge=0, lt=MAX_GPUS)
    uuid: str | None = Field(default=None, max_length=SHORT)
    serial: str | None = Field(default=None, max_length=SHORT)
    pci_bus_id: str | None = Field(default=None, max_length=32)  # "0000:19:00.0"
    #: The device file's number (/dev/nvidia<minor>): not the index, which is PCI order.
    minor_number: int | None = Field(default=None, ge=0, le=255)
    product_name: str | None = Field(default=None, max_length=SHORT)
    product_brand: str | None = Field(default=None, max_length=SHORT)
    architecture: str | None = Field(default=None, max_length=SHORT)
    vbios_version: str | None = Field(default=None, max_length=SHORT)
    memory_total_mib: int | None = Field(default=None, ge=0, le=MAX_GPU_MEMORY_MIB)
    memory_used_mib: int | None = Field(default=None, ge=0, le=MAX_GPU_MEMORY_MIB)
    memory_free_mib: int | None = Field(default=None, ge=0, le=MAX_GPU_MEMORY_MIB)
    #: The GPU is in an error state: nvidia-smi printed "GPU is lost", "GPU requires reset",
    #: or "Unknown Error"/"ERR!" for a value every working GPU reports (the way gpustat keeps
    #: an invalid GPU in its list). E.g. "GPU is lost (product_name)". Fails GPU health.
    error: str | None = Field(default=None, max_length=NAME)
    persistence_mode: bool | None = None
    mig_mode_current: bool | None = None
    mig_mode_pending: bool | None = None
    mig_devices: list[MigDevice] = Field(default_factory=list)
    ecc_mode_current: bool | None = None
    ecc_mode_pending: bool | None = None
    ecc_volatile: EccErrors | None = None
    ecc_aggregate: EccErrors | None = None
    retired_pages: RetiredPages | None = None
    remapped_rows: RemappedRows | None = None
    temperature_c: float | None = None
    temperature_memory_c: float | None = None
    power_draw_w: float | None = None
    power_limit_w: float | None = None
    #: Beside the enforced limit: what an admin requested, the board default and its range.
    power_limit_requested_w: float | None = None
    power_limit_default_w: float | None = None
    power_limit_min_w: float | None = None
    power_limit_max_w: float | None = None
    temperature_thresholds: TemperatureThresholds | None = None
    clock_event_reasons: ClockEventReasons | None = None
    compute_mode: str | None = Field(default=None, max_length=32)  # "Default", ...
    utilization_memory_pct: float | None = None  # memory controller busy
    #: R590+: a memory channel / TPC repair waits for the next GPU reset; memory that
    #: cannot be repaired any more.
    ecc_channel_repair_pending: bool | None = None
    ecc_tpc_repair_pending: bool | None = None
    ecc_unrepairable_memory: bool | None = None
    fabric: GpuFabric | None = None
    platform: GpuPlatform | None = None
    #: ``HMM`` / ``ATS`` (R550+, Linux); None also where nvidia-smi prints "None" / N/A.
    addressing_mode: str | None = Field(default=None, max_length=SHORT)
    clocks_sm_mhz: int | None = None
    clocks_mem_mhz: int | None = None
    clocks_max_sm_mhz: int | None = None
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None
    fan_speed_pct: float | None = None
    utilization_gpu_pct: float | None = None
    performance_state: str | None = None
    processes: list[GpuProcess] = Field(default_factory=list)


class NvidiaSmiReport(Fact):
    """Everything one ``nvidia-smi -q`` run (XML or text) says about the host's GPUs."""

    driver_version: str | None = Field(default=None, max_length=32)
    cuda_version: str | None = Field(default=None, max_length=16)
    timestamp: str | None = Field(default=None, max_length=NAME)
    attached_gpus: int | None = Field(default=None, ge=0, le=MAX_GPUS)
    gpus: list[Gpu] = Field(default_factory=list, max_length=MAX_GPUS)


# ----------------------------------------------------------------- topology / NVLink


class TopoMatrix(Fact):
    """``nvidia-smi topo -m``: link type between each pair of devices (GPU and NIC)."""

    devices: list[str] = Field(default_factory=list)  # "GPU0".."GPU7", "NIC0"/"mlx5_0"...
    links: dict[str, dict[str, str]] = Field(default_factory=dict)  # links[a][b] = "NV18"
    cpu_affinity: dict[str, str] = Field(default_factory=dict)
    numa_affinity: dict[str, str] = Field(default_factory=dict)
    nic_names: dict[str, str] = Field(default_factory=dict)  # "NIC0" -> "mlx5_0" (legend)


class NvlinkLink(Fact):
    """One NVLink of one GPU."""

    link: int
    active: bool
    speed_gbps: float | None = None  # GB/s as nvidia-smi prints it


class GpuNvlinks(Fact):
    """The NVLinks of one GPU from ``nvidia-smi nvlink -s``."""

    gpu_index: int
    uuid: str | None = None
    links: list[NvlinkLink] = Field(default_factory=list)


class NvlinkStatus(Fact):
    """``nvidia-smi nvlink -s``; ``supported`` is False e.g. in MIG mode."""

    supported: bool = True
    message: str | None = None
    gpus: list[GpuNvlinks] = Field(default_factory=list)


# --------------------------------------------------------------------- NICs / PCI


class IbPort(Fact):
    """One port of an RDMA adapter (``ibstat``)."""

    ca: str = Field(max_length=SHORT)  # "mlx5_0"
    port: int = Field(ge=0, le=255)
    ca_type: str | None = Field(default=None, max_length=SHORT)
    firmware: str | None = Field(default=None, max_length=SHORT)
    state: str | None = Field(default=None, max_length=32)  # "Active", "Down", ...
    physical_state: str | None = Field(default=None, max_length=32)  # "LinkUp", "Polling", ...
    rate_gbps: float | None = Field(default=None, ge=0, le=100_000, allow_inf_nan=False)
    link_layer: str | None = Field(default=None, max_length=32)  # "InfiniBand" | "Ethernet"
    port_guid: str | None = Field(default=None, max_length=SHORT)


class PciDevice(Fact):
    """One line of ``lspci -nn`` (or the header of a ``lspci -vvv`` block)."""

    address: str = Field(max_length=32)  # normalised "0000:19:00.0"
    class_name: str = Field(max_length=NAME)
    class_id: str | None = Field(default=None, max_length=8)  # "0302"
    vendor_id: str | None = Field(default=None, max_length=8)  # "10de"
    device_id: str | None = Field(default=None, max_length=8)  # "2330"
    description: str = Field(max_length=TEXT)


# --------------------------------------------------------------------- kernel / OS


class XidEvent(Fact):
    """One ``NVRM: Xid`` line from the kernel log."""

    code: int = Field(ge=0, le=1_000_000)
    pci_address: str | None = Field(default=None, max_length=SHORT)  # e.g. "PCI:0000:19:00"
    time: datetime | None = None
    time_raw: str | None = Field(default=None, max_length=SHORT)
    pid: int | None = None
    process_name: str | None = Field(default=None, max_length=NAME)  # "name=python3"
    message: str = Field(max_length=TEXT)
    line: int | None = None  # 1-based line in the captured log


class UnreadableXid(Fact):
    """A kernel-log line that has ``NVRM: Xid`` but could not be read (cut mid-line ...).

    Kept so the xid check can refuse to vouch for a log it could not fully read.
    """

    line: int
    time: datetime | None = None  # when the prefix still carries a readable timestamp
    text: str = Field(max_length=TEXT)  # the line from "NVRM: Xid" on, shortened


class OsRelease(Fact):
    """``/etc/os-release``."""

    id: str | None = Field(default=None, max_length=SHORT)
    version_id: str | None = Field(default=None, max_length=SHORT)
    pretty_name: str | None = Field(default=None, max_length=NAME)


class DmiIdentity(Fact):
    """``/sys/class/dmi/id``: the machine's SMBIOS identity as the OS sees it (in-band). Each
    value is ``None`` when not collected: ``serial``, ``uuid`` and ``board_serial`` are
    readable by root only, and boards leave some blank. Compared with what the BMC reports
    (:func:`gpufleet.domain.bmc.identity_findings`) and, for ``uuid``, used to tell two host
    names that are one machine (:mod:`gpufleet.domain.identity`)."""

    vendor: str | None = Field(default=None, max_length=NAME)  # sys_vendor
    product: str | None = Field(default=None, max_length=NAME)  # product_name
    serial: str | None = Field(default=None, max_length=NAME)  # product_serial
    uuid: str | None = Field(default=None, max_length=SHORT)  # product_uuid
    board_serial: str | None = Field(default=None, max_length=NAME)
    bios_version: str | None = Field(default=None, max_length=NAME)


class BlockDevice(Fact):
    """A whole disk from ``lsblk``."""

    name: str = Field(max_length=SHORT)
    size_bytes: int = Field(ge=0, lt=1 << 63)
    transport: str | None = Field(default=None, max_length=32)  # "nvme", "sata", ...
    rotational: bool | None = None
    model: str | None = Field(default=None, max_length=NAME)


# --------------------------------------------------------------------- whole host


def _accelerator_fits(a: Accelerator) -> None:
    """The bounds of the module docstring for a vendor plugin's record (a dataclass, so its
    fields carry no pydantic constraints): ValueError naming the device and field."""
    where = f"{a.vendor} #{a.index}"
    if not 0 <= a.index < 1 << 16:
        raise ValueError(f"{where}: index out of range")
    for name, value, limit in (("model", a.model, SHORT), ("bus_id", a.bus_id, 32),
                               ("pci_device_id", a.pci_device_id, 8),
                               ("serial", a.serial, SHORT), ("uuid", a.uuid, SHORT),
                               ("product_name", a.product_name, NAME)):
        if value is not None and len(value) > limit:
            raise ValueError(f"{where}: {name} longer than {limit} characters")
    for name, mib in (("memory_total_mib", a.memory_total_mib),
                      ("memory_used_mib", a.memory_used_mib)):
        if mib is not None and not 0 <= mib <= MAX_GPU_MEMORY_MIB:
            raise ValueError(f"{where}: {name} {mib} out of range")
    if len(a.error_codes) > 256 or any(len(c) > NAME for c in a.error_codes):
        raise ValueError(f"{where}: error codes too many or too long")
    if len(a.error_counters) > 256 or len(a.links) > 1024 or len(a.firmware) > 64:
        raise ValueError(f"{where}: too many counters, links or firmware entries")
    if any(len(k) > SHORT or len(v) > SHORT for k, v in a.firmware.items()):
        raise ValueError(f"{where}: firmware entry longer than {SHORT} characters")


class HostFacts(Fact):
    """Everything one collection learned about one host.

    ``problems`` lists non-fatal oddities found while parsing (a section missing, a tool
    failing) as human-readable strings naming the source; the facts that did parse are kept.

    ``xids``, ``ib_ports``, ``pci_devices`` and ``block_devices`` are ``None`` when not
    collected or unreadable, ``[]`` when the tool listed nothing. Code that builds facts
    itself passes ``facts_version=FACTS_VERSION``; without it the input is read as a legacy
    snapshot (see the module docstring).
    """

    facts_version: int = LEGACY_FACTS_VERSION
    collected_at: datetime
    hostname: str | None = Field(default=None, max_length=SHORT)
    os: OsRelease | None = None
    kernel: str | None = Field(default=None, max_length=SHORT)
    cpu_count: int | None = Field(default=None, ge=0, le=MAX_CPUS)
    memory_total_kib: int | None = Field(default=None, ge=0, le=MAX_HOST_MEMORY_KIB)
    system_vendor: str | None = Field(default=None, max_length=NAME)
    system_product: str | None = Field(default=None, max_length=NAME)
    #: The whole DMI identity (serial, UUID ...); None when not collected (and in snapshots
    #: written before it existed: an additive field, read as None, no version bump).
    dmi: DmiIdentity | None = None
    modules: list[str] = Field(default_factory=list, max_length=65_536)
    sysctls: dict[str, str] = Field(default_factory=dict)
    nvidia_smi: NvidiaSmiReport | None = None
    nvidia_smi_error: str | None = None  # e.g. "nvidia-smi: command not found (rc=127)"
    topology: TopoMatrix | None = None
    nvlink: NvlinkStatus | None = None
    ib_ports: list[IbPort] | None = Field(default=None, max_length=1024)
    pci_devices: list[PciDevice] | None = Field(default=None, max_length=65_536)
    xids: list[XidEvent] | None = Field(default=None, max_length=100_000)
    xid_unreadable: list[UnreadableXid] = Field(default_factory=list, max_length=100_000)
    block_devices: list[BlockDevice] | None = Field(default=None, max_length=65_536)
    fabricmanager_active: bool | None = None
    fabricmanager_version: str | None = Field(default=None, max_length=SHORT)
    container_toolkit: str | None = Field(default=None, max_length=SHORT)  # nvidia-ctk
    #: Accelerators reported by vendor plugins other than nvidia-smi (module docstring).
    accelerators: tuple[Accelerator, ...] = Field(default=(), max_length=MAX_GPUS)
    accelerator_versions: dict[Vendor, SoftwareVersions] = Field(default_factory=dict)
    #: vendor -> why its tool could not vouch for the accelerators lspci lists
    accelerator_errors: dict[Vendor, str] = Field(default_factory=dict)
    problems: list[str] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _upgrade_stored(cls, data: Any, info: ValidationInfo) -> Any:
        """Bring a snapshot of an older format to :data:`FACTS_VERSION` (the upgraders of
        :mod:`gpufleet.domain.facts_upgrade`, in order; a pre-version-2 one is read fail
        closed: its ``[]`` may mean "not collected"). A validation context that is a
        :class:`FactsFormat` reads as that format instead (a next format, before it ships)."""
        if not isinstance(data, dict):
            return data
        fmt = info.context if isinstance(info.context, FactsFormat) else FactsFormat()
        version = FACTS_VERSION if fmt.version is None else fmt.version
        return upgrade_facts(data, version, fmt.upgraders)

    @model_validator(mode="after")
    def _models_fit(self) -> HostFacts:
        # The distinct GPU models are stored joined ("A, B") in a 128-character column.
        models = sorted({g.product_name for g in self.gpus if g.product_name})
        if len(", ".join(models)) > NAME:
            raise ValueError(f"{len(models)} distinct GPU models: too many to record")
        for a in self.accelerators:
            _accelerator_fits(a)
        for vendor, v in self.accelerator_versions.items():
            for what, value in (("driver", v.driver), ("firmware", v.firmware),
                                ("runtime", v.runtime), ("tool", v.tool)):
                if value is not None and len(value) > SHORT:
                    raise ValueError(f"{vendor} {what} version longer than {SHORT} characters")
        return self

    @property
    def gpus(self) -> list[Gpu]:
        """GPUs the driver sees (empty when nvidia-smi failed)."""
        return list(self.nvidia_smi.gpus) if self.nvidia_smi else []

    @property
    def driver_version(self) -> str | None:
        return self.nvidia_smi.driver_version if self.nvidia_smi else None

    @property
    def cuda_version(self) -> str | None:
        return self.nvidia_smi.cuda_version if self.nvidia_smi else None

    @property
    def pci_gpus(self) -> list[PciDevice]:
        """NVIDIA display/3D controllers on the PCI bus (GPUs the driver may not see);
        empty when lspci was not collected (check ``pci_devices is None`` for that)."""
        return [
            d
            for d in self.pci_devices or []
            if d.vendor_id == "10de" and (d.class_id or "").startswith("03")
        ]

    @property
    def nouveau_loaded(self) -> bool:
        return "nouveau" in self.modules
