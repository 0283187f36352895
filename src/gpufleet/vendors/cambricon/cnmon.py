"""Parser for Cambricon's ``cnmon`` summary (pure; captures in tests/fixtures/captured/cambricon).

``cnmon`` prints an optional timestamp line, a banner box (``CNMON vX.Y.Z``, from v5 also
``Driver vX.Y.Z``), then one box of three columns with a two-line header and two lines per
card, then a ``Processes:`` box. The header changed across the captured tool versions, and
each layout is known by its exact header cells (:data:`LAYOUTS`):

* ``v4``: ``Card VF Name Firmware | Inited Driver | Util Ecc-Error`` over
  ``Fan Temp Pwr:Usage/Cap | Memory-Usage | vMemory-Usage`` (v4.20.11: the driver per card);
* ``v5-sriov``: ``... | Bus-Id | Util Ecc-Error`` over ``... | Memory-Usage | SR-IOV
  Compute-Mode`` (v5.10.13: the driver on the banner, the PCI bus id per card);
* ``v5-mode``: as ``v5-sriov`` with ``Mode Compute-Mode`` (v5.10.31).

Header cells that are none of these are a :class:`ParseError` naming ``cnmon``, the line and
the columns: a new layout is refused, never read by position. Every card line must match its
layout's cell forms (``32C``, ``30 W/ 150 W``, ``0 MiB/ 23308 MiB``, ``0%``, ``N/A``); a
virtual function (``VF`` other than ``/``) appears in no capture and is refused. The table
must be closed by its border and followed by the ``Processes:`` box: a cut answer is refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpufleet.domain.accelerators import normalize_pci_address
from gpufleet.domain.boxes import box_cells
from gpufleet.errors import ParseError

CNMON = "cnmon"

_ROW1 = "Card VF Name Firmware"
_ROW2 = "Fan Temp Pwr:Usage/Cap"
#: Layout name -> (header line 1 cells 2-3, header line 2 cells 2-3).
LAYOUTS: dict[str, tuple[tuple[str, str], tuple[str, str]]] = {
    "v4": (("Inited Driver", "Util Ecc-Error"), ("Memory-Usage", "vMemory-Usage")),
    "v5-sriov": (("Bus-Id", "Util Ecc-Error"), ("Memory-Usage", "SR-IOV Compute-Mode")),
    "v5-mode": (("Bus-Id", "Util Ecc-Error"), ("Memory-Usage", "Mode Compute-Mode")),
}
_BY_CELLS = {cells: name for name, cells in LAYOUTS.items()}

_BORDER = re.compile(r"^\+[-+=]+\+$")
_SEPARATOR = re.compile(r"^\|=[=+]*=\|$")
_BANNER = re.compile(r"^\|\s*CNMON (v[\w.]+)(?:\s+Driver (v[\w.]+))?\s*\|$", re.ASCII)
_STAMP = re.compile(r"^[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}$", re.ASCII)
_CARD = re.compile(r"^(\d{1,3})\s+(\S+)\s+(\S+)\s+(v[\w.]+)$", re.ASCII)
_POWER = re.compile(
    r"^(\d{1,3})%\s+(\d{1,3})C\s+(\d{1,5}(?:\.\d+)?|N/A) W/\s*(\d{1,5}(?:\.\d+)?|N/A) W$",
    re.ASCII,
)
_MEMORY = re.compile(r"^(\d{1,9}) MiB/\s*(\d{1,9}) MiB$", re.ASCII)
_UTIL = re.compile(r"^(\d{1,3})%\s+(N/A|\d{1,12})$", re.ASCII)
_INITED = re.compile(r"^(On|Off)\s+(v[\w.]+)$", re.ASCII)
_BUS = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$", re.ASCII)
_WORDS = re.compile(r"^(\S+)\s+(\S+)$")


@dataclass(frozen=True, slots=True)
class MluCard:
    """One card of the table (None: the layout has no such cell, or ``N/A``)."""

    index: int
    name: str
    firmware: str
    utilisation_pct: int
    ecc_errors: int | None
    fan_pct: int
    temperature_c: int
    power_w: float | None
    power_cap_w: float | None
    memory_used_mib: int
    memory_total_mib: int
    bus_id: str | None = None
    driver: str | None = None  # v4: per card
    inited: str | None = None  # v4: On/Off
    virtual_memory_used_mib: int | None = None  # v4
    virtual_memory_total_mib: int | None = None  # v4
    mode: str | None = None  # v5: SR-IOV / Mode cell (N/A, FULL)
    compute_mode: str | None = None  # v5


@dataclass(frozen=True, slots=True)
class Cnmon:
    """The summary: the tool's version, the driver of the banner (v5) and the cards."""

    version: str
    layout: str
    driver: str | None
    cards: tuple[MluCard, ...]


def _cells(line: str) -> list[str] | None:
    return box_cells(line, 3, collapse=False)


def _norm(cell: str) -> str:
    return " ".join(cell.split())


