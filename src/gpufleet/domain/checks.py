"""Pure validation checks: facts + expectations in, one :class:`CheckResult` out.

Every check has the signature ``(facts, spec, baseline, params) -> CheckResult`` and is
registered in :data:`CHECKS` with the parameters it accepts (:data:`CHECK_PARAMS`, used to
validate profiles). Unset expectations and uncollected facts give ``skip``, never a guess.

Besides profile parameters, :func:`gpufleet.domain.profiles.evaluate` passes context under the
reserved keys of :data:`CONTEXT_PARAMS`: ``now`` (a datetime, for time windows),
``xid_policy`` (an :class:`~gpufleet.domain.xid.XidPolicy`) and ``evidence`` (a mapping with
the results of active tests: ``dcgm_diag``, ``nccl``, ``gpu_burn``; either the models of
``gpufleet.domain.evidence`` or plain mappings with the same field names).

A ``fail`` with a fault in :data:`~gpufleet.domain.health.HARDWARE_FAULTS` quarantines; other
faults (``ib_down``, ``nvlink_down`` ...) only cost the profiles that run the check.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from functools import cache
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from gpufleet.domain.drift import DriftItem, diff_against_baseline, os_image_name
from gpufleet.domain.facts import Gpu, HostFacts, IbPort
from gpufleet.domain.health import HARDWARE_FAULTS, Fault
from gpufleet.domain.spec import Baseline, ExpectedSpec
from gpufleet.domain.xid import XidPolicy

__all__ = [
    "CHECKS",
    "CHECK_PARAMS",
    "CONTEXT_PARAMS",
    "DRIFT_CHECKS",
    "HARDWARE_FAULTS",
    "CheckFn",
    "CheckResult",
    "CheckStatus",
]


class CheckStatus(StrEnum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"


class CheckResult(BaseModel):
    """Outcome of one check on one host; ``evidence`` holds the numbers behind the message."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    status: CheckStatus
    message: str
    evidence: dict[str, Any] = Field(default_factory=dict)
    fault: Fault | None = None


CheckFn = Callable[[HostFacts, ExpectedSpec, Baseline | None, Mapping[str, Any]], CheckResult]
ParamTypes = type | tuple[type, ...]

CHECKS: dict[str, CheckFn] = {}
#: check name -> accepted profile parameters and their types.
CHECK_PARAMS: dict[str, dict[str, ParamTypes]] = {}
#: Parameters supplied by ``evaluate``, refused in profiles.
CONTEXT_PARAMS = frozenset({"now", "xid_policy", "evidence"})
#: Checks whose failure is drift from the baseline (a software fix, not a hardware one).
DRIFT_CHECKS = frozenset(
    {
        "driver_version",
        "cuda_version",
        "kernel_version",
        "vbios",
        "os_image",
        "sysctls",
        "container_toolkit",
        "fabricmanager_version",
    }
)

_NUMBER = (int, float)


def _check(name: str, **params: ParamTypes) -> Callable[[CheckFn], CheckFn]:
    def register(fn: CheckFn) -> CheckFn:
        CHECKS[name] = fn
        CHECK_PARAMS[name] = dict(params)
        return fn

    return register


def _r(
    name: str,
    status: CheckStatus,
    message: str,
    fault: Fault | None = None,
    **evidence: Any,
) -> CheckResult:
    return CheckResult(name=name, status=status, message=message, evidence=evidence, fault=fault)


def _indices(gpus: Iterable[Gpu]) -> str:
    return ", ".join(str(g.index) for g in gpus)


def _pci(addr: str) -> str:
    # nvidia-smi prints an 8-digit PCI domain ("00000000:19:00.0"), lspci a 4-digit one.
    domain, _, rest = addr.lower().partition(":")
    return f"{domain[-4:].zfill(4)}:{rest}" if rest else addr.lower()


def _get(obj: object, key: str) -> Any:
    """Read ``key`` from an evidence model or a plain mapping."""
    if isinstance(obj, Mapping):
        return obj.get(key)
    return getattr(obj, key, None)


# ------------------------------------------------------------------------- GPU inventory


def _smi_error_means_lost(error: str) -> bool:
    # "Unable to determine the device handle for GPU0000:19:00.0: Unknown Error" and
    # "GPU is lost" come from a GPU that dropped; "couldn't communicate with the NVIDIA
    # driver" / "command not found" from a missing or unloaded driver.
    text = error.lower()
    return any(s in text for s in ("is lost", "unknown error", "device handle", "fallen off"))


