"""Parsers for Huawei ``npu-smi`` output (pure; real captures in tests/fixtures/captured/ascend).

* ``npu-smi info``: the boxed table. Three layouts are known from captures:
  20.x (``Chip Device`` column, no Hugepages, no HBM), 21.x (Hugepages added, no HBM) and
  22.x-24.x (one row pair per NPU, ``Chip`` only, HBM-Usage column). The column headers
  are read to pick the layout; a process table after the devices is skipped.
* ``npu-smi info -m``: NPU ID / Chip ID / Chip Logic ID / Chip Name (``Mcu`` rows are the
  board controller, not an NPU).
* ``npu-smi info -t board|health|usages|common -i N [-c C]``: "Key : Value" lines, chip
  blocks separated by blank lines; -t health has continuation lines (empty key).
* ``npu-smi info -t topo``: NPU x NPU link matrix plus a CPU Affinity column.

Input is the tool's output only (no shell prompt, no trailing notes); anything else in
the box raises ParseError naming the source and line.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from gpufleet.domain.accelerators import Health, normalize_pci_address
from gpufleet.errors import ParseError

_VERSION = re.compile(r"npu-smi\s+(?P<tool>\S+)\s+Version:\s*(?P<version>\S+)")
_PAIR = re.compile(r"(\d+)\s*/\s*(\d+)")
_HEALTH = {
    "ok": Health.OK,
    "warning": Health.WARNING,
    "alarm": Health.ALARM,
    "critical": Health.ALARM,
}


def parse_health(word: str) -> Health:
    """``OK`` / ``Warning`` / ``Alarm`` / ``Critical`` -> :class:`Health` (else UNKNOWN)."""
    return _HEALTH.get(word.strip().lower(), Health.UNKNOWN)


@dataclass(frozen=True, slots=True)
class NpuChip:
    """One chip row pair of ``npu-smi info``."""

    npu_id: int
    chip_id: int
    device_id: int | None  # logic device id; printed only by the 20.x/21.x layout
    name: str
    health: Health
    bus_id: str
    power_w: float | None
    temperature_c: int | None
    aicore_percent: int | None
    memory_used_mb: int | None
    memory_total_mb: int | None
    hbm_used_mb: int | None
    hbm_total_mb: int | None
    hugepages_used: int | None
    hugepages_total: int | None


@dataclass(frozen=True, slots=True)
class NpuSmiInfo:
    tool_version: str
    version: str
    chips: tuple[NpuChip, ...]


def _num(text: str, source: str, lineno: int, what: str) -> float | None:
    t = text.strip()
    if t in {"NA", "-", "N/A"}:
        return None
    try:
        value = float(t)
    except ValueError:
        raise ParseError(source, f"{what} is not a number: {t!r}", line=lineno) from None
    if not math.isfinite(value):
        raise ParseError(source, f"{what} is not a finite number: {t!r}", line=lineno)
    return value


def _cells(raw: str, source: str, lineno: int, expected: int) -> list[str]:
    line = raw.rstrip()
    if not (line.startswith("|") and line.endswith("|")):
        raise ParseError(source, f"not a table row: {line[:80]!r}", line=lineno)
    cells = [c.strip() for c in line[1:-1].split("|")]
    if len(cells) != expected:
        raise ParseError(
            source, f"expected {expected} cells, found {len(cells)}: {line[:80]!r}", line=lineno
        )
    return cells


def _pairs(text: str) -> list[tuple[int, int]]:
    return [(int(a), int(b)) for a, b in _PAIR.findall(text)]


def parse_npu_smi_info(text: str, source: str = "npu-smi info") -> NpuSmiInfo:
    """Parse the ``npu-smi info`` table into one :class:`NpuChip` per chip row pair."""
    lines = text.splitlines()
    tool = version = None
    header: list[str] = []
    chips: list[NpuChip] = []
    pending: tuple[int, list[str]] | None = None
    in_processes = False
    closed = False  # the last row seen was followed by a separator
    for lineno, raw in enumerate(lines, start=1):
        line = raw.rstrip()
        if not line:
            continue
        if line.startswith("+"):
            if pending is not None:
                raise ParseError(source, "chip row without its second row", line=lineno)
            closed = True
            continue
        if not line.startswith("|"):
            raise ParseError(source, f"not part of the npu-smi table: {line[:80]!r}", line=lineno)
        closed = False
        if tool is None:
            m = _VERSION.search(line)
            if m is None:
                raise ParseError(source, "no 'npu-smi <v> Version: <v>' title row", line=lineno)
            tool, version = m.group("tool"), m.group("version")
            continue
        if in_processes:
            continue
        if "Process id" in line or "Process name" in line:
            in_processes = True
            continue
        if len(header) < 2:
            if not (line.lstrip("| ").startswith("NPU") or line.lstrip("| ").startswith("Chip")):
                raise ParseError(source, f"expected a column header: {line[:80]!r}", line=lineno)
            header.append(line)
            continue
        if pending is None:
            pending = (lineno, _cells(line, source, lineno, 3))
            continue
        first_no, first = pending
        second = _cells(line, source, lineno, 3)
        pending = None
        chips.append(_chip(first_no, first, lineno, second, header, source))
    if tool is None or version is None:
        raise ParseError(source, "empty output: no npu-smi table", line=len(lines) or None)
    if pending is not None or not closed:
        raise ParseError(source, "table truncated (no closing separator)", line=len(lines))
    return NpuSmiInfo(tool_version=tool, version=version, chips=tuple(chips))


def _chip(
    no1: int, c1: list[str], no2: int, c2: list[str], header: list[str], source: str
) -> NpuChip:
    has_device = "Device" in header[1].split("|")[1]
    has_hbm = "HBM-Usage" in header[1]
    id1 = c1[0].split(None, 1)
    if len(id1) != 2 or not id1[0].isdigit():
        raise ParseError(source, f"expected 'NPU-ID Name', found {c1[0]!r}", line=no1)
    id2 = c2[0].split()
    if len(id2) != (2 if has_device else 1) or not all(x.isdigit() for x in id2):
        raise ParseError(source, f"expected chip id(s), found {c2[0]!r}", line=no2)
    metrics1 = c1[2].split()
    if len(metrics1) < 2:
        raise ParseError(source, f"expected 'Power Temp', found {c1[2]!r}", line=no1)
    power = _num(metrics1[0], source, no1, "Power(W)")
    temp = _num(metrics1[1], source, no1, "Temp(C)")
    huge = _pairs(" ".join(metrics1[2:]))
    usage = c2[2].split(None, 1)
    if not usage:
        raise ParseError(source, "empty AICore/Memory cell", line=no2)
    aicore = _num(usage[0], source, no2, "AICore(%)")
    pairs = _pairs(usage[1] if len(usage) > 1 else "")
    if len(pairs) != (2 if has_hbm else 1):
        raise ParseError(source, f"expected memory usage pairs, found {c2[2]!r}", line=no2)
    mem = pairs[0]
    hbm = pairs[1] if has_hbm else None
    try:
        bus = normalize_pci_address(c2[1])
    except ValueError:
        raise ParseError(source, f"not a PCI bus id: {c2[1]!r}", line=no2) from None
    return NpuChip(
        npu_id=int(id1[0]),
        chip_id=int(id2[0]),
        device_id=int(id2[1]) if has_device else None,
        name=id1[1].strip(),
        health=parse_health(c1[1]),
        bus_id=bus,
        power_w=power,
        temperature_c=None if temp is None else int(temp),
        aicore_percent=None if aicore is None else int(aicore),
        memory_used_mb=mem[0],
        memory_total_mb=mem[1],
        hbm_used_mb=hbm[0] if hbm else None,
        hbm_total_mb=hbm[1] if hbm else None,
        hugepages_used=huge[0][0] if huge else None,
        hugepages_total=huge[0][1] if huge else None,
    )


@dataclass(frozen=True, slots=True)
class ChipMapping:
    """One row of ``npu-smi info -m``; ``logic_id`` is None for the board MCU."""

    npu_id: int
    chip_id: int
    logic_id: int | None
    name: str

    @property
    def is_mcu(self) -> bool:
        return self.name.lower() == "mcu"


def parse_npu_smi_mapping(text: str, source: str = "npu-smi info -m") -> list[ChipMapping]:
    """Parse ``npu-smi info -m`` (leading tabs/indent allowed)."""
    rows: list[ChipMapping] = []
    seen_header = False
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if not seen_header:
            if not line.startswith("NPU ID") or "Chip Name" not in line:
                raise ParseError(
                    source,
                    f"expected the 'NPU ID ... Chip Name' header: {line[:80]!r}",
                    line=lineno,
                )
            seen_header = True
            continue
        parts = line.split(None, 3)
        if (
            len(parts) != 4
            or not parts[0].isdigit()
            or not parts[1].isdigit()
            or not (parts[2].isdigit() or parts[2] == "-")
        ):
            raise ParseError(
                source, f"not an 'NPU Chip Logic Name' row: {line[:80]!r}", line=lineno
            )
        rows.append(
            ChipMapping(
                npu_id=int(parts[0]),
                chip_id=int(parts[1]),
                logic_id=None if parts[2] == "-" else int(parts[2]),
                name=parts[3].strip(),
            )
        )
    if not seen_header:
        raise ParseError(source, "empty output: no 'NPU ID' header")
    return rows


def parse_key_values(text: str, source: str) -> list[dict[str, str]]:
    """Parse ``Key : Value`` output (-t board/health/usages/common, hccn_tool -optical ...).

    Returns one dict per blank-line-separated block. A line with an empty key continues the
    previous value (``-t health`` Error Information); a repeated key starts a new block.
    """
    blocks: list[dict[str, str]] = []
    current: dict[str, str] = {}
    last: str | None = None
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            if current:
                blocks.append(current)
                current = {}
            continue
        key, sep, value = line.partition(":")
        if not sep:
            raise ParseError(source, f"not a 'Key : Value' line: {line[:80]!r}", line=lineno)
        key, value = key.strip(), value.strip()
        if not key:
            # a continuation line (``-t health`` Error Information), maybe after a blank
            if not current and blocks:
                current = blocks.pop()
            if last is None or last not in current:
                raise ParseError(source, "continuation line without a key before it", line=lineno)
            current[last] = f"{current[last]}\n{value}" if current[last] else value
            continue
        if key in current:
            blocks.append(current)
            current = {}
        current[key] = value
        last = key
    if current:
        blocks.append(current)
    if not blocks:
        raise ParseError(source, "empty output")
    return blocks


@dataclass(frozen=True, slots=True)
class ChipHealth:
    health: Health
    error_codes: tuple[str, ...]
    information: str


def parse_health_status(text: str, source: str = "npu-smi info -t health") -> ChipHealth:
    """Parse ``npu-smi info -t health -i N -c C``: status, error codes and information."""
    merged: dict[str, str] = {}
    for block in parse_key_values(text, source):
        merged.update(block)
    status = merged.get("Health Status")
    if status is None:
        raise ParseError(source, "no 'Health Status' line")
    health = parse_health(status)
    if health is Health.UNKNOWN:
        raise ParseError(source, f"unknown health status {status!r}")
    codes_text = merged.get("Error Code", "NA")
    codes = () if codes_text in {"NA", ""} else tuple(codes_text.split())
    info = merged.get("Error Information", "NA")
    return ChipHealth(health=health, error_codes=codes, information="" if info == "NA" else info)


@dataclass(frozen=True, slots=True)
class TopoMatrix:
    npus: tuple[str, ...]
    links: dict[tuple[str, str], str]  # (NPU0, NPU1) -> "HCCS"
    cpu_affinity: dict[str, str]


def parse_npu_smi_topo(text: str, source: str = "npu-smi info -t topo") -> TopoMatrix:
    """Parse ``npu-smi info -t topo``; the Legend after a blank line is ignored."""
    header: list[str] | None = None
    links: dict[tuple[str, str], str] = {}
    affinity: dict[str, str] = {}
    rows: list[str] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if header is None:
            if not line:
                continue
            if not line.startswith("NPU0"):
                raise ParseError(
                    source, f"expected the NPU column header: {line[:80]!r}", line=lineno
                )
            cols = line.replace("CPU Affinity", "CPU_Affinity").split()
            header = cols
            continue
        if not line or line.startswith("Legend"):
            break
        cells = line.split()
        npus = [c for c in header if c != "CPU_Affinity"]
        has_aff = "CPU_Affinity" in header
        if len(cells) != len(npus) + 1 + (1 if has_aff else 0) or cells[0] not in npus:
            raise ParseError(
                source, f"matrix row does not match the header: {line[:80]!r}", line=lineno
            )
        rows.append(cells[0])
        for peer, kind in zip(npus, cells[1 : 1 + len(npus)], strict=True):
            if peer != cells[0]:
                links[(cells[0], peer)] = kind
        if has_aff:
            affinity[cells[0]] = cells[-1]
    if header is None:
        raise ParseError(source, "empty output: no topology matrix")
    names = tuple(c for c in header if c != "CPU_Affinity")
    if tuple(rows) != names:
        raise ParseError(source, f"matrix has rows {rows}, header names {list(names)}")
    return TopoMatrix(npus=names, links=links, cpu_affinity=affinity)


@dataclass(frozen=True, slots=True)
class Board:
    """``npu-smi info -t board -i N``: the card's software/firmware and PCI identity."""

    npu_id: int
    software_version: str | None
    firmware_version: str | None
    pci_vendor_id: str | None  # lower-case hex without 0x ("19e5")
    pci_device_id: str | None  # "d801"
    bus_id: str | None


