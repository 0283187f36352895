"""Health and fault vocabulary, kept beside the lifecycle state (Ironic ``health`` + ``fault``).

A host can be ``available`` with ``Health.WARNING`` and ``Fault.IB_DOWN`` (it still serves
inference); only the faults in :data:`HARDWARE_FAULTS` quarantine.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum


class Health(StrEnum):
    """Rolled-up condition, Redfish ``Status.Health`` style."""

    OK = "ok"
    WARNING = "warning"
    CRITICAL = "critical"


class Fault(StrEnum):
    """Why a host (or a check) stopped; the label/taint value when quarantined."""

    GPU_LOST = "gpu_lost"
    """A GPU on the PCI bus is missing from the driver, or fell off the bus."""
    DRIVER_NOT_LOADED = "driver_not_loaded"
    """nvidia-smi cannot talk to a driver although NVIDIA GPUs are on the PCI bus."""
    ECC_UNCORRECTABLE = "ecc_uncorrectable"
    """Uncorrectable (double-bit) ECC errors since the last driver load."""
    ROW_REMAP_FAILURE = "row_remap_failure"
    """Row remapping failure flag set: field diagnostics and RMA path."""
    RETIRED_PAGES_LIMIT = "retired_pages_limit"
    """Pre-Ampere page retirement near its limit of 64."""
    FATAL_XID = "fatal_xid"
    """A fatal Xid (per the Xid policy) in the kernel log."""
    NVLINK_DOWN = "nvlink_down"
    """NVLinks inactive or fewer than expected."""
    FABRICMANAGER_DOWN = "fabricmanager_down"
    """nvidia-fabricmanager not running on an NVSwitch system."""
    IB_DOWN = "ib_down"
    """Fewer high-speed IB/RoCE ports up than expected."""
    PCIE_DEGRADED = "pcie_degraded"
    """A GPU's PCIe link is below the expected generation or width."""
    DIAG_FAILED = "diag_failed"
    """An active test (DCGM diag, gpu-burn, NCCL) failed or underperformed."""
    RECLAIM_FAILED = "reclaim_failed"
    """Cleanup after release failed."""
    TIMED_OUT = "timed_out"
    """A transient state outlived its deadline."""
    HOST_KEY_CHANGED = "host_key_changed"
    """The host's SSH key changed: possibly reimaged, possibly not the same machine."""
    UNREACHABLE = "unreachable"
    """Collection could not reach the host."""
    ACCELERATOR_ALARM = "accelerator_alarm"
    """An accelerator of another vendor reports health Alarm (Ascend npu-smi; issue 15)."""
    NVL_FABRIC_FAILED = "nvl_fabric_failed"
    """A GPU cannot take part in multi-node NVLink (fabric not registered, an error status,
    no partition: :mod:`gpufleet.domain.fabric`); the host still serves single-host work."""
    NVL_FABRIC_RACK = "nvl_fabric_rack"
    """The NVLink fabric reports a fault that concerns the whole rack (health Unhealthy, a
    route or access-timeout flag, an incorrect configuration): a rack-scoped finding."""
    FABRIC_SPLIT_HOST = "fabric_split_host"
    """GPUs of one host report different NVLink domains (clusterUuid) or partitions
    (cliqueId)."""
    TELEMETRY_LOST = "telemetry_lost"
    """The inspection probe could not observe the GPUs (tool missing, failing or timing out)
    for as many sweeps in a row as the policy says (issue 24: no data is a fault)."""


#: Faults that quarantine a host whatever its profiles say. Others fail checks (and may cost
#: profiles) but leave the host usable for what it still passes.
HARDWARE_FAULTS: frozenset[Fault] = frozenset(
    {
        Fault.GPU_LOST,
        Fault.ECC_UNCORRECTABLE,
        Fault.ROW_REMAP_FAILURE,
        Fault.FATAL_XID,
        Fault.ACCELERATOR_ALARM,
    }
)


def health_for(
    faults: Iterable[Fault],
    *,
    warnings: bool = False,
    hardware_faults: frozenset[Fault] = HARDWARE_FAULTS,
) -> Health:
    """Critical with a hardware fault, warning with any other fault or warning, else ok."""
    found = set(faults)
    if found & hardware_faults:
        return Health.CRITICAL
    if found or warnings:
        return Health.WARNING
    return Health.OK
