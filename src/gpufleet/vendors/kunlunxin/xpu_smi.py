"""Parser for Kunlunxin's ``xpu_smi`` / ``xpu-smi`` (pure; captures in
tests/fixtures/captured/kunlunxin, format facts in ../shared/fixtures/kunlunxin/NOTES.md).

Two unrelated formats, told apart by their first line:

* ``xpu_smi-4`` (runtime 4.x: K200, R300): ``Runtime Version:`` / ``Driver Version:`` lines,
  then sections titled ``DEVICES``, ``VIDEO`` (R300 only) and ``PROCESSES``, each a
  ``| a | b |`` table between dashed rules. The width changes with the content: cells are
  split on ``|``, never read at fixed offsets. A dual-device card (K200) lists two DevIDs with
  the same PCI address and serial: devices are keyed by DevID, never by address.
* ``xpu-smi-5`` (driver 5.x: P800): an nvidia-smi-like box: an optional timestamp, a banner
  ``XPU-SMI  Driver Version: ..  XPU-RT Version: ..``, a three-line header and three lines per
  device (the third holds ``L3-Usage`` and ``SR-IOV M.``), then a ``Processes:`` box.

Each table is known by its exact header cells (:data:`TABLES`, :data:`BOX_HEADER`): any other
header is a :class:`ParseError` naming the tool, the line and the columns. Every cell must
match its form (``0 %``, ``14 / 16 MB``, ``/dev/xpu0``, ``37C``, ``88W / 400W``,
``0MiB / 98304MiB``); an answer without its ``PROCESSES`` section (4.x) or ``Processes:`` box
(5.x) was cut short and is refused. Process rows appear in no capture: in 4.x they are counted
(six cells each), in 5.x the box is only required to be there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpufleet.domain.accelerators import normalize_pci_address
from gpufleet.domain.boxes import box_cells
from gpufleet.errors import ParseError

XPU_SMI = "xpu_smi"

#: xpu_smi 4.x section -> the exact cells of its table header.
TABLES: dict[str, tuple[str, ...]] = {
    "DEVICES": ("DevID", "PCI Addr", "Model", "SN", "INODE", "UseRate", "L3", "Memory"),
    "VIDEO": ("DevID", "Model", "DEC", "ENC", "IMGPROC"),
    "PROCESSES": ("DevID", "PID", "Streams", "L3", "Memory", "Command"),
}
#: xpu-smi 5.x: the three header lines' cells (blank-runs folded to one blank).
BOX_HEADER: tuple[tuple[str, str, str], ...] = (
    ("XPU Name Persistence-M", "Bus-Id Disp.A", "Volatile Uncorr. ECC"),
    ("Fan Temp Perf Pwr:Usage/Cap", "Memory-Usage", "XPU-Util Compute M."),
    ("", "L3-Usage", "SR-IOV M."),
)

_A = re.ASCII
_VERSION = re.compile(r"^(Runtime|Driver) Version: ([0-9][\w.]*)$", _A)
_TITLE = re.compile(r"^  ([A-Z]+)$", _A)
_RULE = re.compile(r"^-+$")
_PCI = r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]"
_DEVID = re.compile(r"^\d{1,3}$", _A)
_ADDR = re.compile(rf"^{_PCI}$", _A)
_WORD = re.compile(r"^[\w][\w.+-]*$", _A)
_INODE = re.compile(r"^/dev/xpu(\d{1,3})$", _A)
_RATE = re.compile(r"^(\d{1,3}) %$", _A)
_MB = re.compile(r"^(\d{1,9}) / (\d{1,9}) MB$", _A)
_VIDEO = re.compile(r"^(\d{1,3}) %, (\d{1,6}) fps, (\d{1,6}) MHz$", _A)
_STAMP = re.compile(r"^[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}$", _A)
_BORDER = re.compile(r"^\+[-+=]+\+$")
_BANNER = re.compile(
    r"^\|\s*XPU-SMI\s+Driver Version: ([0-9][\w.]*)\s+XPU-RT Version: ([0-9][\w.]*)\s*\|$", _A
)
_SEPARATOR = re.compile(r"^\|[-=][-=+]*[|+]$")
_NAME = re.compile(r"^(\d{1,3})\s+(\S.*?)\s+(\S+)$", _A)
_BUS = re.compile(rf"^({_PCI})\s+(\S+)$", _A)
_ECC = re.compile(r"^(\d{1,12}|N/A)$", _A)
_POWER = re.compile(r"^(\S+)\s+(\d{1,3})C\s+(\S+)\s+(\d{1,5})W / (\d{1,5})W$", _A)
_MIB = re.compile(r"^(\d{1,9})MiB /\s*(\d{1,9})MiB$", _A)
_UTIL = re.compile(r"^(\d{1,3})%\s+(\S+)$", _A)


@dataclass(frozen=True, slots=True)
class XpuVideo:
    """One device's video engines (``VIDEO`` section): utilisation % of each."""

    decoder_pct: int
    encoder_pct: int
    imgproc_pct: int


