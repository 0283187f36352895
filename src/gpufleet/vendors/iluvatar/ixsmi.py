"""Parser for Iluvatar CoreX's ``ixsmi`` summary (pure; captures in
tests/fixtures/captured/iluvatar).

``ixsmi`` prints nvidia-smi's layout: a ``Timestamp    <ctime>`` line, a box whose first row is
the banner (``IX-ML: 4.1.0  Driver Version: 4.1.0  CUDA Version: 10.2``), a two-line header of
three columns, two lines per GPU each closed by a ``+---+`` border, then a ``Processes:`` box.
The header is known by its exact cells (:data:`HEADERS`; IX-ML 4.1.0 and 4.3.0 print the same):

* ``GPU Name | Bus-Id | Clock-SM Clock-Mem`` over
  ``Fan Temp Perf Pwr:Usage/Cap | Memory-Usage | GPU-Util Compute M.``.

Header cells that are not these are a :class:`ParseError` naming ``ixsmi``, the line and the
columns: a new layout is refused, never read by position. Every GPU line must match its cell
forms (``32C``, ``93W / 350W`` or ``N/A / N/A``, ``116MiB / 32768MiB``, ``0%``, fan ``0%`` in
4.1.0 and ``N/A`` in 4.3.0); the table must be closed by its border and followed by the
``Processes:`` box (a cut answer is refused). ``N/A`` power is absent (None), never zero: on a
BI-V150 host every even-indexed GPU prints ``N/A / N/A`` and the odd one after it the power of
the pair (:func:`boards`). The summary has no ECC, health or serial column.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpufleet.domain.accelerators import normalize_pci_address
from gpufleet.domain.boxes import box_cells
from gpufleet.errors import ParseError

IXSMI = "ixsmi"

#: Layout name -> (header line 1 cells, header line 2 cells), blanks collapsed.
HEADERS: dict[str, tuple[tuple[str, str, str], tuple[str, str, str]]] = {
    "ix-ml-4": (
        ("GPU Name", "Bus-Id", "Clock-SM Clock-Mem"),
        ("Fan Temp Perf Pwr:Usage/Cap", "Memory-Usage", "GPU-Util Compute M."),
    ),
}
_BY_CELLS = {cells: name for name, cells in HEADERS.items()}

_STAMP = re.compile(
    r"^Timestamp\s+[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}$", re.ASCII
)
_BORDER = re.compile(r"^\+[-+=]+\+$")
_RULE = re.compile(r"^\|[-+]+\|$")
_SEPARATOR = re.compile(r"^\|=[=+]*=\|$")
_BANNER = re.compile(
    r"^\|\s*IX-ML: (\d[\w.]*)\s+Driver Version: (\d[\w.]*)\s+CUDA Version: (\d[\w.]*)\s*\|$",
    re.ASCII,
)
_GPU = re.compile(r"^(\d{1,3})\s+(\S.{0,62})$", re.ASCII)
_BUS = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$", re.ASCII)
_CLOCKS = re.compile(r"^(\d{1,6})MHz\s+(\d{1,6})MHz$", re.ASCII)
_STATE = re.compile(
    r"^(N/A|\d{1,3}%)\s+(\d{1,3})C\s+(P\d{1,2})\s+(N/A|\d{1,5}W) / (N/A|\d{1,5}W)$", re.ASCII
)
_MEMORY = re.compile(r"^(\d{1,9})MiB / (\d{1,9})MiB$", re.ASCII)
_UTIL = re.compile(r"^(\d{1,3})%\s+(\S+)$", re.ASCII)


@dataclass(frozen=True, slots=True)
class IxGpu:
    """One GPU of the table (None: ``N/A``)."""

    index: int
    name: str
    bus_id: str
    clock_sm_mhz: int
    clock_mem_mhz: int
    fan_pct: int | None
    temperature_c: int
    perf: str
    power_w: float | None
    power_cap_w: float | None
    memory_used_mib: int
    memory_total_mib: int
    utilisation_pct: int
    compute_mode: str


@dataclass(frozen=True, slots=True)
class IxSmi:
    """The summary: the banner's versions (IX-ML, driver, CUDA) and the GPUs."""

    layout: str
    ixml: str
    driver: str
    cuda: str
    gpus: tuple[IxGpu, ...]


def _cells(line: str) -> list[str] | None:
    return box_cells(line, 3)


