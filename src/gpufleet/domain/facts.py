"""Typed facts about a host: what it *has*, as collected. Pure data, no I/O.

Parsers in ``gpufleet.collect`` produce these records from real tool output; the store
serialises them (``model_dump(mode="json")``) into fact snapshots; checks, labels and drift
read them. Every field that an older driver or tool may omit is optional (``None``), never
a made-up default.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field


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
    sm_count: int | None = None


class GpuProcess(Fact):
    """A process holding a GPU context."""

    pid: int
    name: str | None = None
    type: str | None = None
    used_memory_mib: int | None = None


class Gpu(Fact):
    """One GPU as the driver reports it (``nvidia-smi -q -x`` / ``-q`` / ``--query-gpu``)."""

    index: int
    uuid: str | None = None
    serial: str | None = None
    pci_bus_id: str | None = None  # normalised lower-case "0000:19:00.0"
    product_name: str | None = None
    product_brand: str | None = None
    architecture: str | None = None
    vbios_version: str | None = None
    memory_total_mib: int | None = None
    memory_used_mib: int | None = None
    memory_free_mib: int | None = None
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

    driver_version: str | None = None
    cuda_version: str | None = None
    timestamp: str | None = None
    attached_gpus: int | None = None
    gpus: list[Gpu] = Field(default_factory=list)


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

    ca: str  # "mlx5_0"
    port: int
    ca_type: str | None = None
    firmware: str | None = None
    state: str | None = None  # "Active", "Down", "Initializing", ...
    physical_state: str | None = None  # "LinkUp", "Polling", "Disabled", ...
    rate_gbps: float | None = None
    link_layer: str | None = None  # "InfiniBand" | "Ethernet"
    port_guid: str | None = None


class PciDevice(Fact):
    """One line of ``lspci -nn`` (or the header of a ``lspci -vvv`` block)."""

    address: str  # normalised "0000:19:00.0"
    class_name: str
    class_id: str | None = None  # "0302"
    vendor_id: str | None = None  # "10de"
    device_id: str | None = None  # "2330"
    description: str


# --------------------------------------------------------------------- kernel / OS


class XidEvent(Fact):
    """One ``NVRM: Xid`` line from the kernel log."""

    code: int
    pci_address: str | None = None  # as printed, e.g. "PCI:0000:19:00"
    time: datetime | None = None
    time_raw: str | None = None
    pid: int | None = None
    message: str
    line: int | None = None  # 1-based line in the captured log


class OsRelease(Fact):
    """``/etc/os-release``."""

    id: str | None = None
    version_id: str | None = None
    pretty_name: str | None = None


class BlockDevice(Fact):
    """A whole disk from ``lsblk``."""

    name: str
    size_bytes: int
    transport: str | None = None  # "nvme", "sata", ...
    rotational: bool | None = None
    model: str | None = None


# --------------------------------------------------------------------- whole host


class HostFacts(Fact):
    """Everything one collection learned about one host.

    ``problems`` lists non-fatal oddities found while parsing (a section missing, a tool
    failing) as human-readable strings naming the source; the facts that did parse are kept.
    """

    collected_at: datetime
    hostname: str | None = None
    os: OsRelease | None = None
    kernel: str | None = None
    cpu_count: int | None = None
    memory_total_kib: int | None = None
    system_vendor: str | None = None
    system_product: str | None = None
    modules: list[str] = Field(default_factory=list)
    sysctls: dict[str, str] = Field(default_factory=dict)
    nvidia_smi: NvidiaSmiReport | None = None
    nvidia_smi_error: str | None = None  # e.g. "nvidia-smi: command not found (rc=127)"
    topology: TopoMatrix | None = None
    nvlink: NvlinkStatus | None = None
    ib_ports: list[IbPort] = Field(default_factory=list)
    pci_devices: list[PciDevice] = Field(default_factory=list)
    xids: list[XidEvent] = Field(default_factory=list)
    block_devices: list[BlockDevice] = Field(default_factory=list)
    fabricmanager_active: bool | None = None
    fabricmanager_version: str | None = None  # nv-fabricmanager --version
    container_toolkit: str | None = None  # nvidia-ctk --version (NVIDIA Container Toolkit)
    problems: list[str] = Field(default_factory=list)

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
        """NVIDIA display/3D controllers on the PCI bus (GPUs the driver may not see)."""
        return [
            d
            for d in self.pci_devices
            if d.vendor_id == "10de" and (d.class_id or "").startswith("03")
        ]

    @property
    def nouveau_loaded(self) -> bool:
        return "nouveau" in self.modules
