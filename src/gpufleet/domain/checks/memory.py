"""GPU memory health: ECC mode and counters, row remapping, retired pages."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpufleet.domain.checks.base import CheckContext, CheckResult, CheckStatus, check, indices, res
from gpufleet.domain.facts import HostFacts
from gpufleet.domain.health import Fault


@check("ecc_enabled")
def ecc_enabled(facts: HostFacts, ctx: CheckContext, params: Mapping[str, Any]) -> CheckResult:
    """ECC is on for every GPU that supports it; a pending mode change warns."""
    name = "ecc_enabled"
    known = [g for g in facts.gpus if g.ecc_mode_current is not None]
    if not known:
        return res(name, CheckStatus.SKIP, "no GPU reports an ECC mode")
    off = [g for g in known if not g.ecc_mode_current]
    pending = [
        g
        for g in known
        if g.ecc_mode_pending is not None and g.ecc_mode_pending != g.ecc_mode_current
    ]
    ev: dict[str, Any] = {"off": [g.index for g in off], "pending": [g.index for g in pending]}
    if off:
        later = " (enabled after the next reboot)" if all(g.ecc_mode_pending for g in off) else ""
        return res(name, CheckStatus.FAIL, f"ECC disabled on GPU {indices(off)}{later}", **ev)
    if pending:
        msg = f"ECC mode change pending on GPU {indices(pending)}: needs a reboot"
        return res(name, CheckStatus.WARN, msg, **ev)
    return res(name, CheckStatus.PASS, f"ECC enabled on {len(known)} GPUs", **ev)


@check("ecc_uncorrectable", aggregate_threshold=int)
def ecc_uncorrectable(
    facts: HostFacts, ctx: CheckContext, params: Mapping[str, Any]
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
        return res(name, CheckStatus.SKIP, "no ECC counters reported")
    ev: dict[str, Any] = {"volatile": vol, "aggregate": agg}
    vol_bad = {i: n for i, n in vol.items() if n}
    if vol_bad:
        detail = ", ".join(f"GPU {i}: {n}" for i, n in vol_bad.items())
        msg = f"uncorrectable ECC errors since driver load ({detail})"
        return res(name, CheckStatus.FAIL, msg, Fault.ECC_UNCORRECTABLE, **ev)
    agg_bad = {i: n for i, n in agg.items() if n}
    threshold = params.get("aggregate_threshold")
    if agg_bad:
        detail = ", ".join(f"GPU {i}: {n}" for i, n in agg_bad.items())
        if threshold is not None and max(agg_bad.values()) >= threshold:
            msg = f"lifetime uncorrectable ECC errors at or above {threshold} ({detail})"
            return res(name, CheckStatus.FAIL, msg, Fault.ECC_UNCORRECTABLE, **ev)
        msg = f"lifetime uncorrectable ECC errors, none since driver load ({detail})"
        return res(name, CheckStatus.WARN, msg, **ev)
    return res(name, CheckStatus.PASS, "no uncorrectable ECC errors", **ev)


@check("row_remap")
def row_remap(facts: HostFacts, ctx: CheckContext, params: Mapping[str, Any]) -> CheckResult:
    """Row remapping (Ampere+): failure flag fails (RMA path); pending warns (needs GPU reset,
    which reclaim does)."""
    name = "row_remap"
    gpus = [g for g in facts.gpus if g.remapped_rows is not None]
    if not gpus:
        return res(name, CheckStatus.SKIP, "no GPU reports row remapping")
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
        msg = f"row remapping failure on GPU {indices(failed)}: field diagnostics and RMA"
        return res(name, CheckStatus.FAIL, msg, Fault.ROW_REMAP_FAILURE, **ev)
    if pending:
        msg = f"row remapping pending on GPU {indices(pending)}: needs GPU reset"
        return res(name, CheckStatus.WARN, msg, **ev)
    return res(name, CheckStatus.PASS, "no row remapping pending or failed", **ev)


@check("retired_pages", threshold=int)
def retired_pages(facts: HostFacts, ctx: CheckContext, params: Mapping[str, Any]) -> CheckResult:
    """Page retirement (pre-Ampere, max 64): ``threshold`` (default 60) retired pages fail;
    pending retirements warn (they take effect after a GPU reset)."""
    name = "retired_pages"
    threshold = int(params.get("threshold", 60))
    gpus = [g for g in facts.gpus if g.retired_pages is not None]
    if not gpus:
        return res(name, CheckStatus.SKIP, "no GPU reports retired pages")
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
        return res(name, CheckStatus.FAIL, msg, Fault.RETIRED_PAGES_LIMIT, **ev)
    if pending:
        msg = f"page retirement pending on GPU {indices(pending)}: needs GPU reset"
        return res(name, CheckStatus.WARN, msg, **ev)
    return res(name, CheckStatus.PASS, f"retired pages below {threshold}", **ev)
