"""GPU inventory: count (driver vs PCI bus vs spec), model, memory size."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from gpufleet.domain.checks import accelerator
from gpufleet.domain.checks.base import (
    NUMBER,
    CheckContext,
    CheckResult,
    CheckStatus,
    check,
    indices,
    pci_addr,
    res,
)
from gpufleet.domain.facts import HostFacts
from gpufleet.domain.health import Fault


def _smi_error_means_lost(error: str) -> bool:
    # "Unable to determine the device handle for GPU0000:19:00.0: Unknown Error" and
    # "GPU is lost" come from a GPU that dropped; "couldn't communicate with the NVIDIA
    # driver" / "command not found" from a missing or unloaded driver.
    text = error.lower()
    return any(s in text for s in ("is lost", "unknown error", "device handle", "fallen off"))


@check("gpu_count")
def gpu_count(facts: HostFacts, ctx: CheckContext, params: Mapping[str, Any]) -> CheckResult:
    """Working GPUs == ctx.spec.gpu_count (or, when the spec is silent, the NVIDIA GPUs lspci
    shows) and == NVIDIA GPUs on the PCI bus.

    Every profile is a GPU workload profile, so this check never passes a host without a
    working GPU: no NVIDIA device on the bus, no working driver, or no way to tell (lspci not
    collected and no expected count) fails, whatever the inventory says. A GPU in an error
    state (``Gpu.error``: "GPU is lost", "GPU requires reset", ...) fails with ``gpu_lost``.
    A GPU that fell off the bus is caught either way: missing from the driver but on the bus,
    or gone from both while its siblings remain.
    """
    name = "gpu_count"
    if accelerator.other_vendor_host(facts):  # Ascend / AMD host: its accelerators count
        return accelerator.count(facts, ctx, name)
    lspci_seen = facts.pci_devices is not None  # None: lspci failed or was not collected
    pci = facts.pci_gpus
    expected = ctx.spec.gpu_count
    if expected is None and lspci_seen:
        expected = len(pci)  # the spec is silent: the bus says how many there should be
    source = "spec" if ctx.spec.gpu_count is not None else ("lspci" if lspci_seen else None)
    ev: dict[str, Any] = {
        "expected": ctx.spec.gpu_count,
        "expected_from": source,
        "pci": len(pci) if lspci_seen else None,
    }
    smi_failed = facts.nvidia_smi is None or (bool(facts.nvidia_smi_error) and not facts.gpus)
    if smi_failed:
        err = facts.nvidia_smi_error or "no nvidia-smi output"
        ev.update(driver=None, error=err)
        if pci:
            lost = _smi_error_means_lost(err)
            what = "GPU lost" if lost else "driver not loaded"
            msg = f"nvidia-smi failed ({err}) with {len(pci)} NVIDIA GPUs on the PCI bus: {what}"
            smi_fault = Fault.GPU_LOST if lost else Fault.DRIVER_NOT_LOADED
            return res(name, CheckStatus.FAIL, msg, smi_fault, **ev)
        if ctx.spec.gpu_count:
            msg = f"nvidia-smi failed ({err}); expected {ctx.spec.gpu_count} GPUs"
            return res(name, CheckStatus.FAIL, msg, **ev)
        bus = "no NVIDIA GPU on the PCI bus" if lspci_seen else "lspci not collected"
        msg = f"no working NVIDIA driver ({err}); {bus}: not usable for GPU work"
        return res(name, CheckStatus.FAIL, msg, **ev)

    n = len(facts.gpus)
    ev["driver"] = n
    broken = [g for g in facts.gpus if g.error]
    if broken:
        ev["errors"] = {str(g.index): g.error for g in broken}
        detail = "; ".join(
            f"GPU {g.index}{f' ({pci_addr(g.pci_bus_id)})' if g.pci_bus_id else ''}: {g.error}"
            for g in broken
        )
        return res(name, CheckStatus.FAIL, f"GPU in error state: {detail}", Fault.GPU_LOST, **ev)
    if lspci_seen and len(pci) > n:
        seen = {pci_addr(g.pci_bus_id) for g in facts.gpus if g.pci_bus_id}
        missing = sorted(d.address for d in pci if pci_addr(d.address) not in seen)
        ev["missing"] = missing
        where = f" (missing from the driver: {', '.join(missing)})" if missing else ""
        msg = f"driver sees {n} of {len(pci)} NVIDIA GPUs on the PCI bus{where}"
        return res(name, CheckStatus.FAIL, msg, Fault.GPU_LOST, **ev)
    if n == 0:
        bus = "" if lspci_seen else " (lspci not collected)"
        msg = f"no GPUs visible to the driver{bus}: not usable for GPU work"
        return res(name, CheckStatus.FAIL, msg, **ev)
    if expected is None:
        msg = (
            f"driver sees {n} GPUs, but lspci was not collected and no GPU count is expected: "
            "cannot tell whether a GPU is missing"
        )
        return res(name, CheckStatus.FAIL, msg, **ev)
    if n != expected:
        # Some GPUs present but fewer than expected: one fell off the bus entirely. More
        # than expected is more likely a wrong spec than a hardware fault.
        fault = Fault.GPU_LOST if 0 < n < expected else None
        return res(
            name, CheckStatus.FAIL, f"driver sees {n} GPUs, expected {expected}", fault, **ev
        )
    agree = " (driver and PCI bus agree)" if lspci_seen else ""
    return res(name, CheckStatus.PASS, f"{n} GPUs{agree}", **ev)


@check("single_gpu_model")
def single_gpu_model(facts: HostFacts, ctx: CheckContext, params: Mapping[str, Any]) -> CheckResult:
    """All GPUs of the host are the same model."""
    name = "single_gpu_model"
    if accelerator.other_vendor_host(facts):
        return accelerator.single_model(facts, name)
    models = Counter(g.product_name for g in facts.gpus if g.product_name)
    if not models:
        return res(name, CheckStatus.SKIP, "no GPU models reported")
    if len(models) > 1:
        mix = ", ".join(f"{n}x {m}" for m, n in models.most_common())
        return res(name, CheckStatus.FAIL, f"mixed GPU models: {mix}", models=dict(models))
    (model,) = models
    return res(name, CheckStatus.PASS, f"all GPUs are {model}", models=dict(models))


@check("gpu_model")
def gpu_model(facts: HostFacts, ctx: CheckContext, params: Mapping[str, Any]) -> CheckResult:
    """Every GPU's product name contains ``ctx.spec.gpu_model`` (case-insensitive)."""
    name = "gpu_model"
    if accelerator.other_vendor_host(facts):
        return accelerator.model(facts, ctx, name)
    if not ctx.spec.gpu_model:
        return res(name, CheckStatus.SKIP, "no GPU model expected")
    if not facts.gpus:
        return res(name, CheckStatus.SKIP, "no GPUs visible to the driver (see gpu_count)")
    want = ctx.spec.gpu_model.lower()
    wrong = [g for g in facts.gpus if want not in (g.product_name or "").lower()]
    models = sorted({g.product_name or "?" for g in facts.gpus})
    ev: dict[str, Any] = {"expected": ctx.spec.gpu_model, "models": models}
    if wrong:
        got = ", ".join(sorted({g.product_name or "unknown" for g in wrong}))
        msg = f"GPU {indices(wrong)}: {got}, expected {ctx.spec.gpu_model}"
        return res(name, CheckStatus.FAIL, msg, **ev)
    return res(name, CheckStatus.PASS, f"all GPUs match {ctx.spec.gpu_model}", **ev)