@dataclass(frozen=True, slots=True)
class XpuDevice:
    """One device (None: the format has no such field, or ``N/A``)."""

    index: int
    model: str
    bus_id: str
    utilisation_pct: int
    memory_used_mib: int
    memory_total_mib: int
    l3_used_mib: int
    l3_total_mib: int
    serial: str | None = None  # 4.x
    inode: str | None = None  # 4.x: /dev/xpuN
    video: XpuVideo | None = None  # 4.x, VIDEO section
    temperature_c: int | None = None  # 5.x
    power_w: int | None = None
    power_cap_w: int | None = None
    ecc_uncorrectable: int | None = None
    persistence: str | None = None
    fan: str | None = None
    perf: str | None = None
    compute_mode: str | None = None
    sriov_mode: str | None = None


@dataclass(frozen=True, slots=True)
class XpuSmi:
    """The answer: its format (``xpu_smi-4`` / ``xpu-smi-5``), versions and devices."""

    format: str
    driver: str
    runtime: str
    devices: tuple[XpuDevice, ...]
    processes: int | None = None  # 4.x: the process rows counted


def parse_xpu_smi(text: str, source: str = XPU_SMI) -> XpuSmi:
    """Parse either format (module docstring)."""
    lines = [(n, ln.rstrip()) for n, ln in enumerate(text.splitlines(), start=1) if ln.strip()]
    if not lines:
        raise ParseError(source, "empty output")
    n, first = lines[0]
    if first.startswith("Runtime Version:"):
        return _parse_v4(lines, source)
    if _STAMP.match(first) or _BORDER.match(first):
        return _parse_v5(lines, source)
    raise ParseError(source, f"neither xpu_smi format: {first[:60]!r}", line=n, column=1)


# --------------------------------------------------------------------------- 4.x


def _cells(line: str) -> list[str] | None:
    return box_cells(line, collapse=False)


def _parse_v4(lines: list[tuple[int, str]], source: str) -> XpuSmi:
    versions: dict[str, str] = {}
    for n, line in lines[:2]:
        m = _VERSION.match(line)
        if m is None or m.group(1) in versions:
            raise ParseError(source, f"not a version line: {line[:60]!r}", line=n, column=1)
        versions[m.group(1)] = m.group(2)
    if set(versions) != {"Runtime", "Driver"}:
        raise ParseError(source, "no Runtime and Driver Version lines", line=lines[0][0])
    tables: dict[str, list[tuple[int, list[str]]]] = {}
    pos = 2
    while pos < len(lines):
        n, line = lines[pos]
        title = _TITLE.match(line)
        if title is None or title.group(1) not in TABLES:
            raise ParseError(source, f"not a section title: {line[:60]!r}", line=n, column=1)
        name = title.group(1)
        if name in tables or "PROCESSES" in tables:
            raise ParseError(source, f"section {name} out of order", line=n, column=1)
        tables[name], pos = _table(lines, pos + 1, name, source)
    if "DEVICES" not in tables or "PROCESSES" not in tables:
        what = "DEVICES" if "DEVICES" not in tables else "PROCESSES"
        raise ParseError(source, f"no {what} section: the output was cut short")
    devices = [_device_v4(n, cells, source) for n, cells in tables["DEVICES"]]
    if not devices:
        raise ParseError(source, "the DEVICES table lists no device")
    _unique(devices, [n for n, _ in tables["DEVICES"]], source)
    video = {}
    for n, cells in tables.get("VIDEO", []):
        idx, v = _video(n, cells, source)
        if idx in video or idx not in {d.index for d in devices}:
            raise ParseError(source, f"VIDEO: DevID {idx} is not one DEVICES lists once", line=n)
        video[idx] = v
    if video:
        devices = [_with_video(d, video.get(d.index)) for d in devices]
    return XpuSmi(
        format="xpu_smi-4",
        driver=versions["Driver"],
        runtime=versions["Runtime"],
        devices=tuple(devices),
        processes=len(tables["PROCESSES"]),
    )