def parse_cnmon(text: str, source: str = CNMON) -> Cnmon:
    """Parse ``cnmon``'s summary (module docstring)."""
    lines = [(n, ln.rstrip()) for n, ln in enumerate(text.splitlines(), start=1) if ln.strip()]
    pos = 0
    if pos < len(lines) and _STAMP.match(lines[pos][1]):
        pos += 1

    def need(what: str) -> tuple[int, str]:
        if pos >= len(lines):
            raise ParseError(source, f"output ends before {what}: cut short")
        return lines[pos]

    n, line = need("the banner")
    if not _BORDER.match(line):
        raise ParseError(source, f"not cnmon's banner box: {line[:60]!r}", line=n)
    pos += 1
    n, line = need("the banner")
    banner = _BANNER.match(line)
    if banner is None:
        raise ParseError(source, f"no 'CNMON v...' banner: {line[:60]!r}", line=n)
    version, banner_driver = banner.group(1), banner.group(2)
    pos += 1
    n, line = need("the table")
    if not _BORDER.match(line):
        raise ParseError(source, "no border under the banner", line=n)
    pos += 1
    heads: list[list[str]] = []
    for _ in range(2):
        n, line = need("the table header")
        cells = _cells(line)
        if cells is None:
            raise ParseError(source, f"not a 3-column header line: {line[:80]!r}", line=n)
        heads.append([_norm(c) for c in cells])
        pos += 1
    (h1, h2), header_line = heads, lines[pos - 2][0]
    layout = _BY_CELLS.get(((h1[1], h1[2]), (h2[1], h2[2])))
    if (h1[0], h2[0]) != (_ROW1, _ROW2) or layout is None:
        raise ParseError(
            source,
            f"unknown table header (columns {' | '.join(h1)} / {' | '.join(h2)}); known "
            "layouts: "
            + "; ".join(
                f"{k}: {_ROW1} | {' | '.join(a)} / {_ROW2} | {' | '.join(b)}"
                for k, (a, b) in LAYOUTS.items()
            ),
            line=header_line,
            column=1,
        )
    n, line = need("the header separator")
    if not _SEPARATOR.match(line):
        raise ParseError(source, f"no '|===' line under the header: {line[:60]!r}", line=n)
    pos += 1
    cards: list[MluCard] = []
    seen: set[int] = set()
    while True:
        n, line = need("the end of the table")
        if _BORDER.match(line):
            pos += 1
            n, line = need("the Processes box")
            if line.startswith("|"):
                continue  # the next card
            if not (
                _BORDER.match(line) and pos + 1 < len(lines) and "Processes:" in lines[pos + 1][1]
            ):
                raise ParseError(source, f"no Processes box after the table: {line[:60]!r}", line=n)
            break
        first = _cells(line)
        if first is None:
            raise ParseError(source, f"not a card line: {line[:80]!r}", line=n)
        pos += 1
        n2, line2 = need(f"the second line of card line {n}")
        second = _cells(line2)
        if second is None:
            raise ParseError(source, f"not a card line: {line2[:80]!r}", line=n2)
        pos += 1
        card = _card(first, second, layout, source, n, n2)
        if card.index in seen:
            raise ParseError(source, f"card {card.index} listed twice", line=n)
        seen.add(card.index)
        cards.append(card)
    if not cards:
        raise ParseError(source, "the table lists no card", line=header_line)
    return Cnmon(version=version, layout=layout, driver=banner_driver, cards=tuple(cards))


def _fail(source: str, line: int, col: str, value: str) -> ParseError:
    return ParseError(source, f"{col}: cannot read {value[:60]!r}", line=line)


def _card(
    first: list[str], second: list[str], layout: str, source: str, n1: int, n2: int
) -> MluCard:
    c = _CARD.match(_norm(first[0]))
    if c is None:
        raise _fail(source, n1, "Card VF Name Firmware", first[0])
    if c.group(2) != "/":
        raise ParseError(
            source, f"VF {c.group(2)!r}: virtual functions appear in no capture", line=n1
        )
    u = _UTIL.match(_norm(first[2]))
    if u is None:
        raise _fail(source, n1, "Util Ecc-Error", first[2])
    p = _POWER.match(_norm(second[0]))
    if p is None:
        raise _fail(source, n2, "Fan Temp Pwr:Usage/Cap", second[0])
    m = _MEMORY.match(_norm(second[1]))
    if m is None:
        raise _fail(source, n2, "Memory-Usage", second[1])
    bus = driver = inited = mode = compute = None
    vused = vtotal = None
    if layout == "v4":
        i = _INITED.match(_norm(first[1]))
        if i is None:
            raise _fail(source, n1, "Inited Driver", first[1])
        inited, driver = i.group(1), i.group(2)
        v = _MEMORY.match(_norm(second[2]).replace("MiB/", "MiB/ "))
        if v is None:
            raise _fail(source, n2, "vMemory-Usage", second[2])
        vused, vtotal = int(v.group(1)), int(v.group(2))
    else:
        if not _BUS.match(first[1]):
            raise _fail(source, n1, "Bus-Id", first[1])
        bus = normalize_pci_address(first[1].lower())
        w = _WORDS.match(_norm(second[2]))
        if w is None:
            raise _fail(source, n2, "Mode Compute-Mode", second[2])
        mode = None if w.group(1) == "N/A" else w.group(1)
        compute = w.group(2)

    def watts(v: str) -> float | None:
        return None if v == "N/A" else float(v)

    return MluCard(
        index=int(c.group(1)),
        name=c.group(3),
        firmware=c.group(4),
        utilisation_pct=int(u.group(1)),
        ecc_errors=None if u.group(2) == "N/A" else int(u.group(2)),
        fan_pct=int(p.group(1)),
        temperature_c=int(p.group(2)),
        power_w=watts(p.group(3)),
        power_cap_w=watts(p.group(4)),
        memory_used_mib=int(m.group(1)),
        memory_total_mib=int(m.group(2)),
        bus_id=bus,
        driver=driver,
        inited=inited,
        virtual_memory_used_mib=vused,
        virtual_memory_total_mib=vtotal,
        mode=mode,
        compute_mode=compute,
    )
