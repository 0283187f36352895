"""Leases and reservations: their states, the per-pool expiry policy, duration and size
parsing. Pure: times come in as values.

A *lease* hands whole hosts to an owner for a purpose until an expiry; a *reservation* is a
lease whose start lies in the future (state ``reserved``): it holds its hosts for its window
against every overlapping placement and becomes ``active`` at its start (``gpufleet sweep``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from gpufleet.errors import ConfigError


class LeaseState(StrEnum):
    """Where a lease is in its life."""

    RESERVED = "reserved"
    """Booked for a future window; its hosts are held for that window only."""

    ACTIVE = "active"
    """Its hosts are ``allocated`` to the owner."""

    RELEASED = "released"
    """Given back (by the owner, or by the expiry policy); its hosts went to ``reclaiming``."""

    CANCELLED = "cancelled"
    """A reservation released before its start; its hosts were never allocated."""


#: Lease states that hold hosts (for their window).
HOLDING: frozenset[LeaseState] = frozenset({LeaseState.RESERVED, LeaseState.ACTIVE})


class OnExpiry(StrEnum):
    """What happens when an active lease passes its expiry (per pool)."""

    NOTIFY = "notify"
    """Record a ``lease-expired`` event and call the hooks once; the hosts stay allocated."""

    RELEASE = "release"
    """Release the lease: its hosts go to ``reclaiming`` (then the reclaim checks)."""


@dataclass(frozen=True, slots=True)
class LeasePolicy:
    """A pool's lease rules: what expiry does, and the longest a lease may run before its
    owner must renew it (a request or renewal past it is refused)."""

    on_expiry: OnExpiry = OnExpiry.RELEASE
    max_duration: timedelta = timedelta(days=7)


DEFAULT_POLICY = LeasePolicy()

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$", re.IGNORECASE)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str, what: str = "duration") -> timedelta:
    """``90m``, ``72h``, ``7d``, ``2w`` as a timedelta; a ConfigError (exit 2) naming
    ``what`` otherwise (zero and negative durations are refused)."""
    m = _DURATION.match(text or "")
    if not m:
        raise ConfigError(f"{what} '{text}': use a number and a unit (s, m, h, d, w), e.g. 72h")
    seconds = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if seconds <= 0:
        raise ConfigError(f"{what} '{text}' must be longer than zero")
    if not seconds < _LONGEST_S:
        raise ConfigError(f"{what} '{text}' is too long (at most {_LONGEST_S // 86_400:.0f}d)")
    return timedelta(seconds=seconds)


#: The longest duration a timedelta holds, in seconds (999,999,999 days).
_LONGEST_S = timedelta.max.days * 86_400.0


_MEMORY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(g|gb|gib|m|mb|mib|t|tb|tib)?\s*$", re.IGNORECASE)


def parse_gpu_memory(text: str) -> int:
    """``80G`` / ``80GiB`` / ``81920M`` as MiB (GPU memory is sold in binary units; a bare
    number is GiB)."""
    m = _MEMORY.match(text or "")
    if not m:
        raise ConfigError(f"--min-gpu-memory '{text}': use e.g. 80G or 40960M")
    unit = (m.group(2) or "g").lower()[0]
    factor = {"m": 1, "g": 1024, "t": 1024 * 1024}[unit]
    return int(float(m.group(1)) * factor)


def parse_percent(text: str) -> float:
    """``10%`` or ``10`` as 0.10; refused outside 0..1000 %."""
    raw = (text or "").strip().rstrip("%").strip()
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"--headroom '{text}': use a percentage, e.g. 10%") from None
    if not 0 <= value <= 1000:
        raise ConfigError(f"--headroom '{text}' must be between 0% and 1000%")
    return value / 100


def overlaps(a_start: datetime, a_end: datetime, b_start: datetime, b_end: datetime) -> bool:
    """True when the half-open windows [a_start, a_end) and [b_start, b_end) overlap."""
    return a_start < b_end and b_start < a_end


def lease_window(
    now: datetime,
    *,
    start: datetime | None,
    duration: timedelta | None,
    until: datetime | None,
    policy: LeasePolicy = DEFAULT_POLICY,
) -> tuple[datetime, datetime]:
    """The [start, end) of a request: ``start`` (default now; a start in the past is now)
    with ``--for`` or ``--until``; refused when it ends before it starts or runs longer than
    the policy allows without renewal."""
    begin = max(start, now) if start is not None else now
    if (duration is None) == (until is None):
        raise ConfigError("give exactly one of --for DURATION or --until TIME")
    if duration is not None and duration > policy.max_duration:
        raise ConfigError(
            f"a lease may run at most {_human(policy.max_duration)} before it is renewed "
            f"(asked {_human(duration)}); ask for less and renew it"
        )
    try:
        end = begin + duration if duration is not None else until
    except OverflowError:
        raise ConfigError(
            f"the lease would end after the year 9999 (from {begin.isoformat()}); "
            "ask for an earlier start"
        ) from None
    assert end is not None
    if end <= begin:
        raise ConfigError(
            f"the lease would end ({end.isoformat()}) before it starts ({begin.isoformat()})"
        )
    if end - begin > policy.max_duration:
        raise ConfigError(
            f"a lease may run at most {_human(policy.max_duration)} before it is renewed "
            f"(asked {_human(end - begin)}); ask for less and renew it"
        )
    return begin, end


def _human(d: timedelta) -> str:
    hours = d.total_seconds() / 3600
    return f"{hours / 24:g}d" if hours >= 48 else f"{hours:g}h"


def renewed_end(
    lease_id: int,
    current: datetime,
    now: datetime,
    *,
    duration: timedelta | None,
    until: datetime | None,
    shorten: bool = False,
) -> datetime:
    """The new end of a renewed lease that ends at ``current``: ``--for D`` extends it from
    its current end (``current + D``; from ``now`` when that end has passed, a lease kept
    past its end), ``--until T`` sets it to T. An end before ``current``
    shortens the lease, refused (ConfigError, exit 2) unless ``shorten``; ``--shorten`` goes
    with ``--until`` only (``--for`` always extends)."""
    if (duration is None) == (until is None):
        raise ConfigError("give exactly one of --for DURATION or --until TIME")
    if duration is not None:
        if shorten:
            raise ConfigError(
                "--shorten goes with --until TIME (--for always extends the lease from its "
                "current end)"
            )
        try:
            return max(current, now) + duration
        except OverflowError:
            raise ConfigError("the lease would end after the year 9999") from None
    assert until is not None
    if until < current and not shorten:
        raise ConfigError(
            f"--until {until.isoformat(timespec='minutes')} would shorten lease {lease_id} by "
            f"{_human(current - until)} (it ends {current.isoformat(timespec='minutes')}); "
            "pass --shorten to shorten it, or --for DURATION to extend it"
        )
    return until
