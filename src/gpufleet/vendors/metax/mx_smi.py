"""Parsers for MetaX's ``mx-smi`` and ``mx-smi topo -m/-n`` (pure; captures in
tests/fixtures/captured/metax, format facts in ../shared/fixtures/metax/NOTES.md).

Both answers open alike: an optional ``mx-smi  version: X`` line (absent where the capture's
author pasted without it), the ``MetaX System Management Interface Log`` banner (indented in
one capture), ``Timestamp :`` and ``Attached GPUs : N``.

``mx-smi`` then prints a box: ``MX-SMI <ver>  Kernel Mode Driver Version: <kmd>`` and
``MACA Version: <maca>  BIOS Version: <bios>``, a two-line header, two lines per GPU and a
``Process:`` box. The header changed across the captured versions; each layout is known by
its exact header cells (:data:`LAYOUTS`):

* ``2.1``: ``GPU NAME | Bus-id | GPU-Util`` over ``Temp Power | Memory-Usage |`` (mx-smi
  2.1.6: power without its cap, no state);
* ``2.2``: ``Board Name | GPU Persist-M | Bus-id | GPU-Util sGPU-M`` over ``Pwr:Usage/Cap |
  Temp Perf | Memory-Usage | GPU-State`` (mx-smi 2.2.9: board index apart from the GPU index,
  persistence, performance state, sGPU mode, ``GPU-State``).

Any other header is a :class:`ParseError` naming ``mx-smi``, the line and the columns. Every
cell must match its form (``31C``, ``44W``, ``57W / 350W``, ``826/65536 MiB``, ``0%``); the
number of GPU rows must be the ``Attached GPUs`` count and the ``Process:`` box must follow:
a cut answer is refused.

``mx-smi topo -m`` prints ``Device link type matrix``: a header of ``GPU<i>`` (and, for
``topo -n``, ``NIC<j>``) columns then ``Node Affinity  CPU Affinity``, one row per device (a
NIC row has no affinity cells), a ``Legend:`` of the link codes, and for ``-n`` a ``NIC
Legend:`` naming each NIC (``NIC0: mlx5_0``). Every code must be one the legend defines, the
diagonal ``X``, the matrix symmetric.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpufleet.domain.accelerators import normalize_pci_address
from gpufleet.domain.boxes import box_cells
from gpufleet.errors import ParseError

MX_SMI = "mx-smi"
MX_SMI_TOPO = "mx-smi topo"

#: Layout name -> (header line 1 cells, header line 2 cells), blank runs folded.
LAYOUTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "2.1": (("GPU NAME", "Bus-id", "GPU-Util"), ("Temp Power", "Memory-Usage", "")),
    "2.2": (
        ("Board Name", "GPU Persist-M", "Bus-id", "GPU-Util sGPU-M"),
        ("Pwr:Usage/Cap", "Temp Perf", "Memory-Usage", "GPU-State"),
    ),
}
_BY_CELLS = {cells: name for name, cells in LAYOUTS.items()}

_A = re.ASCII
_VERSION = re.compile(r"^mx-smi\s+version: ([0-9][\w.]*)$", _A)
_LOG = re.compile(r"^=+ MetaX System Management Interface Log =+$")
_STAMP = re.compile(r"^Timestamp\s+: (\S.*)$")
_ATTACHED = re.compile(r"^Attached GPUs\s+: (\d{1,4})$", _A)
_BORDER = re.compile(r"^\+[-+=]+\+$")
_BANNER1 = re.compile(
    r"^\|\s*MX-SMI ([0-9][\w.]*)\s+Kernel Mode Driver Version: ([0-9][\w.]*)\s*\|$", _A
)
_BANNER2 = re.compile(r"^\|\s*MACA Version: ([0-9][\w.]*)\s+BIOS Version: ([0-9][\w.]*)\s*\|$", _A)
_SEPARATOR = re.compile(r"^\|[-=][-=+]*[|+]$")
_INDEX_NAME = re.compile(r"^(\d{1,3}) (\S.*)$", _A)
_INDEX_WORD = re.compile(r"^(\d{1,3}) (\w+)$", _A)
_BUS = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$", _A)
_UTIL = re.compile(r"^(\d{1,3})%$", _A)
_UTIL_MODE = re.compile(r"^(\d{1,3})% (\w+)$", _A)
_TEMP_POWER = re.compile(r"^(\d{1,3})C (\d{1,5})W$", _A)
_POWER_CAP = re.compile(r"^(\d{1,5})W / (\d{1,5})W$", _A)
_TEMP_PERF = re.compile(r"^(\d{1,3})C (\w+)$", _A)
_MEMORY = re.compile(r"^(\d{1,9})/(\d{1,9}) MiB$", _A)
_STATE = re.compile(r"^[A-Za-z][\w-]*$", _A)


@dataclass(frozen=True, slots=True)
class MxGpu:
    """One GPU of the table (None: the layout has no such cell)."""

    index: int
    name: str
    bus_id: str
    utilisation_pct: int
    temperature_c: int
    power_w: int
    memory_used_mib: int
    memory_total_mib: int
    power_cap_w: int | None = None  # 2.2
    board: int | None = None  # 2.2: the board index
    persistence: str | None = None  # 2.2
    perf: str | None = None  # 2.2
    sgpu_mode: str | None = None  # 2.2
    state: str | None = None  # 2.2: GPU-State ("Available")


@dataclass(frozen=True, slots=True)
class MxSmi:
    """The summary: tool, driver (KMD), MACA and BIOS versions, layout and GPUs."""

    version: str
    layout: str
    driver: str
    maca: str
    bios: str
    gpus: tuple[MxGpu, ...]


def _cells(line: str) -> list[str] | None:
    return box_cells(line)


def _preamble(
    lines: list[tuple[int, str]], source: str
) -> tuple[int, str | None, int]:
    """The common opening: (position after it, the version line's version, Attached GPUs)."""
    pos, version = 0, None
    if lines and (m := _VERSION.match(lines[0][1].strip())):
        pos, version = 1, m.group(1)
    for what, pattern in (("Log banner", _LOG), ("Timestamp", _STAMP)):
        if pos >= len(lines):
            raise ParseError(source, f"output ends before the {what}: cut short")
        n, line = lines[pos]
        if not pattern.match(line.strip()):
            raise ParseError(
                source, f"no MetaX {what} line: {line.strip()[:60]!r}", line=n, column=1
            )
        pos += 1
    if pos >= len(lines):
        raise ParseError(source, "output ends before 'Attached GPUs': cut short")
    n, line = lines[pos]
    attached = _ATTACHED.match(line.strip())
    if attached is None:
        raise ParseError(source, f"no 'Attached GPUs' line: {line.strip()[:60]!r}", line=n)
    return pos + 1, version, int(attached.group(1))


def _numbered(text: str) -> list[tuple[int, str]]:
    return [(n, ln.rstrip()) for n, ln in enumerate(text.splitlines(), start=1) if ln.strip()]


def parse_mx_smi(text: str, source: str = MX_SMI) -> MxSmi:
    """Parse ``mx-smi``'s summary (module docstring)."""
    lines = _numbered(text)
    pos, _, attached = _preamble(lines, source)

    def need(what: str) -> tuple[int, str]:
        if pos >= len(lines):
            raise ParseError(source, f"output ends before {what}: cut short")
        return lines[pos]

    n, line = need("the box")
    if not _BORDER.match(line):
        raise ParseError(source, f"no box border: {line[:60]!r}", line=n, column=1)
    pos += 1
    n, line = need("the MX-SMI banner")
    b1 = _BANNER1.match(line)
    if b1 is None:
        raise ParseError(source, f"no 'MX-SMI .. Kernel Mode Driver' line: {line[:80]!r}", line=n)
    pos += 1
    n, line = need("the MACA banner")
    b2 = _BANNER2.match(line)
    if b2 is None:
        raise ParseError(source, f"no 'MACA Version .. BIOS Version' line: {line[:80]!r}", line=n)
    pos += 1
    n, line = need("the table header")
    if not _SEPARATOR.match(line):
        raise ParseError(source, f"no separator above the header: {line[:60]!r}", line=n)
    pos += 1
    header_line = n + 1
    heads: list[tuple[str, ...]] = []
    for _ in range(2):
        n, line = need("the table header")
        heads.append(tuple(_cells(line) or [line]))
        pos += 1
    layout = _BY_CELLS.get((heads[0], heads[1]))
    if layout is None:
        raise ParseError(
            source,
            f"unknown table header (columns {' | '.join(heads[0])} / {' | '.join(heads[1])}); "
            "known layouts: "
            + "; ".join(
                f"{k}: {' | '.join(a)} / {' | '.join(b)}" for k, (a, b) in LAYOUTS.items()
            ),
            line=header_line,
            column=1,
        )
    width = len(heads[0])
    n, line = need("the header separator")
    if not (_SEPARATOR.match(line) and "=" in line):
        raise ParseError(source, f"no '|===' line under the header: {line[:60]!r}", line=n)
    pos += 1
    gpus: list[MxGpu] = []
    while True:
        n, line = need("the end of the table")
        if _BORDER.match(line):
            pos += 1
            n, line = need("the Process box")
            if line.startswith("|"):
                continue
            if not (_BORDER.match(line) and pos + 1 < len(lines)
                    and lines[pos + 1][1].startswith("| Process:")):
                raise ParseError(source, f"no Process box after the table: {line[:60]!r}", line=n)
            break
        rows = []
        for k in range(2):
            n, line = need(f"line {k + 1} of a GPU")
            cells = _cells(line)
            if cells is None or len(cells) != width:
                raise ParseError(source, f"not a {width}-cell GPU line: {line[:80]!r}", line=n)
            rows.append((n, cells))
            pos += 1
        gpu = _gpu_21(rows, source) if layout == "2.1" else _gpu_22(rows, source)
        if gpu.index in {g.index for g in gpus}:
            raise ParseError(source, f"GPU {gpu.index} listed twice", line=rows[0][0])
        gpus.append(gpu)
    if len(gpus) != attached:
        raise ParseError(
            source, f"the table lists {len(gpus)} GPUs, 'Attached GPUs' says {attached}",
            line=header_line,
        )
    if not gpus:
        raise ParseError(source, "the table lists no GPU", line=header_line)
    return MxSmi(
        version=b1.group(1), layout=layout, driver=b1.group(2), maca=b2.group(1),
        bios=b2.group(2), gpus=tuple(gpus),
    )


def _fail(source: str, n: int, column: str, value: str) -> ParseError:
    return ParseError(source, f"{column}: cannot read {value[:60]!r}", line=n)


def _bus(source: str, n: int, value: str) -> str:
    if not _BUS.match(value):
        raise _fail(source, n, "Bus-id", value)
    return normalize_pci_address(value)


def _gpu_21(rows: list[tuple[int, list[str]]], source: str) -> MxGpu:
    (n1, (c1, c2, c3)), (n2, (c4, c5, c6)) = rows
    name, util, tp, mem = _INDEX_NAME.match(c1), _UTIL.match(c3), _TEMP_POWER.match(c4), None
    if name is None:
        raise _fail(source, n1, "GPU NAME", c1)
    if util is None:
        raise _fail(source, n1, "GPU-Util", c3)
    if tp is None:
        raise _fail(source, n2, "Temp Power", c4)
    if (mem := _MEMORY.match(c5)) is None:
        raise _fail(source, n2, "Memory-Usage", c5)
    if c6:
        raise _fail(source, n2, "(blank)", c6)
    return MxGpu(
        index=int(name.group(1)), name=name.group(2), bus_id=_bus(source, n1, c2),
        utilisation_pct=int(util.group(1)), temperature_c=int(tp.group(1)),
        power_w=int(tp.group(2)), memory_used_mib=int(mem.group(1)),
        memory_total_mib=int(mem.group(2)),
    )


def _gpu_22(rows: list[tuple[int, list[str]]], source: str) -> MxGpu:
    (n1, (c1, c2, c3, c4)), (n2, (c5, c6, c7, c8)) = rows
    board, gpu, util = _INDEX_NAME.match(c1), _INDEX_WORD.match(c2), _UTIL_MODE.match(c4)
    if board is None:
        raise _fail(source, n1, "Board Name", c1)
    if gpu is None:
        raise _fail(source, n1, "GPU Persist-M", c2)
    if util is None:
        raise _fail(source, n1, "GPU-Util sGPU-M", c4)
    power, tp, mem = _POWER_CAP.match(c5), _TEMP_PERF.match(c6), _MEMORY.match(c7)
    if power is None:
        raise _fail(source, n2, "Pwr:Usage/Cap", c5)
    if tp is None:
        raise _fail(source, n2, "Temp Perf", c6)
    if mem is None:
        raise _fail(source, n2, "Memory-Usage", c7)
    if not _STATE.match(c8):
        raise _fail(source, n2, "GPU-State", c8)
    return MxGpu(
        index=int(gpu.group(1)), name=board.group(2), bus_id=_bus(source, n1, c3),
        utilisation_pct=int(util.group(1)), temperature_c=int(tp.group(1)),
        power_w=int(power.group(1)), memory_used_mib=int(mem.group(1)),
        memory_total_mib=int(mem.group(2)), power_cap_w=int(power.group(2)),
        board=int(board.group(1)), persistence=gpu.group(2), perf=tp.group(2),
        sgpu_mode=util.group(2), state=c8,
    )


# --------------------------------------------------------------------------- topo -m / -n

_TOPO_TITLE = "Device link type matrix"
_DEVICE = re.compile(r"^(GPU|NIC)(\d{1,3})$", _A)
_AFFINITY = ("Node", "Affinity", "CPU", "Affinity")
_LEGEND = re.compile(r"^\s+([A-Z]+)\s+= (\S.*)$", _A)
_NIC_NAME = re.compile(r"^\s+(NIC\d{1,3}): (\S+)$", _A)
_NODE = re.compile(r"^\d{1,3}$", _A)
_CPUS = re.compile(r"^\d{1,4}(?:-\d{1,4})?(?:,\d{1,4}(?:-\d{1,4})?)*$", _A)


@dataclass(frozen=True, slots=True)
class MxTopo:
    """The link matrix: device names in order (``GPU0``.., ``NIC0``..), the link code of each
    ordered pair of different devices, each GPU's NUMA node and CPU list, the legend and the
    NICs' names (``topo -n``)."""

    devices: tuple[str, ...]
    links: dict[tuple[str, str], str]
    node_affinity: dict[str, str]
    cpu_affinity: dict[str, str]
    legend: dict[str, str]
    nic_names: dict[str, str]

    def gpu_index(self, device: str) -> int | None:
        m = _DEVICE.match(device)
        return int(m.group(2)) if m is not None and m.group(1) == "GPU" else None


def parse_mx_smi_topo(text: str, source: str = MX_SMI_TOPO) -> MxTopo:
    """Parse ``mx-smi topo -m`` or ``-n`` (module docstring)."""
    lines = _numbered(text)
    pos, _, attached = _preamble(lines, source)
    if pos >= len(lines) or lines[pos][1].strip() != _TOPO_TITLE:
        n = lines[pos][0] if pos < len(lines) else None
        raise ParseError(source, f"no '{_TOPO_TITLE}' line: cut short or not topo", line=n)
    pos += 1
    if pos >= len(lines):
        raise ParseError(source, "output ends before the matrix header: cut short")
    hn, header = lines[pos]
    words = header.split()
    devices = tuple(words[:-4])
    if (tuple(words[-4:]) != _AFFINITY or not devices
            or not all(_DEVICE.match(d) for d in devices) or len(set(devices)) != len(devices)):
        raise ParseError(
            source,
            f"unknown matrix header (columns {' '.join(words)[:160]!r}); known: GPU<i>.. "
            "[NIC<j>..] Node Affinity CPU Affinity",
            line=hn,
            column=1,
        )
    gpus = [d for d in devices if d.startswith("GPU")]
    if len(gpus) != attached:
        raise ParseError(source, f"{len(gpus)} GPU columns, 'Attached GPUs' says {attached}",
                         line=hn)
    pos += 1
    codes: dict[tuple[str, str], str] = {}
    node: dict[str, str] = {}
    cpus: dict[str, str] = {}
    for want in devices:
        if pos >= len(lines):
            raise ParseError(source, f"output ends before the {want} row: cut short")
        n, line = lines[pos]
        cells = line.split()
        extra = 2 if want.startswith("GPU") else 0
        if not cells or cells[0] != want or len(cells) != 1 + len(devices) + extra:
            raise ParseError(
                source, f"not the {want} row of {len(devices)} codes: {line[:80]!r}", line=n
            )
        for peer, code in zip(devices, cells[1 : 1 + len(devices)], strict=True):
            if (peer == want) != (code == "X"):
                raise ParseError(source, f"{want}/{peer}: {code!r} on the diagonal", line=n)
            if peer != want:
                codes[(want, peer)] = code
        if extra:
            if not (_NODE.match(cells[-2]) and _CPUS.match(cells[-1])):
                raise ParseError(source, f"{want}: affinity {cells[-2:]!r} unreadable", line=n)
            node[want], cpus[want] = cells[-2], cells[-1]
        pos += 1
    legend: dict[str, str] = {}
    nics: dict[str, str] = {}
    if pos >= len(lines) or lines[pos][1].strip() != "Legend:":
        raise ParseError(source, "no 'Legend:' after the matrix: cut short",
                         line=lines[pos][0] if pos < len(lines) else None)
    for n, line in lines[pos + 1 :]:
        if line.strip() == "NIC Legend:":
            continue
        m, k = _LEGEND.match(line), _NIC_NAME.match(line)
        if m is not None:
            legend[m.group(1)] = m.group(2)
        elif k is not None:
            nics[k.group(1)] = k.group(2)
        else:
            raise ParseError(source, f"not a legend line: {line[:80]!r}", line=n)
    for (a, b), code in codes.items():
        if code not in legend:
            raise ParseError(source, f"{a}/{b}: link code {code!r} not in the legend")
    for (a, b), code in codes.items():
        if codes[(b, a)] != code:
            raise ParseError(source, f"{a}/{b}: {code} one way, {codes[(b, a)]} the other")
    missing = [d for d in devices if d.startswith("NIC") and d not in nics]
    if nics and missing:
        raise ParseError(source, f"NIC Legend names no {', '.join(missing)}")
    return MxTopo(devices, codes, node, cpus, legend, nics)
