"""Xids in the kernel log, judged by the Xid policy within a time window."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from gpufleet.domain.checks.base import NUMBER, CheckContext, CheckResult, CheckStatus, check, res
from gpufleet.domain.facts import HostFacts
from gpufleet.domain.health import Fault
from gpufleet.domain.times import as_utc


def _aware(t: datetime) -> datetime:
    # Kernel-log parsers may yield naive times; treat them as UTC rather than crash comparing.
    return as_utc(t)


@check("xid", window_hours=NUMBER)
def xid(facts: HostFacts, ctx: CheckContext, params: Mapping[str, Any]) -> CheckResult:
    """Xids in the kernel log within ``window_hours`` (default 24) of ``ctx.now``, judged by
    ``ctx.xid_policy``.

    Fatal (per the policy) fail with ``fatal_xid``; known non-fatal and unknown codes warn.
    Events without a timestamp are counted: they are in the current boot's log, and a fatal
    Xid needs a reset or reboot that would have cleared it.

    Fail closed: a kernel log that was not collected or not readable (``xids is None``) fails
    (no fault: the host stays in validation with the reason), and so do unreadable Xid lines
    in the window, which could be the fatal one, unless a readable fatal Xid already fails it.
    """
    name = "xid"
    policy = ctx.xid_policy
    window = timedelta(hours=float(params.get("window_hours", 24)))
    since = _aware(ctx.now) - window
    if facts.xids is None:
        why = next((p for p in facts.problems if "kernel-xid" in p), None)
        msg = "kernel log not collected or unreadable: cannot rule out a fatal Xid"
        return res(name, CheckStatus.FAIL, msg + (f" ({why})" if why else ""), collected=False)

    def in_window(t: datetime | None) -> bool:
        return t is None or _aware(t) >= since

    recent = [e for e in facts.xids if in_window(e.time)]
    damaged = [u for u in facts.xid_unreadable if in_window(u.time)]
    ev: dict[str, Any] = {
        "since": since.isoformat(),
        "ignored_older": len(facts.xids) - len(recent),
        "unreadable_lines": [u.line for u in damaged],
    }
    unread = ""
    if damaged:
        shown = ", ".join(str(u.line) for u in damaged[:8]) + (" ..." if len(damaged) > 8 else "")
        unread = f"{len(damaged)} unreadable Xid line(s) in the kernel log (line {shown})"
    if damaged and not any(policy.is_fatal(e.code) for e in recent):
        msg = f"{unread}: cannot rule out a fatal Xid"
        return res(name, CheckStatus.FAIL, msg, **ev)
    if not recent:
        span = f" in the last {params.get('window_hours', 24)}h"
        return res(name, CheckStatus.PASS, f"no Xid{span}", **ev)
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
        return res(name, CheckStatus.FAIL, msg, Fault.FATAL_XID, **ev)
    return res(name, CheckStatus.WARN, "non-fatal " + "; ".join(line(c) for c in other), **ev)
