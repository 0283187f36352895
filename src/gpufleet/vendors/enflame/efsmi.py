"""Parser for Enflame's ``efsmi`` summary (pure; captures in tests/fixtures/captured/enflame).

``efsmi`` (V1.2.0.301 captured) prints a four-line dashed banner (``Enflame System Management
Interface``), a box whose top border carries the timestamp (``+2024-12-06, 11:33:56 CST---+``),
the version row (``EFSMI V1.2.0.301  Driver Ver: 1.2.0.301``), a two-line header of three
columns and two lines per card, each card closed by a ``+---+`` border and the next one opened
by a ``|---|`` rule. The header is known by its exact cells (:data:`HEADERS`):

* ``DEV NAME | FW VER | BUS-ID ECC`` over ``TEMP Dpm Pwr(Usage/Cap) | Mem GCU Virt | DUsed SN``.

Header cells that are not these are a :class:`ParseError` naming ``efsmi``, the line and the
columns. Every card line must match the captured cell forms (``39 C``, ``105W  300W``,
``49120MiB``, ``0.0%``, ECC and GCU Virt ``Enable``/``Disable``); a forms no capture shows
(``N/A``) is refused. A card cut short, a rule with no card after it or a box without its
closing border are refused; the summary has no closing box of its own, so an answer cut right
after a card's border reads as a host with fewer cards (the count check sees it).

``Mem`` is the capacity net of ECC: the same S60 shows 49120 MiB with ECC off and 42976 MiB
with it on (both on the captured host), so the ECC state is kept with the memory.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpufleet.domain.accelerators import normalize_pci_address
from gpufleet.domain.boxes import box_cells
from gpufleet.errors import ParseError

EFSMI = "efsmi"

#: Layout name -> (header line 1 cells, header line 2 cells), blanks collapsed.
HEADERS: dict[str, tuple[tuple[str, str, str], tuple[str, str, str]]] = {
    "efsmi-1.2": (
        ("DEV NAME", "FW VER", "BUS-ID ECC"),
        ("TEMP Dpm Pwr(Usage/Cap)", "Mem GCU Virt", "DUsed SN"),
    ),
}
_BY_CELLS = {cells: name for name, cells in HEADERS.items()}

_DASHES = re.compile(r"^-{20,}$")
_TITLE = re.compile(r"^-+ Enflame System Management Interface -+$")
_NOTICE = re.compile(r"^-+ \S.* -+$")
_TOP = re.compile(r"^\+(\d{4}-\d\d-\d\d, \d\d:\d\d:\d\d(?: [A-Z]{2,5})?)-+\+$", re.ASCII)
_VERSION = re.compile(r"^\|EFSMI\s+V(\d[\w.]*)\s+Driver Ver: (\d[\w.]*)\s*\|$", re.ASCII)
_RULE = re.compile(r"^\|-+\|$")
_BORDER = re.compile(r"^\+-+\+$")
_CARD = re.compile(r"^(\d{1,3}) (\S{1,40})$", re.ASCII)
_FW = re.compile(r"^\d[\w.-]{0,30}$", re.ASCII)
_BUS_ECC = re.compile(
    r"^([0-9A-Fa-f]{2,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]) (Enable|Disable)$", re.ASCII
)
_STATE = re.compile(r"^(\d{1,3}) C ([A-Za-z]{1,20}) (\d{1,5})W (\d{1,5})W$", re.ASCII)
_MEM = re.compile(r"^(\d{1,9})MiB (Enable|Disable)$", re.ASCII)
_USED = re.compile(r"^(\d{1,3}(?:\.\d{1,3})?)% ([A-Za-z0-9]{1,40})$", re.ASCII)


@dataclass(frozen=True, slots=True)
class Gcu:
    """One card of the table."""

    index: int
    name: str
    firmware: str
    bus_id: str
    ecc: bool
    temperature_c: int
    dpm: str
    power_w: float
    power_cap_w: float
    memory_mib: int  # net of ECC
    virtualisation: bool
    used_pct: float
    serial: str


@dataclass(frozen=True, slots=True)
class Efsmi:
    """The summary: its timestamp, efsmi's and the driver's versions, the cards."""

    layout: str
    timestamp: str
    version: str
    driver: str
    cards: tuple[Gcu, ...]


def _cells(line: str) -> list[str] | None:
    return box_cells(line, 3)


def parse_efsmi(text: str, source: str = EFSMI) -> Efsmi:
    """Parse ``efsmi``'s summary (module docstring)."""
    lines = [(n, ln.rstrip()) for n, ln in enumerate(text.splitlines(), start=1) if ln.strip()]
    pos = 0

    def need(what: str) -> tuple[int, str]:
        if pos >= len(lines):
            raise ParseError(source, f"output ends before {what}: cut short")
        return lines[pos]

    for form, what in ((_DASHES, "banner"), (_TITLE, "banner title"), (_NOTICE, "banner"),
                       (_DASHES, "banner")):
        n, line = need(f"the {what}")
        if not form.match(line):
            raise ParseError(source, f"not efsmi's {what}: {line[:60]!r}", line=n)
        pos += 1
    n, line = need("the table")
    top = _TOP.match(line)
    if top is None:
        raise ParseError(source, f"no timestamped top border: {line[:60]!r}", line=n)
    pos += 1
    n, line = need("the version row")
    version = _VERSION.match(line)
    if version is None:
        raise ParseError(source, f"no 'EFSMI V... Driver Ver: ...' row: {line[:80]!r}", line=n)
    pos += 1
    while pos < len(lines) and _RULE.match(lines[pos][1]):
        pos += 1
    heads: list[tuple[str, str, str]] = []
    for _ in range(2):
        n, line = need("the table header")
        cells = _cells(line)
        if cells is None:
            raise ParseError(source, f"not a 3-column header line: {line[:80]!r}", line=n)
        heads.append((cells[0], cells[1], cells[2]))
        pos += 1
    header_line = lines[pos - 2][0]
    layout = _BY_CELLS.get((heads[0], heads[1]))
    if layout is None:
        raise ParseError(
            source,
            f"unknown table header (columns {' | '.join(heads[0])} / {' | '.join(heads[1])}); "
            "known layouts: "
            + "; ".join(
                f"{k}: {' | '.join(a)} / {' | '.join(b)}" for k, (a, b) in HEADERS.items()
            ),
            line=header_line,
            column=1,
        )
    cards: list[Gcu] = []
    seen: set[int] = set()
    while True:
        n, line = need("a card")
        if not _RULE.match(line):
            raise ParseError(source, f"no '|---|' rule before a card: {line[:60]!r}", line=n)
        pos += 1
        n1, line1 = need("a card line")
        first = _cells(line1)
        if first is None:
            raise ParseError(source, f"not a card line: {line1[:80]!r}", line=n1)
        pos += 1
        n2, line2 = need(f"the second line of card line {n1}")
        second = _cells(line2)
        if second is None:
            raise ParseError(source, f"not a card line: {line2[:80]!r}", line=n2)
        pos += 1
        card = _card(first, second, source, n1, n2)
        if card.index in seen:
            raise ParseError(source, f"card {card.index} listed twice", line=n1)
        seen.add(card.index)
        cards.append(card)
        n, line = need(f"the border under card {card.index}")
        if not _BORDER.match(line):
            raise ParseError(source, f"no border under card {card.index}: {line[:60]!r}", line=n)
        pos += 1
        if pos == len(lines):
            break
    return Efsmi(
        layout=layout,
        timestamp=top.group(1),
        version=version.group(1),
        driver=version.group(2),
        cards=tuple(cards),
    )


