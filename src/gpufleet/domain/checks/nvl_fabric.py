"""Multi-node NVLink (GB200/GB300 NVL72): the fabric decision table of
:mod:`gpufleet.domain.fabric` as a check.

``nvl_fabric`` passes a healthy member, skips a host that is not in a multi-node NVLink domain
(a fact: HGX, PCIe), warns on a restricted fabric (Limited Capacity / Degraded bandwidth) where
the profile tolerates reduced bandwidth, and fails otherwise. Its evidence carries the derived
rack facts (rack id, NVLink domain, partition, tray position) and whether the fault is
rack-scoped, for whoever groups hosts into racks. Collected facts carry no boot time, so a
fabric still registering fails here (fail closed); the inspection rules apply the boot grace.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpufleet.domain.checks.base import CheckContext, CheckResult, CheckStatus, check, res
from gpufleet.domain.fabric import FabricOutcome, host_fabric
from gpufleet.domain.facts import HostFacts
from gpufleet.domain.health import Fault


@check("nvl_fabric", require_member=bool, tolerate_degraded=bool)
def nvl_fabric(facts: HostFacts, ctx: CheckContext, params: Mapping[str, Any]) -> CheckResult:
    """The host's multi-node NVLink fabric is usable.

    ``require_member`` (default false): a host outside any multi-node NVLink domain fails
    instead of skipping (a profile that needs the NVLink domain). ``tolerate_degraded``
    (default true): a restricted fabric warns; false fails it.
    """
    name = "nvl_fabric"
    if facts.nvidia_smi is None:
        return res(name, CheckStatus.SKIP, "GPU report not collected: fabric unknown")
    hf = host_fabric(facts)
    ev: dict[str, Any] = {
        "outcome": hf.outcome.value,
        "reasons": list(hf.reasons),
        "rack_scoped": hf.rack_scoped,
        "rack": hf.rack_id,
        "nvl_domain": hf.nvl_domain,
        "partition": hf.partition,
        "tray": None if hf.tray is None else [hf.tray.slot, hf.tray.tray_index, hf.tray.host_id],
    }
    require = bool(params.get("require_member", False))
    tolerate = bool(params.get("tolerate_degraded", True))
    outcome = hf.outcome
    if outcome is FabricOutcome.OK:
        return res(name, CheckStatus.PASS, hf.message, **ev)
    if outcome is FabricOutcome.NOT_MEMBER:
        if require:  # a fact, not a fault: the host serves every other profile
            return res(name, CheckStatus.FAIL, hf.message + " (required)", **ev)
        return res(name, CheckStatus.SKIP, hf.message, **ev)
    if outcome is FabricOutcome.RESTRICTED:
        if tolerate:
            return res(name, CheckStatus.WARN, hf.message, **ev)
        return res(name, CheckStatus.FAIL, hf.message + " (full bandwidth required)",
                   Fault.NVL_FABRIC_FAILED, **ev)
    if hf.split:
        fault = Fault.FABRIC_SPLIT_HOST
    elif hf.rack_scoped:
        fault = Fault.NVL_FABRIC_RACK
    else:
        fault = Fault.NVL_FABRIC_FAILED
    return res(name, CheckStatus.FAIL, hf.message, fault, **ev)