def parse_board(text: str, source: str = "npu-smi info -t board") -> Board:
    """Parse the card-level ``-t board`` output (``Invalid card id.`` is a ParseError)."""
    kv: dict[str, str] = {}
    for block in parse_key_values(text, source):
        kv.update(block)
    if "NPU ID" not in kv or not kv["NPU ID"].isdigit():
        raise ParseError(source, "no 'NPU ID' line")

    def hexid(key: str) -> str | None:
        v = kv.get(key)
        if v is None or v == "NA":
            return None
        if not re.fullmatch(r"0x[0-9A-Fa-f]{1,4}", v):
            raise ParseError(source, f"{key} is not hex: {v!r}")
        return v[2:].lower().rjust(4, "0")

    bus = kv.get("PCIe Bus Info")
    if bus is not None and bus != "NA":
        try:
            bus = normalize_pci_address(bus)
        except ValueError:
            raise ParseError(source, f"not a PCI bus id: {bus!r}") from None
    return Board(
        npu_id=int(kv["NPU ID"]),
        software_version=kv.get("Software Version"),
        firmware_version=kv.get("Firmware Version"),
        pci_vendor_id=hexid("PCI Vendor ID"),
        pci_device_id=hexid("PCI Device ID"),
        bus_id=None if bus in (None, "NA") else bus,
    )


