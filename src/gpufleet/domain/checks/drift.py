"""Drift checks, one per pin of :data:`gpufleet.domain.pins.PINS` (none written by hand).

A drift check fails without a fault: software off the baseline is fixed by software, not RMA.
It skips when no baseline applies, when the baseline does not pin its field, and when the fact
was not collected (except pins where missing counts as drift).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpufleet.domain.checks.base import CheckContext, CheckFn, CheckResult, CheckStatus, check, res
from gpufleet.domain.facts import HostFacts
from gpufleet.domain.pins import PINS, Compare, Mismatch, Pin

#: Checks whose failure is drift from the baseline (a software fix, not a hardware one).
DRIFT_CHECKS = frozenset(p.check for p in PINS)


def _item(m: Mismatch) -> dict[str, str | None]:
    return {"field": m.field, "expected": m.expected, "actual": m.actual}


def _one_of_detail(pin: Pin, facts: HostFacts, accepted: list[str]) -> str:
    """``"GPU 5, 6: 96.00.74.00.0B"``: the owners of each unaccepted value."""
    ok = {v.strip().lower() for v in accepted}
    by_value: dict[str, list[str]] = {}
    for owner, value in pin.owners(facts) if pin.owners else []:
        if value.strip().lower() not in ok:
            by_value.setdefault(value, []).append(owner)
    return "; ".join(f"{pin.owner_prefix}{', '.join(o)}: {v}" for v, o in by_value.items())


def drift_check(pin: Pin) -> CheckFn:
    """The check for ``pin``: pass when the host is as pinned, fail (no fault) on drift."""
    name = pin.check

    def run(facts: HostFacts, ctx: CheckContext, params: Mapping[str, Any]) -> CheckResult:
        baseline = ctx.baseline
        if baseline is None:
            return res(name, CheckStatus.SKIP, "no baseline assigned")
        expected = pin.expected(baseline)
        if not expected:
            return res(
                name, CheckStatus.SKIP, f"baseline {baseline.name} does not pin the {pin.label}"
            )
        if not pin.actual(facts) and not pin.missing_is_drift:
            return res(name, CheckStatus.SKIP, f"{pin.label} not collected")
        items = pin.mismatches(facts, baseline)
        ev: dict[str, Any] = {"baseline": baseline.name, "drift": [_item(m) for m in items]}
        if not items:
            return res(name, CheckStatus.PASS, f"{pin.label} as in baseline {baseline.name}", **ev)
        if pin.compare is Compare.ONE_OF and pin.owners is not None:
            assert isinstance(expected, list)
            msg = (
                f"{pin.title} not in baseline {baseline.name} ({', '.join(expected)}): "
                f"{_one_of_detail(pin, facts, expected)}"
            )
        else:
            diffs = "; ".join(
                f"{m.field} {m.actual if m.actual is not None else 'unset'}, expected {m.expected}"
                for m in items
            )
            msg = f"drift from baseline {baseline.name}: {diffs}"
        return res(name, CheckStatus.FAIL, msg, **ev)

    run.__name__ = run.__qualname__ = name
    run.__doc__ = pin.doc
    return run


for _pin in PINS:
    check(_pin.check)(drift_check(_pin))