def _table(
    lines: list[tuple[int, str]], pos: int, name: str, source: str
) -> tuple[list[tuple[int, list[str]]], int]:
    """One section's table from ``pos``: rule, header, rule, rows, rule."""

    def at(i: int, what: str) -> tuple[int, str]:
        if i >= len(lines):
            raise ParseError(source, f"{name}: output ends before {what}: cut short")
        return lines[i]

    for i, what in ((pos, "the rule above the header"), (pos + 2, "the rule under it")):
        n, line = at(i, what)
        if not _RULE.match(line):
            raise ParseError(source, f"{name}: no dashed rule: {line[:60]!r}", line=n, column=1)
    n, line = at(pos + 1, "the table header")
    header = _cells(line)
    if header is None or tuple(header) != TABLES[name]:
        raise ParseError(
            source,
            f"unknown {name} table header (columns {' | '.join(header or [line[:80]])}); "
            f"known: {' | '.join(TABLES[name])}",
            line=n,
            column=1,
        )
    rows: list[tuple[int, list[str]]] = []
    i = pos + 3
    while True:
        n, line = at(i, "the rule closing the table")
        i += 1
        if _RULE.match(line):
            return rows, i
        cells = _cells(line)
        if cells is None or len(cells) != len(header):
            raise ParseError(
                source, f"{name}: not a {len(header)}-cell row: {line[:80]!r}", line=n, column=1
            )
        rows.append((n, cells))


def _fail(source: str, n: int, column: str, value: str) -> ParseError:
    return ParseError(source, f"{column}: cannot read {value[:60]!r}", line=n)


def _device_v4(n: int, c: list[str], source: str) -> XpuDevice:
    devid, addr, model, sn, inode, rate, l3, mem = c
    if not _DEVID.match(devid):
        raise _fail(source, n, "DevID", devid)
    if not _ADDR.match(addr):
        raise _fail(source, n, "PCI Addr", addr)
    for col, v in (("Model", model), ("SN", sn)):
        if not _WORD.match(v):
            raise _fail(source, n, col, v)
    if not _INODE.match(inode):
        raise _fail(source, n, "INODE", inode)
    r = _RATE.match(rate)
    if r is None:
        raise _fail(source, n, "UseRate", rate)
    l3m, memm = _MB.match(l3), _MB.match(mem)
    if l3m is None:
        raise _fail(source, n, "L3", l3)
    if memm is None:
        raise _fail(source, n, "Memory", mem)
    return XpuDevice(
        index=int(devid),
        model=model,
        bus_id=normalize_pci_address(addr),
        utilisation_pct=int(r.group(1)),
        memory_used_mib=int(memm.group(1)),
        memory_total_mib=int(memm.group(2)),
        l3_used_mib=int(l3m.group(1)),
        l3_total_mib=int(l3m.group(2)),
        serial=sn,
        inode=inode,
    )


def _video(n: int, c: list[str], source: str) -> tuple[int, XpuVideo]:
    devid, model, *engines = c
    if not _DEVID.match(devid):
        raise _fail(source, n, "DevID", devid)
    if not _WORD.match(model):
        raise _fail(source, n, "Model", model)
    pct = []
    for col, v in zip(TABLES["VIDEO"][2:], engines, strict=True):
        m = _VIDEO.match(v)
        if m is None:
            raise _fail(source, n, col, v)
        pct.append(int(m.group(1)))
    return int(devid), XpuVideo(*pct)


def _with_video(d: XpuDevice, v: XpuVideo | None) -> XpuDevice:
    from dataclasses import replace

    return replace(d, video=v)


def _unique(devices: list[XpuDevice], lines: list[int], source: str) -> None:
    seen: set[int] = set()
    for d, n in zip(devices, lines, strict=True):
        if d.index in seen:
            raise ParseError(source, f"DevID {d.index} listed twice", line=n)
        seen.add(d.index)


# --------------------------------------------------------------------------- 5.x


def _norm(cell: str) -> str:
    return " ".join(cell.split())