@dataclass(frozen=True, slots=True)
class ChipUsage:
    """One chip block of ``-t common`` / ``-t usages`` (fields the other view lacks: None)."""

    npu_id: int
    chip_id: int
    temperature_c: int | None
    power_w: float | None
    hbm_capacity_mb: int | None
    hbm_usage_percent: int | None
    aicore_count: int | None


def parse_chip_usages(text: str, source: str) -> list[ChipUsage]:
    """``npu-smi info -t common -i N`` or ``-t usages -i N``: one record per chip block (the
    ``Chip ID`` line leads in -t common and trails in -t usages); the ``mcu`` block is
    skipped."""
    blocks = parse_key_values(text, source)
    head = blocks[0]
    if "NPU ID" not in head or not head["NPU ID"].isdigit():
        raise ParseError(source, "no 'NPU ID' line", line=1)
    npu = int(head["NPU ID"])

    def num(block: dict[str, str], key: str) -> float | None:
        v = block.get(key)
        if v is None or v in ("NA", "-"):
            return None
        try:
            return float(v)
        except ValueError:
            raise ParseError(source, f"NPU {npu}: {key} is not a number: {v!r}") from None

    out: list[ChipUsage] = []
    for block in blocks[1:]:
        if "Chip ID" not in block:
            if block.get("Chip Name", "").lower() == "mcu":
                continue
            raise ParseError(source, f"NPU {npu}: chip block without 'Chip ID'")
        if not block["Chip ID"].isdigit():
            raise ParseError(source, f"NPU {npu}: Chip ID is not a number: {block['Chip ID']!r}")
        temp = num(block, "Temperature(C)")
        hbm = num(block, "HBM Capacity(MB)")
        hbm_pct = num(block, "HBM Usage Rate(%)")
        cores = num(block, "Aicore Count")
        out.append(
            ChipUsage(
                npu_id=npu,
                chip_id=int(block["Chip ID"]),
                temperature_c=None if temp is None else int(temp),
                power_w=num(block, "NPU Real-time Power(W)"),
                hbm_capacity_mb=None if hbm is None else int(hbm),
                hbm_usage_percent=None if hbm_pct is None else int(hbm_pct),
                aicore_count=None if cores is None else int(cores),
            )
        )
    if (
        "Chip Count" in head
        and head["Chip Count"].isdigit()
        and int(head["Chip Count"]) != len(out)
    ):
        raise ParseError(source, f"NPU {npu}: Chip Count {head['Chip Count']}, {len(out)} blocks")
    return out
