"""Evidence of active tests (DCGM diagnostics, nccl-tests, gpu-burn), from ``ctx.evidence``.

Each skips when no result counts for the host, unless the profile sets ``require: true``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpufleet.domain.checks.base import NUMBER, CheckContext, CheckResult, CheckStatus, check, res
from gpufleet.domain.facts import HostFacts
from gpufleet.domain.health import Fault


def _missing(name: str, what: str, params: Mapping[str, Any]) -> CheckResult:
    if params.get("require"):
        return res(name, CheckStatus.FAIL, f"no {what} result (required)")
    return res(name, CheckStatus.SKIP, f"no {what} result")


@check("dcgm_diag", require=bool, min_level=int)
def dcgm_diag(facts: HostFacts, ctx: CheckContext, params: Mapping[str, Any]) -> CheckResult:
    """The DCGM diagnostic (``ctx.evidence.dcgm_diag``) passed, at ``min_level`` or deeper."""
    name = "dcgm_diag"
    result = ctx.evidence.dcgm_diag
    if result is None:
        return _missing(name, "DCGM diag", params)
    level = result.level
    min_level = params.get("min_level")
    ev: dict[str, Any] = {"passed": result.passed, "level": level}
    if min_level is not None and isinstance(level, int) and level < min_level:
        msg = f"DCGM diag ran at level {level}, level {min_level} required"
        return res(name, CheckStatus.FAIL, msg, **ev)
    if not result.passed:
        failed = result.failed_gpus
        error = result.runtime_error
        detail = f" on GPU {', '.join(map(str, failed))}" if failed else ""
        detail += f" ({error})" if error else ""
        ev["failed_gpus"] = list(failed)
        return res(name, CheckStatus.FAIL, f"DCGM diag failed{detail}", Fault.DIAG_FAILED, **ev)
    return res(name, CheckStatus.PASS, "DCGM diag passed", **ev)


@check("nccl", require=bool, min_busbw_gbps=NUMBER)
def nccl(facts: HostFacts, ctx: CheckContext, params: Mapping[str, Any]) -> CheckResult:
    """NCCL test average bus bandwidth (``ctx.evidence.nccl.avg_bus_bw_gbps``) at or above
    ``min_busbw_gbps``."""
    name = "nccl"
    result = ctx.evidence.nccl
    if result is None:
        return _missing(name, "NCCL test", params)
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
    return res(name, CheckStatus.PASS, f"NCCL busbw {busbw:g} GB/s", **ev)


@check("gpu_burn", require=bool)
def gpu_burn(facts: HostFacts, ctx: CheckContext, params: Mapping[str, Any]) -> CheckResult:
    """gpu-burn (``ctx.evidence.gpu_burn``) reported every GPU OK."""
    name = "gpu_burn"
    result = ctx.evidence.gpu_burn
    if result is None:
        return _missing(name, "gpu-burn", params)
    if not result.passed:
        bad = result.faulty
        where = f" on GPU {', '.join(map(str, bad))}" if bad else ""
        return res(name, CheckStatus.FAIL, f"gpu-burn failed{where}", Fault.DIAG_FAILED, bad=bad)
    return res(name, CheckStatus.PASS, "gpu-burn OK on all GPUs")