@check("gpu_memory", tolerance_pct=NUMBER)
def gpu_memory(facts: HostFacts, ctx: CheckContext, params: Mapping[str, Any]) -> CheckResult:
    """Each GPU's memory is within ``tolerance_pct`` (default 5) of ``ctx.spec.gpu_memory_mib``.

    The driver reports usable memory (81559 MiB on an "80 GB" H100), hence the tolerance.
    """
    name = "gpu_memory"
    if accelerator.other_vendor_host(facts):
        return accelerator.memory(facts, ctx, params, name)
    expected = ctx.spec.gpu_memory_mib
    if not expected:
        return res(name, CheckStatus.SKIP, "no GPU memory expected")
    sized = [g for g in facts.gpus if g.memory_total_mib is not None]
    if not sized:
        return res(name, CheckStatus.SKIP, "no GPU memory reported")
    tol = float(params.get("tolerance_pct", 5)) / 100
    wrong = [g for g in sized if abs((g.memory_total_mib or 0) - expected) > expected * tol]
    sizes = {g.index: g.memory_total_mib for g in sized}
    ev: dict[str, Any] = {"expected_mib": expected, "mib": sizes}
    if wrong:
        got = ", ".join(f"GPU {g.index}: {g.memory_total_mib} MiB" for g in wrong)
        return res(name, CheckStatus.FAIL, f"{got}, expected {expected} MiB", **ev)
    return res(name, CheckStatus.PASS, f"GPU memory matches {expected} MiB", **ev)