@_check("gpu_count")
def gpu_count(
    facts: HostFacts, spec: ExpectedSpec, baseline: Baseline | None, params: Mapping[str, Any]
) -> CheckResult:
    """Working GPUs == spec.gpu_count (or, when the spec is silent, the NVIDIA GPUs lspci
    shows) and == NVIDIA GPUs on the PCI bus.

    Every profile is a GPU workload profile, so this check never passes a host without a
    working GPU: no NVIDIA device on the bus, no working driver, or no way to tell (lspci not
    collected and no expected count) fails, whatever the inventory says. A GPU in an error
    state (``Gpu.error``: "GPU is lost", "GPU requires reset", ...) fails with ``gpu_lost``.
    A GPU that fell off the bus is caught either way: missing from the driver but on the bus,
    or gone from both while its siblings remain.
    """
    name = "gpu_count"
    lspci_seen = facts.pci_devices is not None  # None: lspci failed or was not collected
    pci = facts.pci_gpus
    expected = spec.gpu_count
    if expected is None and lspci_seen:
        expected = len(pci)  # the spec is silent: the bus says how many there should be
    source = "spec" if spec.gpu_count is not None else ("lspci" if lspci_seen else None)
    ev: dict[str, Any] = {
        "expected": spec.gpu_count,
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
            return _r(name, CheckStatus.FAIL, msg, smi_fault, **ev)
        if spec.gpu_count:
            msg = f"nvidia-smi failed ({err}); expected {spec.gpu_count} GPUs"
            return _r(name, CheckStatus.FAIL, msg, **ev)
        bus = "no NVIDIA GPU on the PCI bus" if lspci_seen else "lspci not collected"
        msg = f"no working NVIDIA driver ({err}); {bus}: not usable for GPU work"
        return _r(name, CheckStatus.FAIL, msg, **ev)

    n = len(facts.gpus)
    ev["driver"] = n
    broken = [g for g in facts.gpus if g.error]
    if broken:
        ev["errors"] = {str(g.index): g.error for g in broken}
        detail = "; ".join(
            f"GPU {g.index}{f' ({_pci(g.pci_bus_id)})' if g.pci_bus_id else ''}: {g.error}"
            for g in broken
        )
        return _r(name, CheckStatus.FAIL, f"GPU in error state: {detail}", Fault.GPU_LOST, **ev)
    if lspci_seen and len(pci) > n:
        seen = {_pci(g.pci_bus_id) for g in facts.gpus if g.pci_bus_id}
        missing = sorted(d.address for d in pci if _pci(d.address) not in seen)
        ev["missing"] = missing
        where = f" (missing from the driver: {', '.join(missing)})" if missing else ""
        msg = f"driver sees {n} of {len(pci)} NVIDIA GPUs on the PCI bus{where}"
        return _r(name, CheckStatus.FAIL, msg, Fault.GPU_LOST, **ev)
    if n == 0:
        bus = "" if lspci_seen else " (lspci not collected)"
        msg = f"no GPUs visible to the driver{bus}: not usable for GPU work"
        return _r(name, CheckStatus.FAIL, msg, **ev)
    if expected is None:
        msg = (
            f"driver sees {n} GPUs, but lspci was not collected and no GPU count is expected: "
            "cannot tell whether a GPU is missing"
        )
        return _r(name, CheckStatus.FAIL, msg, **ev)
    if n != expected:
        # Some GPUs present but fewer than expected: one fell off the bus entirely. More
        # than expected is more likely a wrong spec than a hardware fault.
        fault = Fault.GPU_LOST if 0 < n < expected else None
        return _r(name, CheckStatus.FAIL, f"driver sees {n} GPUs, expected {expected}", fault, **ev)
    agree = " (driver and PCI bus agree)" if lspci_seen else ""
    return _r(name, CheckStatus.PASS, f"{n} GPUs{agree}", **ev)


@_check("single_gpu_model")
def single_gpu_model(
    facts: HostFacts, spec: ExpectedSpec, baseline: Baseline | None, params: Mapping[str, Any]
) -> CheckResult:
    """All GPUs of the host are the same model."""
    name = "single_gpu_model"
    models = Counter(g.product_name for g in facts.gpus if g.product_name)
    if not models:
        return _r(name, CheckStatus.SKIP, "no GPU models reported")
    if len(models) > 1:
        mix = ", ".join(f"{n}x {m}" for m, n in models.most_common())
        return _r(name, CheckStatus.FAIL, f"mixed GPU models: {mix}", models=dict(models))
    (model,) = models
    return _r(name, CheckStatus.PASS, f"all GPUs are {model}", models=dict(models))


@_check("gpu_model")
def gpu_model(
    facts: HostFacts, spec: ExpectedSpec, baseline: Baseline | None, params: Mapping[str, Any]
) -> CheckResult:
    """Every GPU's product name contains ``spec.gpu_model`` (case-insensitive)."""
    name = "gpu_model"
    if not spec.gpu_model:
        return _r(name, CheckStatus.SKIP, "no GPU model expected")
    if not facts.gpus:
        return _r(name, CheckStatus.SKIP, "no GPUs visible to the driver (see gpu_count)")
    want = spec.gpu_model.lower()
    wrong = [g for g in facts.gpus if want not in (g.product_name or "").lower()]
    models = sorted({g.product_name or "?" for g in facts.gpus})
    ev: dict[str, Any] = {"expected": spec.gpu_model, "models": models}
    if wrong:
        got = ", ".join(sorted({g.product_name or "unknown" for g in wrong}))
        msg = f"GPU {_indices(wrong)}: {got}, expected {spec.gpu_model}"
        return _r(name, CheckStatus.FAIL, msg, **ev)
    return _r(name, CheckStatus.PASS, f"all GPUs match {spec.gpu_model}", **ev)


@_check("gpu_memory", tolerance_pct=_NUMBER)
def gpu_memory(
    facts: HostFacts, spec: ExpectedSpec, baseline: Baseline | None, params: Mapping[str, Any]
) -> CheckResult:
    """Each GPU's memory is within ``tolerance_pct`` (default 5) of ``spec.gpu_memory_mib``.

    The driver reports usable memory (81559 MiB on an "80 GB" H100), hence the tolerance.
    """
    name = "gpu_memory"
    expected = spec.gpu_memory_mib
    if not expected:
        return _r(name, CheckStatus.SKIP, "no GPU memory expected")
    sized = [g for g in facts.gpus if g.memory_total_mib is not None]
    if not sized:
        return _r(name, CheckStatus.SKIP, "no GPU memory reported")
    tol = float(params.get("tolerance_pct", 5)) / 100
    wrong = [g for g in sized if abs((g.memory_total_mib or 0) - expected) > expected * tol]
    sizes = {g.index: g.memory_total_mib for g in sized}
    ev: dict[str, Any] = {"expected_mib": expected, "mib": sizes}
    if wrong:
        got = ", ".join(f"GPU {g.index}: {g.memory_total_mib} MiB" for g in wrong)
        return _r(name, CheckStatus.FAIL, f"{got}, expected {expected} MiB", **ev)
    return _r(name, CheckStatus.PASS, f"GPU memory matches {expected} MiB", **ev)


# ------------------------------------------------------------------ drift from the baseline


def _drift(
    name: str,
    what: str,
    baseline: Baseline | None,
    pinned: object,
    actual: object,
    items: list[DriftItem],
) -> CheckResult:
    """Shared shape of the drift checks: fail without a fault (fixed by software, not RMA)."""
    if baseline is None:
        return _r(name, CheckStatus.SKIP, "no baseline assigned")
    if not pinned:
        return _r(name, CheckStatus.SKIP, f"baseline {baseline.name} does not pin the {what}")
    if not actual:
        return _r(name, CheckStatus.SKIP, f"{what} not collected")
    ev: dict[str, Any] = {"baseline": baseline.name, "drift": [_item(i) for i in items]}
    if items:
        diffs = "; ".join(
            f"{i.field} {i.actual if i.actual is not None else 'unset'}, expected {i.expected}"
            for i in items
        )
        msg = f"drift from baseline {baseline.name}: {diffs}"
        return _r(name, CheckStatus.FAIL, msg, **ev)
    return _r(name, CheckStatus.PASS, f"{what} as in baseline {baseline.name}", **ev)


def _item(i: DriftItem) -> dict[str, str | None]:
    return {"field": i.field, "expected": i.expected, "actual": i.actual}


def _drift_items(facts: HostFacts, baseline: Baseline | None, field: str) -> list[DriftItem]:
    if baseline is None:
        return []
    return [
        i
        for i in diff_against_baseline(facts, baseline)
        if i.field == field or i.field.startswith(f"{field}.")
    ]


@_check("driver_version")
def driver_version(
    facts: HostFacts, spec: ExpectedSpec, baseline: Baseline | None, params: Mapping[str, Any]
) -> CheckResult:
    """NVIDIA driver version equals the baseline's."""
    items = _drift_items(facts, baseline, "driver")
    return _drift(
        "driver_version",
        "driver version",
        baseline,
        baseline and baseline.driver,
        facts.driver_version,
        items,
    )


@_check("cuda_version")
def cuda_version(
    facts: HostFacts, spec: ExpectedSpec, baseline: Baseline | None, params: Mapping[str, Any]
) -> CheckResult:
    """CUDA version (as nvidia-smi reports it) equals the baseline's."""
    items = _drift_items(facts, baseline, "cuda")
    return _drift(
        "cuda_version",
        "CUDA version",
        baseline,
        baseline and baseline.cuda,
        facts.cuda_version,
        items,
    )


@_check("kernel_version")
def kernel_version(
    facts: HostFacts, spec: ExpectedSpec, baseline: Baseline | None, params: Mapping[str, Any]
) -> CheckResult:
    """Running kernel equals the baseline's."""
    items = _drift_items(facts, baseline, "kernel")
    return _drift(
        "kernel_version", "kernel", baseline, baseline and baseline.kernel, facts.kernel, items
    )


@_check("container_toolkit")
def container_toolkit(
    facts: HostFacts, spec: ExpectedSpec, baseline: Baseline | None, params: Mapping[str, Any]
) -> CheckResult:
    """NVIDIA Container Toolkit version equals the baseline's (missing counts as drift)."""
    items = _drift_items(facts, baseline, "container_toolkit")
    return _drift(
        "container_toolkit",
        "container toolkit",
        baseline,
        baseline and baseline.container_toolkit,
        facts.container_toolkit or "not installed",
        items,
    )


@_check("fabricmanager_version")
def fabricmanager_version(
    facts: HostFacts, spec: ExpectedSpec, baseline: Baseline | None, params: Mapping[str, Any]
) -> CheckResult:
    """nvidia-fabricmanager version equals the baseline's (missing counts as drift)."""
    items = _drift_items(facts, baseline, "fabric_manager")
    return _drift(
        "fabricmanager_version",
        "fabric manager version",
        baseline,
        baseline and baseline.fabric_manager,
        facts.fabricmanager_version or "not installed",
        items,
    )


@_check("os_image")
def os_image(
    facts: HostFacts, spec: ExpectedSpec, baseline: Baseline | None, params: Mapping[str, Any]
) -> CheckResult:
    """OS (os-release PRETTY_NAME or "ID VERSION_ID") equals the baseline's image."""
    items = _drift_items(facts, baseline, "os_image")
    return _drift(
        "os_image",
        "OS image",
        baseline,
        baseline and baseline.os_image,
        os_image_name(facts.os),
        items,
    )


@_check("vbios")
def vbios(
    facts: HostFacts, spec: ExpectedSpec, baseline: Baseline | None, params: Mapping[str, Any]
) -> CheckResult:
    """Every GPU's VBIOS is one of the baseline's accepted versions."""
    name = "vbios"
    versions = [g.vbios_version for g in facts.gpus if g.vbios_version]
    result = _drift(
        name,
        "VBIOS version",
        baseline,
        baseline and baseline.vbios,
        versions,
        _drift_items(facts, baseline, "vbios"),
    )
    if result.status is not CheckStatus.FAIL or baseline is None:
        return result
    accepted = {v.strip().lower() for v in baseline.vbios}
    by_version: dict[str, list[int]] = {}
    for g in facts.gpus:
        if g.vbios_version and g.vbios_version.strip().lower() not in accepted:
            by_version.setdefault(g.vbios_version, []).append(g.index)
    detail = "; ".join(f"GPU {', '.join(map(str, idx))}: {v}" for v, idx in by_version.items())
    msg = f"VBIOS not in baseline {baseline.name} ({', '.join(baseline.vbios)}): {detail}"
    return result.model_copy(update={"message": msg})


@_check("sysctls")
def sysctls(
    facts: HostFacts, spec: ExpectedSpec, baseline: Baseline | None, params: Mapping[str, Any]
) -> CheckResult:
    """Every sysctl the baseline pins has the pinned value (whitespace-insensitive)."""
    items = _drift_items(facts, baseline, "sysctl")
    return _drift(
        "sysctls", "sysctls", baseline, baseline and baseline.sysctls, facts.sysctls, items
    )


# ----------------------------------------------------------------------- GPU memory health


@_check("ecc_enabled")
def ecc_enabled(
    facts: HostFacts, spec: ExpectedSpec, baseline: Baseline | None, params: Mapping[str, Any]
) -> CheckResult:
    """ECC is on for every GPU that supports it; a pending mode change warns."""
    name = "ecc_enabled"
    known = [g for g in facts.gpus if g.ecc_mode_current is not None]
    if not known:
        return _r(name, CheckStatus.SKIP, "no GPU reports an ECC mode")
    off = [g for g in known if not g.ecc_mode_current]
    pending = [
        g
        for g in known
        if g.ecc_mode_pending is not None and g.ecc_mode_pending != g.ecc_mode_current
    ]
    ev: dict[str, Any] = {"off": [g.index for g in off], "pending": [g.index for g in pending]}
    if off:
        later = " (enabled after the next reboot)" if all(g.ecc_mode_pending for g in off) else ""
        return _r(name, CheckStatus.FAIL, f"ECC disabled on GPU {_indices(off)}{later}", **ev)
    if pending:
        msg = f"ECC mode change pending on GPU {_indices(pending)}: needs a reboot"
        return _r(name, CheckStatus.WARN, msg, **ev)
    return _r(name, CheckStatus.PASS, f"ECC enabled on {len(known)} GPUs", **ev)


@_check("ecc_uncorrectable", aggregate_threshold=int)
def ecc_uncorrectable(
    facts: HostFacts, spec: ExpectedSpec, baseline: Baseline | None, params: Mapping[str, Any]
) -> CheckResult:
    """Uncorrectable ECC errors.

    *Volatile* (since the last driver load) uncorrectable > 0 fails with ``ecc_uncorrectable``:
    the GPU is suspect right now. *Aggregate* (lifetime) counts never reset and, on Ampere and
    later, are what row remapping absorbs, so they only warn, unless ``aggregate_threshold``
    is set and reached.
    """
    name = "ecc_uncorrectable"
    vol = {
        g.index: g.ecc_volatile.uncorrectable
        for g in facts.gpus
        if g.ecc_volatile and g.ecc_volatile.uncorrectable is not None
    }
    agg = {
        g.index: g.ecc_aggregate.uncorrectable
        for g in facts.gpus
        if g.ecc_aggregate and g.ecc_aggregate.uncorrectable is not None
    }
    if not vol and not agg:
        return _r(name, CheckStatus.SKIP, "no ECC counters reported")
    ev: dict[str, Any] = {"volatile": vol, "aggregate": agg}
    vol_bad = {i: n for i, n in vol.items() if n}
    if vol_bad:
        detail = ", ".join(f"GPU {i}: {n}" for i, n in vol_bad.items())
        msg = f"uncorrectable ECC errors since driver load ({detail})"
        return _r(name, CheckStatus.FAIL, msg, Fault.ECC_UNCORRECTABLE, **ev)
    agg_bad = {i: n for i, n in agg.items() if n}
    threshold = params.get("aggregate_threshold")
    if agg_bad:
        detail = ", ".join(f"GPU {i}: {n}" for i, n in agg_bad.items())
        if threshold is not None and max(agg_bad.values()) >= threshold:
            msg = f"lifetime uncorrectable ECC errors at or above {threshold} ({detail})"
            return _r(name, CheckStatus.FAIL, msg, Fault.ECC_UNCORRECTABLE, **ev)
        msg = f"lifetime uncorrectable ECC errors, none since driver load ({detail})"
        return _r(name, CheckStatus.WARN, msg, **ev)
    return _r(name, CheckStatus.PASS, "no uncorrectable ECC errors", **ev)


@_check("row_remap")
def row_remap(
    facts: HostFacts, spec: ExpectedSpec, baseline: Baseline | None, params: Mapping[str, Any]
) -> CheckResult:
    """Row remapping (Ampere+): failure flag fails (RMA path); pending warns (needs GPU reset,
    which reclaim does)."""
    name = "row_remap"
    gpus = [g for g in facts.gpus if g.remapped_rows is not None]
    if not gpus:
        return _r(name, CheckStatus.SKIP, "no GPU reports row remapping")
    failed = [g for g in gpus if g.remapped_rows and g.remapped_rows.failure]
    pending = [g for g in gpus if g.remapped_rows and g.remapped_rows.pending]
    ev: dict[str, Any] = {
        "failure": [g.index for g in failed],
        "pending": [g.index for g in pending],
        "uncorrectable_rows": {
            g.index: g.remapped_rows.uncorrectable for g in gpus if g.remapped_rows
        },
    }
    if failed:
        msg = f"row remapping failure on GPU {_indices(failed)}: field diagnostics and RMA"
        return _r(name, CheckStatus.FAIL, msg, Fault.ROW_REMAP_FAILURE, **ev)
    if pending:
        msg = f"row remapping pending on GPU {_indices(pending)}: needs GPU reset"
        return _r(name, CheckStatus.WARN, msg, **ev)
    return _r(name, CheckStatus.PASS, "no row remapping pending or failed", **ev)


@_check("retired_pages", threshold=int)
def retired_pages(
    facts: HostFacts, spec: ExpectedSpec, baseline: Baseline | None, params: Mapping[str, Any]
) -> CheckResult:
    """Page retirement (pre-Ampere, max 64): ``threshold`` (default 60) retired pages fail;
    pending retirements warn (they take effect after a GPU reset)."""
    name = "retired_pages"
    threshold = int(params.get("threshold", 60))
    gpus = [g for g in facts.gpus if g.retired_pages is not None]
    if not gpus:
        return _r(name, CheckStatus.SKIP, "no GPU reports retired pages")
    totals = {
        g.index: (g.retired_pages.single_bit or 0) + (g.retired_pages.double_bit or 0)
        for g in gpus
        if g.retired_pages
    }
    over = {i: n for i, n in totals.items() if n >= threshold}
    pending = [g for g in gpus if g.retired_pages and g.retired_pages.pending]
    ev: dict[str, Any] = {
        "retired": totals,
        "threshold": threshold,
        "pending": [g.index for g in pending],
    }
    if over:
        detail = ", ".join(f"GPU {i}: {n}" for i, n in over.items())
        msg = f"retired pages at or above {threshold} of 64 ({detail})"
        return _r(name, CheckStatus.FAIL, msg, Fault.RETIRED_PAGES_LIMIT, **ev)
    if pending:
        msg = f"page retirement pending on GPU {_indices(pending)}: needs GPU reset"
        return _r(name, CheckStatus.WARN, msg, **ev)
    return _r(name, CheckStatus.PASS, f"retired pages below {threshold}", **ev)


# ------------------------------------------------------------------------------- Xids


@cache
def _default_xid_policy() -> XidPolicy:
    return XidPolicy.load_default()


def _aware(t: datetime) -> datetime:
    # Kernel-log parsers may yield naive times; treat them as UTC rather than crash comparing.
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


@_check("xid", window_hours=_NUMBER)
def xid(
    facts: HostFacts, spec: ExpectedSpec, baseline: Baseline | None, params: Mapping[str, Any]
) -> CheckResult:
    """Xids in the kernel log within ``window_hours`` (default 24) of ``now``.

    Fatal (per the policy) fail with ``fatal_xid``; known non-fatal and unknown codes warn.
    Events without a timestamp are counted: they are in the current boot's log, and a fatal
    Xid needs a reset or reboot that would have cleared it.

    Fail closed: a kernel log that was not collected or not readable (``xids is None``) fails
    (no fault: the host stays in validation with the reason), and so do unreadable Xid lines
    in the window, which could be the fatal one, unless a readable fatal Xid already fails it.
    """
    name = "xid"
    policy: XidPolicy = params.get("xid_policy") or _default_xid_policy()
    now: datetime | None = params.get("now")
    window = timedelta(hours=float(params.get("window_hours", 24)))
    since = _aware(now) - window if now is not None else None
    if facts.xids is None:
        why = next((p for p in facts.problems if "kernel-xid" in p), None)
        msg = "kernel log not collected or unreadable: cannot rule out a fatal Xid"
        return _r(name, CheckStatus.FAIL, msg + (f" ({why})" if why else ""), collected=False)

    def in_window(t: datetime | None) -> bool:
        return since is None or t is None or _aware(t) >= since

    recent = [e for e in facts.xids if in_window(e.time)]
    damaged = [u for u in facts.xid_unreadable if in_window(u.time)]
    ev: dict[str, Any] = {
        "since": since.isoformat() if since else None,
        "ignored_older": len(facts.xids) - len(recent),
        "unreadable_lines": [u.line for u in damaged],
    }
    unread = ""
    if damaged:
        shown = ", ".join(str(u.line) for u in damaged[:8]) + (" ..." if len(damaged) > 8 else "")
        unread = f"{len(damaged)} unreadable Xid line(s) in the kernel log (line {shown})"
    if damaged and not any(policy.is_fatal(e.code) for e in recent):
        msg = f"{unread}: cannot rule out a fatal Xid"
        return _r(name, CheckStatus.FAIL, msg, **ev)
    if not recent:
        span = f" in the last {params.get('window_hours', 24)}h" if since else ""
        return _r(name, CheckStatus.PASS, f"no Xid{span}", **ev)
    by_code: dict[int, list[str]] = {}
    for e in recent:
        by_code.setdefault(e.code, [])
        if e.pci_address and e.pci_address not in by_code[e.code]:
            by_code[e.code].append(e.pci_address)
    counts = Counter(e.code for e in recent)

    def line(code: int) -> str:
        info = policy.lookup(code)
        head = info.describe() if info.known else f"unknown Xid {code}"
        where = f" on {', '.join(by_code[code])}" if by_code[code] else ""
        return f"{head} x{counts[code]}{where}"

    fatal = sorted(c for c in counts if policy.is_fatal(c))
    other = sorted(c for c in counts if not policy.is_fatal(c))
    ev.update(
        fatal=fatal,
        nonfatal=[c for c in other if policy.is_known(c)],
        unknown=[c for c in other if not policy.is_known(c)],
        counts=dict(counts),
    )
    if fatal:
        msg = "fatal " + "; ".join(line(c) for c in fatal)
        if other:
            msg += "; also " + "; ".join(line(c) for c in other)
        if unread:
            msg += f"; {unread}"
        return _r(name, CheckStatus.FAIL, msg, Fault.FATAL_XID, **ev)
    return _r(name, CheckStatus.WARN, "non-fatal " + "; ".join(line(c) for c in other), **ev)


# ------------------------------------------------------------------- NVLink and NVSwitch


@_check("nvlink", pair_link=str)
def nvlink(
    facts: HostFacts, spec: ExpectedSpec, baseline: Baseline | None, params: Mapping[str, Any]
) -> CheckResult:
    """All NVLinks active, ``spec.nvlink_per_gpu`` active per GPU, and every GPU pair joined
    by ``pair_link`` in ``nvidia-smi topo -m`` (default ``NV<nvlink_per_gpu>`` on NVSwitch
    systems, where every pair sees all links)."""
    name = "nvlink"
    expected = spec.nvlink_per_gpu
    pair_link: str | None = params.get("pair_link") or (
        f"NV{expected}" if expected and spec.nvswitch else None
    )
    status = facts.nvlink
    if status is None or not status.supported:
        why = "not collected" if status is None else f"unavailable ({status.message or 'MIG?'})"
        if expected:
            return _r(name, CheckStatus.FAIL, f"NVLink status {why}, expected {expected}/GPU")
        return _r(name, CheckStatus.SKIP, f"NVLink status {why}")
    active = {g.gpu_index: sum(1 for link in g.links if link.active) for g in status.gpus}
    inactive = {
        g.gpu_index: [link.link for link in g.links if not link.active]
        for g in status.gpus
        if any(not link.active for link in g.links)
    }
    if not any(g.links for g in status.gpus) and not expected:
        return _r(name, CheckStatus.SKIP, "no NVLinks (PCIe GPUs)")
    problems: list[str] = []
    for gpu, links in inactive.items():
        problems.append(f"GPU {gpu} link {', '.join(map(str, links))} inactive")
    if expected is not None:
        for gpu, n in active.items():
            if n != expected:
                problems.append(f"GPU {gpu} has {n} active links, expected {expected}")
    bad_pairs: list[str] = []
    if pair_link and facts.topology:
        gpus = [d for d in facts.topology.devices if d.startswith("GPU")]
        for i, a in enumerate(gpus):
            for b in gpus[i + 1 :]:
                got = facts.topology.links.get(a, {}).get(b)
                if got is not None and got != pair_link:
                    bad_pairs.append(f"{a}-{b} {got}")
        if bad_pairs:
            shown = ", ".join(bad_pairs[:8]) + (" ..." if len(bad_pairs) > 8 else "")
            problems.append(f"topology expects {pair_link} between GPUs: {shown}")
    ev: dict[str, Any] = {
        "active": active,
        "inactive": inactive,
        "expected": expected,
        "pair_link": pair_link,
        "bad_pairs": bad_pairs,
    }
    if problems:
        return _r(name, CheckStatus.FAIL, "; ".join(problems), Fault.NVLINK_DOWN, **ev)
    total = sum(active.values())
    return _r(name, CheckStatus.PASS, f"{total} NVLinks active on {len(active)} GPUs", **ev)


@_check("fabricmanager")
def fabricmanager(
    facts: HostFacts, spec: ExpectedSpec, baseline: Baseline | None, params: Mapping[str, Any]
) -> CheckResult:
    """nvidia-fabricmanager runs where ``spec.nvswitch`` says there are NVSwitches."""
    name = "fabricmanager"
    if not spec.nvswitch:
        return _r(name, CheckStatus.SKIP, "no NVSwitch expected")
    if facts.fabricmanager_active is None:
        return _r(name, CheckStatus.FAIL, "fabric manager state not collected")
    if not facts.fabricmanager_active:
        msg = "nvidia-fabricmanager not running on an NVSwitch system"
        return _r(name, CheckStatus.FAIL, msg, Fault.FABRICMANAGER_DOWN)
    return _r(name, CheckStatus.PASS, "nvidia-fabricmanager running")


# --------------------------------------------------------------------------- network


_LINK_LAYERS = {"ib": {"infiniband"}, "roce": {"ethernet"}}


def _port_up(port: IbPort, min_rate: float | None) -> bool:
    if (port.state or "").lower() != "active":
        return False
    if port.physical_state is not None and port.physical_state.lower() != "linkup":
        return False
    return min_rate is None or port.rate_gbps is None or port.rate_gbps >= min_rate


@_check("ib_ports", min_ports=int, min_rate_gbps=_NUMBER, required=bool)
def ib_ports(
    facts: HostFacts, spec: ExpectedSpec, baseline: Baseline | None, params: Mapping[str, Any]
) -> CheckResult:
    """At least ``spec.ib_ports`` IB/RoCE ports Active/LinkUp at ``spec.ib_rate_gbps`` or more.

    ``spec.fabric`` picks the link layer (ib: InfiniBand, roce: Ethernet, unset: both). The
    fault ``ib_down`` costs multi-node profiles only; it does not quarantine.
    """
    name = "ib_ports"
    # ``required``: the profile itself needs a fabric (multi-node), whatever the spec says.
    missing = CheckStatus.FAIL if params.get("required") else CheckStatus.SKIP
    if spec.fabric == "none":
        return _r(name, missing, "no high-speed fabric expected")
    need: int | None = params.get("min_ports", spec.ib_ports)
    if not need:
        return _r(name, missing, "no IB/RoCE ports expected")
    min_rate: float | None = params.get("min_rate_gbps", spec.ib_rate_gbps)
    layers = _LINK_LAYERS.get(spec.fabric or "", {"infiniband", "ethernet"})
    if facts.ib_ports is None:
        why = next((p for p in facts.problems if "ibstat" in p), "ibstat missing or failed")
        msg = f"IB/RoCE ports not collected ({why}); need {need}"
        return _r(name, CheckStatus.FAIL, msg, need=need, collected=False)
    ports = [p for p in facts.ib_ports if (p.link_layer or "").lower() in layers]
    up = [p for p in ports if _port_up(p, min_rate)]
    down = [p for p in ports if p not in up]

    def label(p: IbPort) -> str:
        rate = f" {p.rate_gbps:g} Gb/s" if p.rate_gbps is not None else ""
        slow = " below rate" if _port_up(p, None) else ""
        return f"{p.ca}/{p.port} ({p.state or '?'}/{p.physical_state or '?'}{rate}{slow})"

    ev: dict[str, Any] = {
        "need": need,
        "min_rate_gbps": min_rate,
        "up": [f"{p.ca}/{p.port}" for p in up],
        "down": [f"{p.ca}/{p.port}" for p in down],
    }
    at_rate = f" at >= {min_rate:g} Gb/s" if min_rate else ""
    summary = f"{len(up)} of {len(ports)} IB/RoCE ports up{at_rate}"
    down_text = f"; down: {', '.join(label(p) for p in down)}" if down else ""
    if len(up) < need:
        return _r(name, CheckStatus.FAIL, f"{summary}, need {need}{down_text}", Fault.IB_DOWN, **ev)
    # Enough rails are up. A port that is down still deserves a look; an active port below the
    # fabric rate is usually another NIC (frontend, storage) and is not worth a warning.
    dead = [p for p in down if not _port_up(p, None)]
    if dead:
        return _r(
            name, CheckStatus.WARN, f"{summary}; down: {', '.join(label(p) for p in dead)}", **ev
        )
    return _r(name, CheckStatus.PASS, summary, **ev)


# ------------------------------------------------------------------ driver / OS hygiene


@_check("persistence_mode")
def persistence_mode(
    facts: HostFacts, spec: ExpectedSpec, baseline: Baseline | None, params: Mapping[str, Any]
) -> CheckResult:
    """Persistence mode on for every GPU (otherwise each job pays driver init)."""
    name = "persistence_mode"
    known = [g for g in facts.gpus if g.persistence_mode is not None]
    if not known:
        return _r(name, CheckStatus.SKIP, "no GPU reports persistence mode")
    off = [g for g in known if not g.persistence_mode]
    if off:
        return _r(
            name,
            CheckStatus.FAIL,
            f"persistence mode off on GPU {_indices(off)}",
            off=[g.index for g in off],
        )
    return _r(name, CheckStatus.PASS, f"persistence mode on for {len(known)} GPUs")


@_check("nouveau_not_loaded")
def nouveau_not_loaded(
    facts: HostFacts, spec: ExpectedSpec, baseline: Baseline | None, params: Mapping[str, Any]
) -> CheckResult:
    """The nouveau module is not loaded (it blocks the NVIDIA driver)."""
    name = "nouveau_not_loaded"
    if not facts.modules:
        return _r(name, CheckStatus.SKIP, "kernel modules not collected")
    if facts.nouveau_loaded:
        return _r(name, CheckStatus.FAIL, "nouveau kernel module is loaded")
    return _r(name, CheckStatus.PASS, "nouveau not loaded")


@_check("pcie_link")
def pcie_link(
    facts: HostFacts, spec: ExpectedSpec, baseline: Baseline | None, params: Mapping[str, Any]
) -> CheckResult:
    """Each GPU's PCIe link at ``spec.pcie_gen`` / ``spec.pcie_width`` or better.

    Generation is read from the max (the current one drops at idle to save power); width from
    the current link, falling back to max (width does not power-manage: x8 is a bad riser).
    """
    name = "pcie_link"
    if spec.pcie_gen is None and spec.pcie_width is None:
        return _r(name, CheckStatus.SKIP, "no PCIe link expected")
    problems: list[str] = []
    unknown: list[int] = []
    seen = 0
    for g in facts.gpus:
        gen = g.pcie_gen_max
        width = g.pcie_width_current if g.pcie_width_current is not None else g.pcie_width_max
        if (spec.pcie_gen is not None and gen is None) or (
            spec.pcie_width is not None and width is None
        ):
            unknown.append(g.index)
        if gen is None and width is None:
            continue
        seen += 1
        if spec.pcie_gen is not None and gen is not None and gen < spec.pcie_gen:
            problems.append(f"GPU {g.index} gen {gen} < {spec.pcie_gen}")
        if spec.pcie_width is not None and width is not None and width < spec.pcie_width:
            problems.append(f"GPU {g.index} x{width} < x{spec.pcie_width}")
    ev: dict[str, Any] = {
        "expected_gen": spec.pcie_gen,
        "expected_width": spec.pcie_width,
        "unreported": unknown,
    }
    if problems:
        return _r(name, CheckStatus.FAIL, "; ".join(problems), Fault.PCIE_DEGRADED, **ev)
    if not facts.gpus:
        return _r(name, CheckStatus.FAIL, "no GPUs to check the PCIe link of", **ev)
    if unknown:
        # Fail closed: an expected link that no one reported is not a link that was checked.
        msg = f"PCIe link expected but not reported for GPU {', '.join(map(str, unknown))}"
        return _r(name, CheckStatus.FAIL, msg, **ev)
    return _r(name, CheckStatus.PASS, f"PCIe links as expected on {seen} GPUs", **ev)


# -------------------------------------------------------------- active-test evidence


def _evidence(params: Mapping[str, Any], key: str) -> Any:
    bundle = params.get("evidence")
    return _get(bundle, key) if bundle is not None else None


def _missing(name: str, what: str, params: Mapping[str, Any]) -> CheckResult:
    if params.get("require"):
        return _r(name, CheckStatus.FAIL, f"no {what} result (required)")
    return _r(name, CheckStatus.SKIP, f"no {what} result")


@_check("dcgm_diag", require=bool, min_level=int)
def dcgm_diag(
    facts: HostFacts, spec: ExpectedSpec, baseline: Baseline | None, params: Mapping[str, Any]
) -> CheckResult:
    """The DCGM diagnostic (``evidence["dcgm_diag"]``) passed, at ``min_level`` or deeper."""
    name = "dcgm_diag"
    result = _evidence(params, "dcgm_diag")
    if result is None:
        return _missing(name, "DCGM diag", params)
    level = _get(result, "level")
    min_level = params.get("min_level")
    ev: dict[str, Any] = {"passed": _get(result, "passed"), "level": level}
    if min_level is not None and isinstance(level, int) and level < min_level:
        msg = f"DCGM diag ran at level {level}, level {min_level} required"
        return _r(name, CheckStatus.FAIL, msg, **ev)
    if not _get(result, "passed"):
        failed = _get(result, "failed_gpus") or []
        error = _get(result, "runtime_error")
        detail = f" on GPU {', '.join(map(str, failed))}" if failed else ""
        detail += f" ({error})" if error else ""
        ev["failed_gpus"] = list(failed)
        return _r(name, CheckStatus.FAIL, f"DCGM diag failed{detail}", Fault.DIAG_FAILED, **ev)
    return _r(name, CheckStatus.PASS, "DCGM diag passed", **ev)


@_check("nccl", require=bool, min_busbw_gbps=_NUMBER)
def nccl(
    facts: HostFacts, spec: ExpectedSpec, baseline: Baseline | None, params: Mapping[str, Any]
) -> CheckResult:
    """NCCL test average bus bandwidth (``evidence["nccl"].avg_bus_bw_gbps``) at or above
    ``min_busbw_gbps``."""
    name = "nccl"
    result = _evidence(params, "nccl")
    if result is None:
        return _missing(name, "NCCL test", params)
    busbw = _get(result, "avg_bus_bw_gbps")
    floor = params.get("min_busbw_gbps")
    ev: dict[str, Any] = {"avg_bus_bw_gbps": busbw, "min_busbw_gbps": floor}
    if busbw is None:
        return _r(
            name, CheckStatus.FAIL, "NCCL test reported no bus bandwidth", Fault.DIAG_FAILED, **ev
        )
    wrong = _get(result, "wrong_total") or 0
    if wrong:
        msg = f"NCCL test reported {wrong} wrong values (data corruption)"
        return _r(name, CheckStatus.FAIL, msg, Fault.DIAG_FAILED, wrong=wrong, **ev)
    if floor is not None and busbw < floor:
        msg = f"NCCL busbw {busbw:g} GB/s below {floor:g} GB/s"
        return _r(name, CheckStatus.FAIL, msg, Fault.DIAG_FAILED, **ev)
    return _r(name, CheckStatus.PASS, f"NCCL busbw {busbw:g} GB/s", **ev)


@_check("gpu_burn", require=bool)
def gpu_burn(
    facts: HostFacts, spec: ExpectedSpec, baseline: Baseline | None, params: Mapping[str, Any]
) -> CheckResult:
    """gpu-burn (``evidence["gpu_burn"]``) reported every GPU OK."""
    name = "gpu_burn"
    result = _evidence(params, "gpu_burn")
    if result is None:
        return _missing(name, "gpu-burn", params)
    # GpuBurnResult has ``passed``; a plain mapping may give only the per-GPU list.
    gpus = _get(result, "gpus") or []
    bad = [_get(g, "index") for g in gpus if not _get(g, "ok")]
    passed = _get(result, "passed")
    if passed is None:
        passed = bool(gpus) and not bad
    if not passed:
        where = f" on GPU {', '.join(map(str, bad))}" if bad else ""
        return _r(name, CheckStatus.FAIL, f"gpu-burn failed{where}", Fault.DIAG_FAILED, bad=bad)
    return _r(name, CheckStatus.PASS, "gpu-burn OK on all GPUs")