def _parse_v5(lines: list[tuple[int, str]], source: str) -> XpuSmi:
    pos = 1 if _STAMP.match(lines[0][1]) else 0

    def need(what: str) -> tuple[int, str]:
        if pos >= len(lines):
            raise ParseError(source, f"output ends before {what}: cut short")
        return lines[pos]

    n, line = need("the banner")
    if not _BORDER.match(line):
        raise ParseError(source, f"not xpu-smi's banner box: {line[:60]!r}", line=n, column=1)
    pos += 1
    n, line = need("the banner")
    banner = _BANNER.match(line)
    if banner is None:
        raise ParseError(source, f"no 'XPU-SMI Driver Version' banner: {line[:80]!r}", line=n)
    pos += 1
    n, line = need("the table header")
    if not _SEPARATOR.match(line):
        raise ParseError(source, f"no separator under the banner: {line[:60]!r}", line=n)
    pos += 1
    heads: list[tuple[str, ...]] = []
    header_line = lines[pos][0] if pos < len(lines) else 0
    for _ in BOX_HEADER:
        n, line = need("the table header")
        cells = _cells(line)
        heads.append(tuple(_norm(c) for c in cells or [line]))
        pos += 1
    if tuple(heads) != BOX_HEADER:
        raise ParseError(
            source,
            "unknown table header (columns "
            + " / ".join(" | ".join(h) for h in heads)
            + "); known: "
            + " / ".join(" | ".join(h) for h in BOX_HEADER),
            line=header_line,
            column=1,
        )
    n, line = need("the header separator")
    if not (_SEPARATOR.match(line) and "=" in line):
        raise ParseError(source, f"no '|===' line under the header: {line[:60]!r}", line=n)
    pos += 1
    devices: list[XpuDevice] = []
    while True:
        n, line = need("the end of the table")
        if _BORDER.match(line):
            pos += 1
            n, line = need("the Processes box")
            if line.startswith("|"):
                continue
            if not (
                _BORDER.match(line) and pos + 1 < len(lines) and "Processes:" in lines[pos + 1][1]
            ):
                raise ParseError(source, f"no Processes box after the table: {line[:60]!r}", line=n)
            break
        rows = []
        for k in range(3):
            n, line = need(f"line {k + 1} of a device")
            cells = _cells(line)
            if cells is None or len(cells) != 3:
                raise ParseError(source, f"not a device line: {line[:80]!r}", line=n, column=1)
            rows.append((n, [_norm(c) for c in cells]))
            pos += 1
        d = _device_v5(rows, source)
        if d.index in {x.index for x in devices}:
            raise ParseError(source, f"XPU {d.index} listed twice", line=rows[0][0])
        devices.append(d)
    if not devices:
        raise ParseError(source, "the table lists no device", line=header_line)
    return XpuSmi(
        format="xpu-smi-5",
        driver=banner.group(1),
        runtime=banner.group(2),
        devices=tuple(devices),
    )


def _device_v5(rows: list[tuple[int, list[str]]], source: str) -> XpuDevice:
    (n1, (c1, c2, c3)), (n2, (c4, c5, c6)), (n3, (c7, c8, c9)) = rows
    name, bus, ecc = _NAME.match(c1), _BUS.match(c2), _ECC.match(c3)
    if name is None:
        raise _fail(source, n1, "XPU Name Persistence-M", c1)
    if bus is None:
        raise _fail(source, n1, "Bus-Id Disp.A", c2)
    if ecc is None:
        raise _fail(source, n1, "Volatile Uncorr. ECC", c3)
    pwr, mem, util = _POWER.match(c4), _MIB.match(c5), _UTIL.match(c6)
    if pwr is None:
        raise _fail(source, n2, "Fan Temp Perf Pwr:Usage/Cap", c4)
    if mem is None:
        raise _fail(source, n2, "Memory-Usage", c5)
    if util is None:
        raise _fail(source, n2, "XPU-Util Compute M.", c6)
    l3 = _MIB.match(c8)
    if c7:
        raise _fail(source, n3, "(blank)", c7)
    if l3 is None:
        raise _fail(source, n3, "L3-Usage", c8)
    if not _WORD.match(c9):
        raise _fail(source, n3, "SR-IOV M.", c9)

    def na(v: str) -> str | None:
        return None if v == "N/A" else v

    return XpuDevice(
        index=int(name.group(1)),
        model=name.group(2),
        bus_id=normalize_pci_address(bus.group(1)),
        utilisation_pct=int(util.group(1)),
        memory_used_mib=int(mem.group(1)),
        memory_total_mib=int(mem.group(2)),
        l3_used_mib=int(l3.group(1)),
        l3_total_mib=int(l3.group(2)),
        temperature_c=int(pwr.group(2)),
        power_w=int(pwr.group(4)),
        power_cap_w=int(pwr.group(5)),
        ecc_uncorrectable=None if ecc.group(1) == "N/A" else int(ecc.group(1)),
        persistence=na(name.group(3)),
        fan=na(pwr.group(1)),
        perf=na(pwr.group(3)),
        compute_mode=util.group(2),
        sriov_mode=c9,
    )
