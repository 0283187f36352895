"""Driver and OS hygiene: persistence mode, nouveau, the GPUs' PCIe links."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpufleet.domain.checks.base import CheckContext, CheckResult, CheckStatus, check, indices, res
from gpufleet.domain.facts import HostFacts
from gpufleet.domain.health import Fault


@check("persistence_mode")
def persistence_mode(facts: HostFacts, ctx: CheckContext, params: Mapping[str, Any]) -> CheckResult:
    """Persistence mode on for every GPU (otherwise each job pays driver init)."""
    name = "persistence_mode"
    known = [g for g in facts.gpus if g.persistence_mode is not None]
    if not known:
        return res(name, CheckStatus.SKIP, "no GPU reports persistence mode")
    off = [g for g in known if not g.persistence_mode]
    if off:
        return res(
            name,
            CheckStatus.FAIL,
            f"persistence mode off on GPU {indices(off)}",
            off=[g.index for g in off],
        )
    return res(name, CheckStatus.PASS, f"persistence mode on for {len(known)} GPUs")


@check("nouveau_not_loaded")
def nouveau_not_loaded(
    facts: HostFacts, ctx: CheckContext, params: Mapping[str, Any]
) -> CheckResult:
    """The nouveau module is not loaded (it blocks the NVIDIA driver)."""
    name = "nouveau_not_loaded"
    if not facts.modules:
        return res(name, CheckStatus.SKIP, "kernel modules not collected")
    if facts.nouveau_loaded:
        return res(name, CheckStatus.FAIL, "nouveau kernel module is loaded")
    return res(name, CheckStatus.PASS, "nouveau not loaded")


@check("pcie_link")
def pcie_link(facts: HostFacts, ctx: CheckContext, params: Mapping[str, Any]) -> CheckResult:
    """Each GPU's PCIe link at ``ctx.spec.pcie_gen`` / ``ctx.spec.pcie_width`` or better.

    Generation is read from the max (the current one drops at idle to save power); width from
    the current link, falling back to max (width does not power-manage: x8 is a bad riser).
    """
    name = "pcie_link"
    if ctx.spec.pcie_gen is None and ctx.spec.pcie_width is None:
        return res(name, CheckStatus.SKIP, "no PCIe link expected")
    problems: list[str] = []
    unknown: list[int] = []
    seen = 0
    for g in facts.gpus:
        gen = g.pcie_gen_max
        width = g.pcie_width_current if g.pcie_width_current is not None else g.pcie_width_max
        if (ctx.spec.pcie_gen is not None and gen is None) or (
            ctx.spec.pcie_width is not None and width is None
        ):
            unknown.append(g.index)
        if gen is None and width is None:
            continue
        seen += 1
        if ctx.spec.pcie_gen is not None and gen is not None and gen < ctx.spec.pcie_gen:
            problems.append(f"GPU {g.index} gen {gen} < {ctx.spec.pcie_gen}")
        if ctx.spec.pcie_width is not None and width is not None and width < ctx.spec.pcie_width:
            problems.append(f"GPU {g.index} x{width} < x{ctx.spec.pcie_width}")
    ev: dict[str, Any] = {
        "expected_gen": ctx.spec.pcie_gen,
        "expected_width": ctx.spec.pcie_width,
        "unreported": unknown,
    }
    if problems:
        return res(name, CheckStatus.FAIL, "; ".join(problems), Fault.PCIE_DEGRADED, **ev)
    if not facts.gpus:
        return res(name, CheckStatus.FAIL, "no GPUs to check the PCIe link of", **ev)
    if unknown:
        # Fail closed: an expected link that no one reported is not a link that was checked.
        msg = f"PCIe link expected but not reported for GPU {', '.join(map(str, unknown))}"
        return res(name, CheckStatus.FAIL, msg, **ev)
    return res(name, CheckStatus.PASS, f"PCIe links as expected on {seen} GPUs", **ev)