def _fail(source: str, line: int, col: str, value: str) -> ParseError:
    return ParseError(source, f"{col}: cannot read {value[:60]!r}", line=line)


def _card(first: list[str], second: list[str], source: str, n1: int, n2: int) -> Gcu:
    c = _CARD.match(first[0])
    if c is None:
        raise _fail(source, n1, "DEV NAME", first[0])
    if not _FW.match(first[1]):
        raise _fail(source, n1, "FW VER", first[1])
    b = _BUS_ECC.match(first[2])
    if b is None:
        raise _fail(source, n1, "BUS-ID ECC", first[2])
    s = _STATE.match(second[0])
    if s is None:
        raise _fail(source, n2, "TEMP Dpm Pwr(Usage/Cap)", second[0])
    m = _MEM.match(second[1])
    if m is None:
        raise _fail(source, n2, "Mem GCU Virt", second[1])
    u = _USED.match(second[2])
    if u is None:
        raise _fail(source, n2, "DUsed SN", second[2])
    return Gcu(
        index=int(c.group(1)),
        name=c.group(2),
        firmware=first[1],
        bus_id=normalize_pci_address(b.group(1).lower()),
        ecc=b.group(2) == "Enable",
        temperature_c=int(s.group(1)),
        dpm=s.group(2),
        power_w=float(s.group(3)),
        power_cap_w=float(s.group(4)),
        memory_mib=int(m.group(1)),
        virtualisation=m.group(2) == "Enable",
        used_pct=float(u.group(1)),
        serial=u.group(2),
    )