def parse_ixsmi(text: str, source: str = IXSMI) -> IxSmi:
    """Parse ``ixsmi``'s summary (module docstring)."""
    lines = [(n, ln.rstrip()) for n, ln in enumerate(text.splitlines(), start=1) if ln.strip()]
    pos = 0

    def need(what: str) -> tuple[int, str]:
        if pos >= len(lines):
            raise ParseError(source, f"output ends before {what}: cut short")
        return lines[pos]

    n, line = need("the timestamp")
    if not _STAMP.match(line):
        raise ParseError(source, f"no 'Timestamp' line: {line[:60]!r}", line=n)
    pos += 1
    n, line = need("the banner")
    if not _BORDER.match(line):
        raise ParseError(source, f"not ixsmi's banner box: {line[:60]!r}", line=n)
    pos += 1
    n, line = need("the banner")
    banner = _BANNER.match(line)
    if banner is None:
        raise ParseError(source, f"no 'IX-ML: ... Driver Version: ...' banner: {line[:80]!r}",
                         line=n)
    pos += 1
    n, line = need("the table header")
    if not _RULE.match(line):
        raise ParseError(source, f"no '|---+' rule under the banner: {line[:60]!r}", line=n)
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
    n, line = need("the header separator")
    if not _SEPARATOR.match(line):
        raise ParseError(source, f"no '|===' line under the header: {line[:60]!r}", line=n)
    pos += 1
    gpus: list[IxGpu] = []
    seen: set[int] = set()
    while True:
        n, line = need("a GPU line")
        first = _cells(line)
        if first is None:
            raise ParseError(source, f"not a GPU line: {line[:80]!r}", line=n)
        pos += 1
        n2, line2 = need(f"the second line of GPU line {n}")
        second = _cells(line2)
        if second is None:
            raise ParseError(source, f"not a GPU line: {line2[:80]!r}", line=n2)
        pos += 1
        gpu = _gpu(first, second, source, n, n2)
        if gpu.index in seen:
            raise ParseError(source, f"GPU {gpu.index} listed twice", line=n)
        seen.add(gpu.index)
        gpus.append(gpu)
        n, line = need(f"the border under GPU {gpu.index}")
        if not _BORDER.match(line):
            raise ParseError(source, f"no border under GPU {gpu.index}: {line[:60]!r}", line=n)
        pos += 1
        n, line = need("the Processes box")
        if line.startswith("|"):
            continue  # the next GPU
        if not (
            _BORDER.match(line) and pos + 1 < len(lines) and "Processes:" in lines[pos + 1][1]
        ):
            raise ParseError(source, f"no Processes box after the table: {line[:60]!r}", line=n)
        break
    return IxSmi(
        layout=layout,
        ixml=banner.group(1),
        driver=banner.group(2),
        cuda=banner.group(3),
        gpus=tuple(gpus),
    )


def _fail(source: str, line: int, col: str, value: str) -> ParseError:
    return ParseError(source, f"{col}: cannot read {value[:60]!r}", line=line)


def _watts(v: str) -> float | None:
    return None if v == "N/A" else float(v.removesuffix("W"))


def _gpu(first: list[str], second: list[str], source: str, n1: int, n2: int) -> IxGpu:
    g = _GPU.match(first[0])
    if g is None:
        raise _fail(source, n1, "GPU Name", first[0])
    if not _BUS.match(first[1]):
        raise _fail(source, n1, "Bus-Id", first[1])
    c = _CLOCKS.match(first[2])
    if c is None:
        raise _fail(source, n1, "Clock-SM Clock-Mem", first[2])
    s = _STATE.match(second[0])
    if s is None:
        raise _fail(source, n2, "Fan Temp Perf Pwr:Usage/Cap", second[0])
    m = _MEMORY.match(second[1])
    if m is None:
        raise _fail(source, n2, "Memory-Usage", second[1])
    u = _UTIL.match(second[2])
    if u is None:
        raise _fail(source, n2, "GPU-Util Compute M.", second[2])
    fan = s.group(1)
    return IxGpu(
        index=int(g.group(1)),
        name=g.group(2),
        bus_id=normalize_pci_address(first[1].lower()),
        clock_sm_mhz=int(c.group(1)),
        clock_mem_mhz=int(c.group(2)),
        fan_pct=None if fan == "N/A" else int(fan[:-1]),
        temperature_c=int(s.group(2)),
        perf=s.group(3),
        power_w=_watts(s.group(4)),
        power_cap_w=_watts(s.group(5)),
        memory_used_mib=int(m.group(1)),
        memory_total_mib=int(m.group(2)),
        utilisation_pct=int(u.group(1)),
        compute_mode=u.group(2),
    )
