"""What one inspection sweep saw on one host (:class:`HostSample`), and what it could not
see (:class:`ProbeFailure`): the data the health rules (:mod:`gpufleet.domain.rules`) judge.

No data is a fault (issue 24 item 1): every failure to observe is named by a kind of
:data:`OBSERVE_KINDS`, so a rule of kind ``observe`` can act on it; a sample whose GPU query
failed keeps ``gpus`` None (the rules see nothing, never "healthy").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

#: Kinds of failure to observe the probe reports (``kind: observe`` rules name one):
OBSERVE_KINDS: dict[str, str] = {
    "gpu_tool_missing": "the GPU tool (nvidia-smi) is not installed or not on the PATH",
    "driver_not_loaded": "the GPU tool cannot talk to the driver (driver not loaded)",
    "gpu_handle_error": "the driver cannot reach a GPU (device handle / Unknown Error)",
    "gpu_error_state": "a GPU reports an error state (GPU is lost, requires reset, ERR!)",
    "gpu_tool_error": "the GPU tool failed or answered something unreadable",
    "probe_timeout": "the GPU tool did not answer within the probe's timeout",
    "kmsg_unreadable": "kernel-log Xid lines that cannot be read (cut or garbled)",
    "part_unreadable": "a part of the probe (ports, disks, uptime, driver age) unreadable",
}


#: Failures that are events, seen once (a cut log line is reported by the sweep that first
#: reads it), not states: an ``observe`` rule counts them within its ``window`` (current boot),
#: as an Xid rule counts Xid lines.
EVENT_KINDS: frozenset[str] = frozenset({"kmsg_unreadable"})


# ------------------------------------------------------------------------------ metrics
# What a health rule may name (:mod:`gpufleet.domain.rules` refuses anything else at load).

#: GPU metrics a rule may name (attributes of :class:`GpuSample`, flags and clock reasons).
GPU_METRICS: frozenset[str] = frozenset(
    {
        "temperature_c",
        "power_w",
        "sm_clock_mhz",
        "mem_clock_mhz",
        "utilization_gpu_pct",
        "utilization_memory_pct",
        "memory_used_mib",
        "ecc_volatile_correctable",
        "ecc_volatile_uncorrectable",
        "ecc_aggregate_correctable",
        "ecc_aggregate_uncorrectable",
        "retired_single_bit",
        "retired_double_bit",
        "retired_pending",
        "remap_correctable",
        "remap_uncorrectable",
        "remap_pending",
        "remap_failure",
        "fan_pct",
        "pcie_gen",
        "pcie_width",
        "pcie_width_ratio",
    }
)
#: Host metrics a ``scope: host`` threshold rule may name (properties of :class:`HostSample`).
HOST_METRICS: frozenset[str] = frozenset({"gpus_missing"})
#: Port counters a ``scope: port`` rule may name (what the probe reads from sysfs).
PORT_METRICS: tuple[str, ...] = (
    "link_downed",
    "link_error_recovery",
    "symbol_error",
    "port_rcv_errors",
    "port_rcv_remote_physical_errors",
    "port_xmit_discards",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
)
#: What the engine evaluates, per scope: the kinds it dispatches there (issue 24 item 4: a
#: rule it cannot evaluate is refused at load, never accepted to never fire).
SCOPE_KINDS: dict[str, frozenset[str]] = {
    "gpu": frozenset({"threshold", "increase", "flag", "straggler"}),
    "port": frozenset({"threshold", "increase"}),
    "disk": frozenset({"threshold"}),
    "host": frozenset({"threshold", "xid", "observe"}),
}
CLOCK_REASONS: frozenset[str] = frozenset(
    {
        "sw_power_cap",
        "hw_slowdown",
        "hw_thermal_slowdown",
        "hw_power_brake_slowdown",
        "sw_thermal_slowdown",
        "sync_boost",
    }
)
#: Multi-node NVLink fabric conditions of a GPU (the decision table of
#: :mod:`gpufleet.domain.fabric`; issue 27), held in :attr:`GpuSample.reasons` beside the
#: clock reasons and named by ``flag`` rules: the GPU fails multi-node NVLink, the fault is
#: rack-scoped (health Unhealthy, a route / access-timeout flag, an incorrect configuration),
#: the fabric is restricted (Limited Capacity / Degraded bandwidth).
FABRIC_CONDITIONS: frozenset[str] = frozenset(
    {"nvl_fabric_failed", "nvl_fabric_rack", "nvl_fabric_restricted"}
)


@dataclass(frozen=True)
class ProbeFailure:
    """One failure to observe: its kind (a key of :data:`OBSERVE_KINDS`) and the tool's words."""

    kind: str
    detail: str


