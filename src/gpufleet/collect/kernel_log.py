"""Parser for ``NVRM: Xid`` events in kernel logs.

Accepted line prefixes (all seen in real captures or produced by the collection script):

* ``dmesg --time-format=iso``  ``2024-11-15T12:02:03,470068+00:00 NVRM: Xid ...``
* ``dmesg --decode --time-format=iso``  ``kern  :warn  : 2025-01-21T02:21:33,498559+00:00 ...``
* ``dmesg --ctime``  ``[Sun Feb 23 16:24:18 2025] NVRM: Xid ...`` (host-local time, naive)
* plain ``dmesg``  ``[  123.456789] NVRM: Xid ...`` (seconds since boot: ``time`` is None)
* ``journalctl -k -o short-iso``  ``2025-01-21T02:21:33+0000 host kernel: NVRM: Xid ...``

The log is noisy, so lines without ``NVRM: Xid`` are ignored; a line that has it but cannot
be read (e.g. cut mid-line) raises :class:`ParseError` rather than yielding a guessed event.
"""

from __future__ import annotations

import re
from datetime import datetime

from gpufleet.domain.facts import XidEvent
from gpufleet.errors import ParseError

_MARK = "NVRM: Xid"
# "(PCI:0000:19:00)" on current drivers, "(0000:03:00)" on old ones.
_XID = re.compile(
    r"NVRM: Xid \((?P<pci>[^)]*)\): (?P<code>\d+)"
    r"(?:, pid=(?P<pid>'[^']*'|[^,\s]*))?"
    r"(?:, name=(?P<name>[^,]*))?"
    r"(?:,\s*(?P<msg>.*?))?\s*$"
)
_FACILITY = re.compile(r"^\s*[a-z]+\s*:\s*[a-z]+\s*:\s*")  # "kern  :warn  : "
_ISO = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:[,.]\d+)?(?:[+-]\d{2}:?\d{2}|Z)?)\b")
_BRACKET = re.compile(r"^\[\s*([^\]]*?)\s*\]")
_MONOTONIC = re.compile(r"^\d+\.\d+$")


def _parse_time(prefix: str) -> tuple[datetime | None, str | None]:
    """Timestamp of a log line from the text before ``NVRM:``; (None, None) if it has none."""
    prefix = _FACILITY.sub("", prefix).strip()
    if not prefix:
        return None, None
    iso = _ISO.match(prefix)
    if iso:
        raw = iso.group(1)
        return datetime.fromisoformat(raw.replace(",", ".")), raw
    bracket = _BRACKET.match(prefix)
    if bracket:
        raw = bracket.group(1)
        if _MONOTONIC.match(raw):
            return None, raw  # seconds since boot, not a wall-clock time
        try:
            return datetime.strptime(raw, "%a %b %d %H:%M:%S %Y"), raw
        except ValueError:
            return None, raw
    # Unknown prefix (e.g. syslog "Jan 21 02:21:33 host kernel:"): keep it verbatim.
    return None, prefix


def parse_xids(text: str, source: str = "kernel log") -> list[XidEvent]:
    """All Xid events in ``text``, in log order, with their 1-based line numbers."""
    events: list[XidEvent] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        at = line.find(_MARK)
        if at < 0:
            continue
        m = _XID.match(line, at)
        if m is None:
            raise ParseError(source, f"unreadable Xid line: {line[at : at + 80]!r}", line=lineno)
        try:
            when, raw_time = _parse_time(line[:at])
        except ValueError as exc:
            raise ParseError(source, f"bad timestamp: {exc}", line=lineno) from exc
        pid_text = (m.group("pid") or "").strip("'")
        events.append(
            XidEvent(
                code=int(m.group("code")),
                pci_address=m.group("pci"),
                time=when,
                time_raw=raw_time,
                pid=int(pid_text) if pid_text.isdigit() else None,
                message=(m.group("msg") or "").strip(),
                line=lineno,
            )
        )
    return events
