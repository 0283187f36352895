"""Fabric readiness on NVSwitch systems: every GPU has joined the NVLink fabric.

On an NVSwitch host (HGX/DGX H100 and later) a GPU whose fabric state is not ``Completed``
fails every CUDA call with error 802 (``cudaErrorSystemNotReady``) while ``nvidia-smi`` looks
healthy; the state only reaches ``Completed`` once nvidia-fabricmanager (the same version as
the driver) has trained the fabric, and on Hopper and later the fabric manager needs the
NVLink subnet manager's kernel modules (``ib_umad``). This check makes such a host fail every
profile, so it never validates.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpufleet.domain.checks.base import CheckContext, CheckResult, CheckStatus, check, res
from gpufleet.domain.facts import Gpu, HostFacts
from gpufleet.domain.health import Fault

#: Architectures whose GPUs report a fabric state (NVML GPU fabric info is Hopper and later)
#: and the kernel modules their fabric needs; ``architectures`` in the profile replaces it.
DEFAULT_ARCHITECTURES: dict[str, list[str]] = {
    "Hopper": ["ib_umad"],
    "Blackwell": ["ib_umad"],
}
COMPLETED = "completed"
SUCCESS = "success"


def _reports_state(gpu: Gpu, architectures: Mapping[str, Any]) -> bool:
    arch = (gpu.architecture or "").lower()
    return any(arch == str(a).lower() for a in architectures)


def _needed_modules(gpus: list[Gpu], architectures: Mapping[str, Any]) -> list[str]:
    found: set[str] = set()
    by_arch = {str(a).lower(): mods for a, mods in architectures.items()}
    for g in gpus:
        mods = by_arch.get((g.architecture or "").lower())
        if isinstance(mods, list):
            found.update(str(m) for m in mods)
    return sorted(found)


@check("fabric_ready", architectures=dict, fabricmanager=bool)
def fabric_ready(facts: HostFacts, ctx: CheckContext, params: Mapping[str, Any]) -> CheckResult:
    """Every GPU's fabric state is ``Completed`` (status ``Success``) on an NVSwitch system.

    An NVSwitch system is one whose spec says so (``gpufleet_nvswitch=true``). There, a GPU of
    an architecture in ``architectures`` that does not report its fabric state fails (fail
    closed); the fabric manager version must equal the driver's (``fabricmanager: false``
    skips that, e.g. where the fabric is managed off the node), and the kernel modules listed
    for the GPUs' architecture must be loaded. Wherever a GPU reports a state other than
    ``Completed`` the check fails, NVSwitch in the spec or not. GPUs of an unknown
    architecture are not required to report a state: every driver that runs Hopper prints
    the architecture.
    """
    name = "fabric_ready"
    architectures: Mapping[str, Any] = params.get("architectures", DEFAULT_ARCHITECTURES)
    nvswitch = bool(ctx.spec.nvswitch)
    if facts.nvidia_smi is None:
        if nvswitch:
            return res(name, CheckStatus.FAIL, "GPU report not collected: fabric state unknown")
        return res(name, CheckStatus.SKIP, "GPU report not collected; no NVSwitch expected")
    gpus = facts.gpus
    problems: list[str] = []
    states: dict[int, str | None] = {}
    for g in gpus:
        fabric = g.fabric
        state = fabric.state if fabric else None
        status = fabric.status if fabric else None
        states[g.index] = state
        if state is None:
            if nvswitch and _reports_state(g, architectures):
                problems.append(f"GPU {g.index} ({g.architecture}) reports no fabric state")
            continue
        if state.lower() != COMPLETED:
            problems.append(f"GPU {g.index} fabric state {state!r} (status {status or '?'})")
        elif status is not None and status.lower() != SUCCESS:
            problems.append(f"GPU {g.index} fabric status {status!r}")
    modules: list[str] = []
    if nvswitch:
        if params.get("fabricmanager", True):
            driver = facts.driver_version
            fm = facts.fabricmanager_version
            if fm is None:
                problems.append("fabric manager version not collected")
            elif driver is None or fm != driver:
                problems.append(f"fabric manager {fm} differs from driver {driver or '?'}")
        modules = _needed_modules(gpus, architectures)
        if modules and not facts.modules:
            problems.append(f"kernel modules not collected (need {', '.join(modules)})")
        else:
            missing = [m for m in modules if m not in facts.modules]
            if missing:
                problems.append(f"kernel module {', '.join(missing)} not loaded")
    ev: dict[str, Any] = {"nvswitch": nvswitch, "states": states, "modules": modules}
    if problems:
        return res(name, CheckStatus.FAIL, "; ".join(problems), Fault.FABRICMANAGER_DOWN, **ev)
    reported = [i for i, s in states.items() if s is not None]
    if not nvswitch and not reported:
        return res(name, CheckStatus.SKIP, "no NVSwitch fabric", **ev)
    return res(name, CheckStatus.PASS, f"fabric Completed on {len(reported)} GPUs", **ev)
