"""What a profile that promises proof asks of the host besides its facts: a baseline of the
right status for its pool (the version pins are not checked otherwise: every pin check skips
without one), and every GPU usable (a partial host is never offered for multi-host work)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpufleet.domain.checks.base import CheckContext, CheckResult, CheckStatus, check, res
from gpufleet.domain.facts import HostFacts
from gpufleet.domain.spec import BaselineStatus

#: Checks whose failure means "not proven (yet)" rather than "broken": a profile lost only to
#: these is named, with the reason, on an available host (run the test, assign the baseline).
PROOF_CHECKS = frozenset({"baseline", "dcgm_diag", "nccl", "gpu_burn", "all_gpus_usable"})


@check("baseline", status=str)
def baseline(facts: HostFacts, ctx: CheckContext, params: Mapping[str, Any]) -> CheckResult:
    """The host's pool (or the host) has a baseline of ``status`` (default ``validated``)."""
    name = "baseline"
    want = str(params.get("status") or BaselineStatus.VALIDATED.value)
    b = ctx.baseline
    if b is None:
        return res(name, CheckStatus.FAIL, "no baseline assigned", required=want)
    if b.status.value != want:
        msg = f"baseline {b.name} is {b.status.value}, {want} required"
        return res(name, CheckStatus.FAIL, msg, baseline=b.name, required=want)
    return res(name, CheckStatus.PASS, f"baseline {b.name} ({want})", baseline=b.name)


@check("all_gpus_usable")
def all_gpus_usable(
    facts: HostFacts, ctx: CheckContext, params: Mapping[str, Any]
) -> CheckResult:
    """No GPU of the host was left out as unusable (``ctx.unusable``: a partial host)."""
    name = "all_gpus_usable"
    if ctx.unusable:
        msg = f"partial host: {'; '.join(ctx.unusable)}"
        return res(name, CheckStatus.FAIL, msg, unusable=list(ctx.unusable))
    return res(name, CheckStatus.PASS, "every GPU usable")
