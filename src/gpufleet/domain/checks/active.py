"""Evidence of active tests (DCGM diagnostics, nccl-tests, gpu-burn), from ``ctx.evidence``.

Each skips when no result counts for the host, unless the profile sets ``require: true``;
then a missing result fails with what it had to be newer than ("no NCCL result since the
driver change on 2026-12-01"). A result recorded before the host's last change never counts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpufleet.domain.checks.base import NUMBER, CheckContext, CheckResult, CheckStatus, check, res
from gpufleet.domain.facts import HostFacts
from gpufleet.domain.health import Fault
from gpufleet.domain.nccl_floors import floor_for
from gpufleet.domain.reasons import Reason, parse, reason


def _missing(
    name: str, what: Reason, ctx: CheckContext, params: Mapping[str, Any]
) -> CheckResult:
    since = ctx.evidence.since
    required = "_required" if params.get("require") else ""
    status = CheckStatus.FAIL if params.get("require") else CheckStatus.SKIP
    if since:
        after = parse(since, fragment=True) or since
        return res(name, status, reason(f"active.missing_since{required}", what=what, since=after))
    return res(name, status, reason(f"active.missing{required}", what=what))


def _dcgm_what(min_level: object, or_burn: bool) -> Reason:
    """``"DCGM diag at level 2 or deeper or gpu-burn"``, as a fragment."""
    if min_level:
        code = "what.dcgm_level_or_burn" if or_burn else "what.dcgm_level"
        return reason(code, level=str(min_level))
    return reason("what.dcgm_or_burn" if or_burn else "what.dcgm")


@check("dcgm_diag", require=bool, min_level=int, or_gpu_burn=bool)
def dcgm_diag(facts: HostFacts, ctx: CheckContext, params: Mapping[str, Any]) -> CheckResult:
    """The DCGM diagnostic (``ctx.evidence.dcgm_diag``) passed, at ``min_level`` or deeper
    (a result whose level is unknown does not count then). ``or_gpu_burn``: a passing
    gpu-burn stands in when there is no such DCGM result."""
    name = "dcgm_diag"
    result = ctx.evidence.dcgm_diag
    min_level = params.get("min_level")
    burn = ctx.evidence.gpu_burn
    what = _dcgm_what(min_level, bool(params.get("or_gpu_burn")))
    if result is not None and not result.passed:
        failed = result.failed_gpus
        error = result.runtime_error
        gpus = ", ".join(map(str, failed))
        code = "active.dcgm_failed" + ("_on" if failed else "") + ("_error" if error else "")
        why = reason(code, **({"gpus": gpus} if failed else {}),
                     **({"error": error} if error else {}))
        ev: dict[str, Any] = {
            "passed": result.passed,
            "level": result.level,
            "failed_gpus": list(failed),
        }
        return res(name, CheckStatus.FAIL, why, Fault.DIAG_FAILED, **ev)
    # Every dcgmi diag run is level 1 at least: an unknown level is deep enough for that.
    deep_enough = result is not None and (
        min_level is None
        or min_level <= 1
        or (result.level is not None and result.level >= min_level)
    )
    if result is not None and deep_enough:
        return res(name, CheckStatus.PASS, reason("active.dcgm_passed"), passed=True,
                   level=result.level)
    if params.get("or_gpu_burn") and burn is not None and burn.passed:
        return res(name, CheckStatus.PASS, reason("active.burn_instead"), gpu_burn=True)
    if result is not None:
        msg = (
            reason("active.dcgm_shallow", level=result.level, min_level=str(min_level))
            if result.level is not None
            else reason("active.dcgm_unknown_level", min_level=str(min_level))
        )
        return res(name, CheckStatus.FAIL, msg, passed=True, level=result.level)
    return _missing(name, what, ctx, params)


@check("nccl", require=bool, min_busbw_gbps=NUMBER, model_floor=bool)
def nccl(facts: HostFacts, ctx: CheckContext, params: Mapping[str, Any]) -> CheckResult:
    """NCCL test average bus bandwidth (``ctx.evidence.nccl.avg_bus_bw_gbps``) at or above
    ``min_busbw_gbps``; with ``model_floor``, its peak bus bandwidth at or above the GPU
    model's floor (:mod:`gpufleet.domain.nccl_floors`; a model without one fails)."""
    name = "nccl"
    result = ctx.evidence.nccl
    if result is None:
        return _missing(name, reason("what.nccl"), ctx, params)
    busbw = result.avg_bus_bw_gbps
    floor = params.get("min_busbw_gbps")
    ev: dict[str, Any] = {"avg_bus_bw_gbps": busbw, "min_busbw_gbps": floor}
    if busbw is None:
        return res(
            name, CheckStatus.FAIL, reason("active.nccl_no_busbw"), Fault.DIAG_FAILED, **ev
        )
    wrong = result.wrong_total
    if wrong:
        why = reason("active.nccl_wrong", wrong=wrong)
        return res(name, CheckStatus.FAIL, why, Fault.DIAG_FAILED, wrong=wrong, **ev)
    if floor is not None and busbw < floor:
        why = reason("active.nccl_below", busbw=busbw, floor=floor)
        return res(name, CheckStatus.FAIL, why, Fault.DIAG_FAILED, **ev)
    if params.get("model_floor"):
        product = facts.gpus[0].product_name if facts.gpus else None
        model = floor_for(product)
        peak = result.max_bus_bw_gbps
        ev["max_bus_bw_gbps"] = peak
        if model is None:
            why = reason("active.nccl_no_floor", product=product or "this GPU model")
            return res(name, CheckStatus.FAIL, why, **ev)
        ev["model_floor_gbps"] = model.floor_gbps
        if peak < model.floor_gbps:
            why = reason(
                "active.nccl_below_model", peak=peak, model=model.model, floor=model.floor_gbps
            )
            return res(name, CheckStatus.FAIL, why, Fault.DIAG_FAILED, **ev)
        why = reason("active.nccl_model_ok", peak=peak, floor=model.floor_gbps)
        return res(name, CheckStatus.PASS, why, **ev)
    return res(name, CheckStatus.PASS, reason("active.nccl_ok", busbw=busbw), **ev)


@check("gpu_burn", require=bool)
def gpu_burn(facts: HostFacts, ctx: CheckContext, params: Mapping[str, Any]) -> CheckResult:
    """gpu-burn (``ctx.evidence.gpu_burn``) reported every GPU OK."""
    name = "gpu_burn"
    result = ctx.evidence.gpu_burn
    if result is None:
        return _missing(name, reason("what.burn"), ctx, params)
    if not result.passed:
        bad = result.faulty
        why = (
            reason("active.burn_failed_on", gpus=", ".join(map(str, bad)))
            if bad
            else reason("active.burn_failed")
        )
        return res(name, CheckStatus.FAIL, why, Fault.DIAG_FAILED, bad=bad)
    return res(name, CheckStatus.PASS, reason("active.burn_ok"))
