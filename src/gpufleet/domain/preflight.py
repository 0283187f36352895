"""Node-local preflight verdict (``gpufleet preflight``): pure judgement of one validation.

The node runs the same checks and profiles as fleet validation on its own facts; this module
turns the outcome into one verdict with recommended actions, and the verdict into an exit
status a Slurm prolog or a Kubernetes init container acts on:

========== ====== ===============================================================
verdict    exit   when
========== ====== ===============================================================
PASS       0      the requested profile (or at least one profile) passed, nothing to note
WARNING    0      passed, with warnings (advisory failures, non-fatal Xids ...)
CRITICAL   1      a check failed with a fault (hardware, fabric, driver ...)
UNKNOWN    2      the node could not be judged (no GPU report, a check that could not see
                  its input): fail closed, never treated as healthy
========== ====== ===============================================================

Recommended actions come from a fixed ladder (:class:`Action`); a fatal Xid takes its action
from the Xid catalog's "immediate action" (``RESET_GPU`` -> ``reset_gpu``, ``RESTART_BM`` ->
``reboot`` ...), other faults from :data:`FAULT_ACTIONS`.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from gpufleet.domain.checks import CheckResult, CheckStatus
from gpufleet.domain.facts import HostFacts
from gpufleet.domain.health import HARDWARE_FAULTS, Fault
from gpufleet.domain.profiles import ValidationOutcome
from gpufleet.domain.spec import ExpectedSpec
from gpufleet.domain.xid import XidPolicy


class Verdict(StrEnum):
    PASS = "PASS"
    WARNING = "WARNING"
    CRITICAL = "CRITICAL"
    UNKNOWN = "UNKNOWN"


#: The one exit-status table (see the module docstring).
EXIT_CODES: dict[Verdict, int] = {
    Verdict.PASS: 0,
    Verdict.WARNING: 0,
    Verdict.CRITICAL: 1,
    Verdict.UNKNOWN: 2,
}


class Action(StrEnum):
    """The remediation ladder, mildest first."""

    NONE = "none"
    RESET_GPU = "reset_gpu"
    REBOOT = "reboot"
    RESEAT_OR_REPLACE = "reseat_or_replace"
    ESCALATE = "escalate"


_LADDER = list(Action)

#: First rung for a fault (a fatal Xid uses the catalog instead).
FAULT_ACTIONS: dict[Fault, Action] = {
    Fault.GPU_LOST: Action.REBOOT,
    Fault.DRIVER_NOT_LOADED: Action.REBOOT,
    Fault.ECC_UNCORRECTABLE: Action.RESET_GPU,
    Fault.ROW_REMAP_FAILURE: Action.RESEAT_OR_REPLACE,
    Fault.RETIRED_PAGES_LIMIT: Action.RESEAT_OR_REPLACE,
    Fault.FATAL_XID: Action.RESET_GPU,
    Fault.NVLINK_DOWN: Action.RESET_GPU,
    Fault.FABRICMANAGER_DOWN: Action.REBOOT,
    Fault.IB_DOWN: Action.ESCALATE,
    Fault.PCIE_DEGRADED: Action.RESEAT_OR_REPLACE,
    Fault.DIAG_FAILED: Action.ESCALATE,
}

#: Xid catalog "immediate action" -> ladder rung (unknown actions escalate).
XID_ACTIONS: dict[str, Action] = {
    "IGNORE": Action.NONE,
    "RESTART_APP": Action.NONE,
    "RESET_GPU": Action.RESET_GPU,
    "WORKFLOW_XID_48": Action.RESET_GPU,
    "WORKFLOW_NVLINK_ERR": Action.RESET_GPU,
    "WORKFLOW_NVLINK5_ERR": Action.RESET_GPU,
    "RESTART_BM": Action.REBOOT,
    "RESTART_VM": Action.REBOOT,
    "CHECK_MECHANICALS": Action.RESEAT_OR_REPLACE,
    "CONTACT_SUPPORT": Action.RESEAT_OR_REPLACE,
}


class Finding(BaseModel):
    """One check that did not simply pass, with what to do about it."""

    model_config = ConfigDict(frozen=True)

    check: str
    status: CheckStatus
    message: str
    fault: Fault | None = None
    action: Action
    advisory: bool = False


class PreflightReport(BaseModel):
    """What ``gpufleet preflight`` prints (``--json``) and may post to the store."""

    model_config = ConfigDict(frozen=True)

    host: str
    verdict: Verdict
    exit_code: int
    actions: list[Action]
    reason: str
    profile: str | None = None
    profiles_passed: list[str] = Field(default_factory=list)
    findings: list[Finding] = Field(default_factory=list)
    duration_s: float | None = None


def local_spec(facts: HostFacts) -> ExpectedSpec:
    """What a node with no inventory can expect of itself: NVSwitch when lspci shows NVIDIA
    bridges (class 0680, the NVSwitches), so the fabric readiness check binds."""
    nvswitch = any(
        d.vendor_id == "10de" and (d.class_id or "") == "0680" for d in facts.pci_devices or []
    )
    return ExpectedSpec(nvswitch=True) if nvswitch else ExpectedSpec()


def _action(result: CheckResult, xid_policy: XidPolicy) -> Action:
    if result.status is CheckStatus.PASS or result.status is CheckStatus.SKIP:
        return Action.NONE
    if result.fault is Fault.FATAL_XID:
        codes: Iterable[Any] = result.evidence.get("fatal") or []
        rungs = [XID_ACTIONS.get(xid_policy.lookup(int(c)).action, Action.ESCALATE) for c in codes]
        return max(rungs, key=_LADDER.index, default=FAULT_ACTIONS[Fault.FATAL_XID])
    if result.fault is not None:
        return FAULT_ACTIONS.get(result.fault, Action.ESCALATE)
    if result.status is CheckStatus.WARN:
        return Action.NONE
    return Action.ESCALATE  # failed without a fault: could not see its input


def unknown(host: str, reason: str, profile: str | None = None) -> PreflightReport:
    """The verdict when the node could not be judged at all (no facts)."""
    return PreflightReport(
        host=host,
        verdict=Verdict.UNKNOWN,
        exit_code=EXIT_CODES[Verdict.UNKNOWN],
        actions=[Action.ESCALATE],
        reason=reason,
        profile=profile,
    )


def judge(
    host: str,
    outcome: ValidationOutcome,
    xid_policy: XidPolicy,
    *,
    profile: str | None = None,
) -> PreflightReport:
    """The verdict of one evaluation (``profile``: the profile that must pass; None: any).

    CRITICAL: a hardware fault anywhere, or the deciding checks failed with a fault.
    UNKNOWN: they failed only without a fault (input not seen). WARNING: passed with
    warnings or advisory failures. PASS otherwise.
    """
    everything = list(outcome.profiles.values())
    scope = [outcome.profiles[profile]] if profile is not None else everything
    deciding = {key for p in scope for key in p.checks.values()}
    passed = sorted(p.name for p in scope if p.passed)
    # Failures binding in every profile in scope decide; with no --profile, one that only
    # some profiles bind merely limits what the node is good for once another profile passed.
    decisive = {k for k in scope[0].failed if all(k in p.failed for p in scope)} if scope else set()
    binding_somewhere = {key for p in scope for key in p.failed}
    if not passed:
        decisive = binding_somewhere
    findings: list[Finding] = []
    for key, result in outcome.results.items():
        if key not in deciding or result.status in (CheckStatus.PASS, CheckStatus.SKIP):
            continue
        findings.append(
            Finding(
                check=key,
                status=result.status,
                message=result.message,
                fault=result.fault,
                action=_action(result, xid_policy),
                advisory=result.status is CheckStatus.FAIL and key not in binding_somewhere,
            )
        )
    hardware = [f for f in findings if f.fault in HARDWARE_FAULTS]
    failed = [f for f in findings if f.check in decisive or f in hardware]
    warnings = [f for f in findings if f.status is CheckStatus.WARN or f.advisory]
    limiting = sorted(p.name for p in scope if not p.passed)
    wanted: set[Action]
    if passed and not failed:
        verdict = Verdict.WARNING if warnings else Verdict.PASS
        reason = f"passed {', '.join(passed)}"
        if limiting:
            reason += f" (not {', '.join(limiting)})"
        wanted = {f.action for f in warnings if f.action is not Action.NONE}
    elif any(f.fault is not None for f in failed):
        verdict = Verdict.CRITICAL
        faulty = [f for f in failed if f.fault is not None]
        reason = "; ".join(f"{f.check}: {f.message}" for f in faulty)
        wanted = {f.action for f in faulty}
    else:
        verdict = Verdict.UNKNOWN
        reason = "; ".join(f"{f.check}: {f.message}" for f in failed) or "no profile passed"
        wanted = {Action.ESCALATE}
    actions = sorted(wanted - {Action.NONE}, key=_LADDER.index) or [Action.NONE]
    return PreflightReport(
        host=host,
        verdict=verdict,
        exit_code=EXIT_CODES[verdict],
        actions=actions,
        reason=reason,
        profile=profile,
        profiles_passed=passed,
        findings=findings,
    )