@dataclass(frozen=True)
class GpuSample:
    """One GPU in one sweep (the ``--query-gpu`` CSV row); None: not reported."""

    index: int
    uuid: str | None = None
    model: str | None = None
    pci_bus_id: str | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    sm_clock_mhz: float | None = None
    max_sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    utilization_gpu_pct: float | None = None
    utilization_memory_pct: float | None = None
    memory_used_mib: float | None = None
    ecc_volatile_correctable: int | None = None
    ecc_volatile_uncorrectable: int | None = None
    ecc_aggregate_correctable: int | None = None
    ecc_aggregate_uncorrectable: int | None = None
    retired_single_bit: int | None = None
    retired_double_bit: int | None = None
    retired_pending: bool | None = None
    remap_correctable: int | None = None
    remap_uncorrectable: int | None = None
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    fan_pct: float | None = None
    pcie_gen: int | None = None
    pcie_gen_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    #: Active clock-event reasons (``hw_slowdown``, ``hw_power_brake_slowdown`` ...) and
    #: multi-node NVLink fabric conditions (:data:`FABRIC_CONDITIONS`).
    reasons: frozenset[str] = frozenset()

    @property
    def pcie_width_ratio(self) -> float | None:
        if self.pcie_width is None or not self.pcie_width_max:
            return None
        return self.pcie_width / self.pcie_width_max


@dataclass(frozen=True)
class PortSample:
    """One IB/RoCE port (``mlx5_0/1``): its state and error counters from sysfs."""

    name: str
    state: str | None = None
    counters: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class DiskSample:
    """Space on one configured path."""

    path: str
    size_kib: int
    used_kib: int

    @property
    def used_pct(self) -> float:
        return 100.0 * self.used_kib / self.size_kib if self.size_kib else 0.0


@dataclass(frozen=True)
class XidSeen:
    """One kernel-log Xid line new since the previous sweep."""

    code: int
    pci: str | None = None
    time: datetime | None = None
    message: str = ""


@dataclass(frozen=True)
class HostSample:
    """What one sweep saw on one host. ``gpus`` None: the GPU query failed (not "no GPUs")."""

    at: datetime
    gpus: tuple[GpuSample, ...] | None
    xids: tuple[XidSeen, ...] = ()
    ports: tuple[PortSample, ...] = ()
    disks: tuple[DiskSample, ...] = ()
    uptime_s: float | None = None
    nvlink: bool = False
    #: Seconds since the NVIDIA driver (module ``nvidia``) was loaded; None: not known.
    driver_age_s: float | None = None
    #: What the probe could not observe (issue 24 item 1): one entry per failure, in order.
    failures: tuple[ProbeFailure, ...] = ()
    #: The boot this sample was taken in (``/proc/sys/kernel/random/boot_id``, else
    #: ``uptime:<boot time>``); None: not known (a sample stored before issue 24).
    boot_id: str | None = None
    #: The GPUs the host should have (its validated/expected count, set by the sweep from the
    #: store, never by the probe); None: not known.
    expected_gpus: int | None = None

    @property
    def gpus_missing(self) -> int | None:
        """GPUs fewer than expected; None when either count is unknown (the query failed)."""
        if self.gpus is None or self.expected_gpus is None:
            return None
        return max(0, self.expected_gpus - len(self.gpus))

    def failed(self, kind: str) -> ProbeFailure | None:
        """The first failure of ``kind`` in this sample."""
        return next((f for f in self.failures if f.kind == kind), None)

    @property
    def settled_s(self) -> float | None:
        """Seconds since the later of boot and driver load (what a rule's grace counts)."""
        known = [x for x in (self.uptime_s, self.driver_age_s) if x is not None]
        return min(known) if known else None


def same_pci(xid_pci: str | None, bus_id: str | None) -> bool:
    """True when an Xid's ``PCI:0000:19:00`` names the GPU at ``00000000:19:00.0``."""
    if not xid_pci or not bus_id:
        return False

    def key(text: str, drop_function: bool) -> tuple[str, str] | None:
        text = text.removeprefix("PCI:").strip().lower()
        if drop_function:
            text = text.split(".")[0]
        parts = text.split(":")
        if len(parts) < 2:
            return None
        return parts[-2].lstrip("0") or "0", parts[-1].lstrip("0") or "0"

    a, b = key(xid_pci, True), key(bus_id, True)
    return a is not None and a == b
