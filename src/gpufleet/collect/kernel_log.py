"""Parser for ``NVRM: Xid`` events in kernel logs.

Accepted line prefixes (all seen in real captures or produced by the collection script):

* ``dmesg --time-format=iso``  ``2024-11-15T12:02:03,470068+00:00 NVRM: Xid ...``
* ``dmesg --decode --time-format=iso``  ``kern  :warn  : 2025-01-21T02:21:33,498559+00:00 ...``
* ``dmesg --ctime``  ``[Sun Feb 23 16:24:18 2025] NVRM: Xid ...`` (host-local time, naive)
* plain ``dmesg``  ``[  123.456789] NVRM: Xid ...`` (seconds since boot: ``time`` is None)
* ``journalctl -k -o short-iso``  ``2025-01-21T02:21:33+0000 host kernel: NVRM: Xid ...``

The log is noisy, so lines without ``NVRM: Xid`` are ignored. A line that has it but cannot
be read (e.g. cut mid-line) never yields a guessed event: with ``unreadable=`` given, it is
recorded there (line number, timestamp if the prefix still has one, text) and parsing goes on,
so one damaged line cannot hide the fatal Xid on the next; without it, :class:`ParseError`.
"""

from __future__ import annotations

import re
from datetime import datetime

from pydantic import ValidationError

from gpufleet.domain.facts import NAME, TEXT, UnreadableXid, XidEvent
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


def parse_xids(
    text: str, source: str = "kernel log", *, unreadable: list[UnreadableXid] | None = None
) -> list[XidEvent]:
    """All readable Xid events in ``text``, in log order, with their 1-based line numbers.

    Each line is read on its own. An unreadable Xid line is appended to ``unreadable`` when
    that list is given (the caller reports it), else it raises :class:`ParseError`.
    """
    events: list[XidEvent] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        at = line.find(_MARK)
        if at < 0:
            continue
        try:
            events.append(_event(line, at, lineno, source))
        except ParseError as exc:
            if unreadable is None:
                raise
            try:
                when = _parse_time(line[:at])[0]
            except ValueError:
                when = None
            unreadable.append(
                UnreadableXid(line=lineno, time=when, text=f"{exc.message}"[: TEXT // 2])
            )
    return events


def _event(line: str, at: int, lineno: int, source: str) -> XidEvent:
    m = _XID.match(line, at)
    if m is None:
        raise ParseError(source, f"unreadable Xid line: {line[at : at + 80]!r}", line=lineno)
    try:
        when, raw_time = _parse_time(line[:at])
    except ValueError as exc:
        raise ParseError(source, f"bad timestamp: {exc}", line=lineno) from exc
    if len(m.group("code")) > 7:
        raise ParseError(source, f"Xid code {m.group('code')[:20]}... too long", line=lineno)
    pid_text = (m.group("pid") or "").strip("'")
    # "name=python3.10"; the driver prints "<unknown>" for a fault without a process.
    name = (m.group("name") or "").strip()
    process_name = name[:NAME] if name and name != "<unknown>" else None
    try:
        return XidEvent(
            code=int(m.group("code")),
            pci_address=m.group("pci"),
            time=when,
            time_raw=raw_time,
            pid=int(pid_text) if pid_text.isdigit() and len(pid_text) <= 10 else None,
            process_name=process_name,
            message=(m.group("msg") or "").strip(),
            line=lineno,
        )
    except ValidationError as exc:  # a value that does not fit (a 5000-digit code ...)
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        raise ParseError(source, f"Xid line: {field}: {err['msg']}", line=lineno) from None
