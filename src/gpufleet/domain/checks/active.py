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


def _missing(name: str, what: str, ctx: CheckContext, params: Mapping[str, Any]) -> CheckResult:
    since = f" since {ctx.evidence.since}" if ctx.evidence.since else ""
    if params.get("require"):
        return res(name, CheckStatus.FAIL, f"no {what} result{since} (required)")
    return res(name, CheckStatus.SKIP, f"no {what} result{since}")


@check("dcgm_diag", require=bool, min_level=int, or_gpu_burn=bool)
def dcgm_diag(facts: HostFacts, ctx: CheckContext, params: Mapping[str, Any]) -> CheckResult:
    """The DCGM diagnostic (``ctx.evidence.dcgm_diag``) passed, at ``min_level`` or deeper
    (a result whose level is unknown does not count then). ``or_gpu_burn``: a passing
    gpu-burn stands in when there is no such DCGM result."""
    name = "dcgm_diag"
    result = ctx.evidence.dcgm_diag
    min_level = params.get("min_level")
    burn = ctx.evidence.gpu_burn
    at = f" at level {min_level} or deeper" if min_level else ""
    what = f"DCGM diag{at}" + (" or gpu-burn" if params.get("or_gpu_burn") else "")
    if result is not None and not result.passed:
        failed = result.failed_gpus
        error = result.runtime_error
        detail = f" on GPU {', '.join(map(str, failed))}" if failed else ""
        detail += f" ({error})" if error else ""
        ev: dict[str, Any] = {
            "passed": result.passed,
            "level": result.level,
            "failed_gpus": list(failed),
        }
        return res(name, CheckStatus.FAIL, f"DCGM diag failed{detail}", Fault.DIAG_FAILED, **ev)
    # Every dcgmi diag run is level 1 at least: an unknown level is deep enough for that.
    deep_enough = result is not None and (
        min_level is None
        or min_level <= 1
        or (result.level is not None and result.level >= min_level)
    )
    if result is not None and deep_enough:
        return res(name, CheckStatus.PASS, "DCGM diag passed", passed=True, level=result.level)
    if params.get("or_gpu_burn") and burn is not None and burn.passed:
        return res(name, CheckStatus.PASS, "gpu-burn OK on all GPUs (no DCGM diag)", gpu_burn=True)
    if result is not None:
        ran = f"level {result.level}" if result.level is not None else "an unknown level"
        msg = f"DCGM diag ran at {ran}, level {min_level} required"
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
        return _missing(name, "NCCL all-reduce", ctx, params)
    busbw = result.avg_bus_bw_gbps
    floor = params.get("min_busbw_gbps")
    ev: dict[str, Any] = {"avg_bus_bw_gbps": busbw, "min_busbw_gbps": floor}
    if busbw is None:
        return res(
            name, CheckStatus.FAIL, "NCCL test reported no bus bandwidth", Fault.DIAG_FAILED, **ev
        )
    wrong = result.wrong_total
    if wrong:
        msg = f"NCCL test reported {wrong} wrong values (data corruption)"
        return res(name, CheckStatus.FAIL, msg, Fault.DIAG_FAILED, wrong=wrong, **ev)
    if floor is not None and busbw < floor:
        msg = f"NCCL busbw {busbw:g} GB/s below {floor:g} GB/s"
        return res(name, CheckStatus.FAIL, msg, Fault.DIAG_FAILED, **ev)
    if params.get("model_floor"):
        product = facts.gpus[0].product_name if facts.gpus else None
        model = floor_for(product)
        peak = result.max_bus_bw_gbps
        ev["max_bus_bw_gbps"] = peak
        if model is None:
            msg = (
                f"no NCCL bus-bandwidth floor known for {product or 'this GPU model'} "
                "(set min_busbw_gbps in the profile)"
            )
            return res(name, CheckStatus.FAIL, msg, **ev)
        ev["model_floor_gbps"] = model.floor_gbps
        if peak < model.floor_gbps:
            msg = (
                f"NCCL all-reduce peak busbw {peak:g} GB/s below the {model.model} floor "
                f"{model.floor_gbps:g} GB/s"
            )
            return res(name, CheckStatus.FAIL, msg, Fault.DIAG_FAILED, **ev)
        msg = f"NCCL all-reduce peak busbw {peak:g} GB/s (floor {model.floor_gbps:g} GB/s)"
        return res(name, CheckStatus.PASS, msg, **ev)
    return res(name, CheckStatus.PASS, f"NCCL busbw {busbw:g} GB/s", **ev)


@check("gpu_burn", require=bool)
def gpu_burn(facts: HostFacts, ctx: CheckContext, params: Mapping[str, Any]) -> CheckResult:
    """gpu-burn (``ctx.evidence.gpu_burn``) reported every GPU OK."""
    name = "gpu_burn"
    result = ctx.evidence.gpu_burn
    if result is None:
        return _missing(name, "gpu-burn", ctx, params)
    if not result.passed:
        bad = result.faulty
        where = f" on GPU {', '.join(map(str, bad))}" if bad else ""
        return res(name, CheckStatus.FAIL, f"gpu-burn failed{where}", Fault.DIAG_FAILED, bad=bad)
    return res(name, CheckStatus.PASS, "gpu-burn OK on all GPUs")
