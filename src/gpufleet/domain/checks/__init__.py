"""Pure validation checks: facts + context in, one :class:`CheckResult` out.

Every check has the signature ``(facts, ctx, params) -> CheckResult`` (see
:mod:`~gpufleet.domain.checks.base`) and is registered in :data:`CHECKS` with the profile
parameters it accepts (:data:`CHECK_PARAMS`, used to validate profiles). The checks live by
concern: ``gpu`` (inventory), ``memory`` (ECC, row remapping, retired pages), ``xid``,
``fabric`` (NVLink, fabric manager, IB/RoCE), ``fabric_ready`` (NVSwitch fabric state),
``nvl_fabric`` (multi-node NVLink: the decision table of :mod:`gpufleet.domain.fabric`),
``host`` (persistence, nouveau, PCIe), ``node`` (CPU/storage nodes: OS facts, disks, no
accelerator), ``proof`` (a baseline of the right status, every
GPU usable), ``accelerator`` (other vendors' accelerators:
health, network ports, temperature; inventory of other-vendor hosts), ``drift`` (generated
from :mod:`gpufleet.domain.pins`)
and ``active`` (DCGM, NCCL, gpu-burn evidence).

A ``fail`` with a fault in :data:`~gpufleet.domain.health.HARDWARE_FAULTS` quarantines; other
faults (``ib_down``, ``nvlink_down`` ...) only cost the profiles that run the check.
"""

from __future__ import annotations

# Importing the concern modules registers their checks.
from gpufleet.domain.checks import (
    accelerator,
    active,
    fabric,
    fabric_ready,
    gpu,
    host,
    memory,
    node,
    nvl_fabric,
    proof,
    xid,
)
from gpufleet.domain.checks.base import (
    CHECK_PARAMS,
    CHECKS,
    ActiveEvidence,
    CheckContext,
    CheckFn,
    CheckResult,
    CheckStatus,
)
from gpufleet.domain.checks.drift import DRIFT_CHECKS
from gpufleet.domain.health import HARDWARE_FAULTS

__all__ = [
    "CHECKS",
    "CHECK_PARAMS",
    "DRIFT_CHECKS",
    "HARDWARE_FAULTS",
    "ActiveEvidence",
    "CheckContext",
    "CheckFn",
    "CheckResult",
    "CheckStatus",
    "accelerator",
    "active",
    "fabric",
    "fabric_ready",
    "gpu",
    "host",
    "memory",
    "node",
    "nvl_fabric",
    "proof",
    "xid",
]
