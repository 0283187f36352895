"""Times: the one home of "naive means UTC" and of reading an operator's time.

The store keeps aware UTC times; a naive value read back or handed over (an old row, a
kernel-log parser) is UTC: :func:`as_utc`. A time an operator types (``allocate --start``,
``capacity --at``, ``hosts eta``, ``leases renew --until`` ...) without a zone is in the
operator's zone: :func:`parse_time` with the zone the edge resolved (the CLI: the local zone,
``TZ``, or UTC with ``--utc``; the API: UTC, its callers send zoned times).
docs/reference.md, "Times", says the same for operators.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from gpufleet.errors import ConfigError

#: Shown with a bad time: what to type.
EXAMPLE = "2026-12-04T18:00 (local time), 2026-12-04T18:00Z or 2026-12-04T18:00+08:00"


def as_utc(dt: datetime) -> datetime:
    """``dt`` with a zone: a naive value is UTC (how the store keeps times)."""
    return dt if dt.tzinfo is not None else dt.replace(tzinfo=UTC)


def local_zone(environ: Mapping[str, str]) -> tzinfo | None:
    """The zone ``TZ`` names in ``environ`` (``Asia/Shanghai``, ``:Europe/Paris``, ``UTC``),
    or None: the machine's local zone (no ``TZ``, or one the zone database does not know,
    such as a POSIX ``CST-8``, which the C library reads)."""
    name = environ.get("TZ", "").strip().removeprefix(":")
    if not name:
        return None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return None


def parse_time(text: str, what: str, zone: tzinfo | None) -> datetime:
    """An operator's time: ISO 8601 (``2026-12-12T08:00``, ``2026-12-12 08:00``, with ``Z``
    or ``+08:00``), in UTC (as the store keeps it). Without a zone it is a time in ``zone``
    (None: the machine's local zone). A :class:`~gpufleet.errors.ConfigError` (exit 2)
    naming ``what`` otherwise."""
    raw = text.strip()
    try:
        dt = datetime.fromisoformat(raw[:-1] + "+00:00" if raw[-1:] in "zZ" and raw else raw)
    except ValueError:
        raise ConfigError(f"{what} '{text}': not a time; use ISO 8601, e.g. {EXAMPLE}") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=zone) if zone is not None else dt.astimezone()
    return dt.astimezone(UTC)


def shown(dt: datetime, zone: tzinfo | None) -> datetime:
    """``dt`` in the zone it is shown in (None: the machine's local zone)."""
    return as_utc(dt).astimezone(zone)
