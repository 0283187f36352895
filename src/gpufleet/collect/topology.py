"""Parsers for ``nvidia-smi topo -m`` and ``nvidia-smi nvlink -s``.

Both are human-oriented tables, so the parsers are defensive about layout (tabs vs spaces,
ANSI underline escapes that newer drivers put around the header row) but strict about
content: an unknown link type or a short row is a :class:`ParseError`, never a partial matrix.
"""

from __future__ import annotations

import re

from gpufleet.collect.fit import build, int_of
from gpufleet.domain.facts import GpuNvlinks, NvlinkLink, NvlinkStatus, TopoMatrix
from gpufleet.errors import ParseError

# CSI sequences such as ESC[4m (underline) / ESC[0m (reset) that nvidia-smi >= 5xx emits.
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# SOC is the pre-CUDA-9 name of SYS; N/A appears for devices the driver cannot place.
_LINK = re.compile(r"^(X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC|N/A)$")
_LEGEND_NIC = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")
# Columns after the device columns; names contain single spaces, so the header is split
# on tabs or runs of 2+ spaces.
_EXTRA_SPLIT = re.compile(r"\t+|\s{2,}")


def strip_ansi(text: str) -> str:
    """Remove ANSI colour/underline escape sequences."""
    return _ANSI.sub("", text)


def _row_cells(line: str) -> list[str]:
    """A matrix row's cells. With tabs, every cell keeps its place (empty ones too, except
    trailing ones); otherwise the row is split on whitespace."""
    if "\t" not in line:
        return line.split()
    cells = [c.strip() for c in line.split("\t")]
    while cells and not cells[-1]:
        cells.pop()
    return cells


def parse_topo_matrix(text: str, source: str = "nvidia-smi topo -m") -> TopoMatrix:
    """Parse the ``nvidia-smi topo -m`` matrix, affinity columns and NIC legend.

    ``links[a][b]`` holds the cell as printed (``"X"`` on the diagonal, ``"NV18"``,
    ``"SYS"`` ...). Columns other than CPU/NUMA affinity (e.g. "GPU NUMA ID") are not kept.
    """
    lines = strip_ansi(text).splitlines()
    header_idx = next((i for i, ln in enumerate(lines) if ln.strip()), None)
    if header_idx is None:
        raise ParseError(source, "empty output", line=1)
    # The header normally starts with the empty corner cell (a tab), but that is easily lost
    # when output is copied, so it is recognised by matching the row labels instead.
    header = lines[header_idx]

    # Rows run until the first blank line (then comes "Legend:").
    rows: list[tuple[int, list[str]]] = []
    i = header_idx + 1
    while i < len(lines) and lines[i].strip():
        rows.append((i + 1, _row_cells(lines[i])))
        i += 1
    if not rows:
        raise ParseError(source, "matrix header without rows", line=header_idx + 1)

    devices = [tokens[0] for _, tokens in rows]
    header_tokens = header.split()
    if header_tokens[: len(devices)] != devices:
        raise ParseError(
            source,
            f"header columns {header_tokens[: len(devices)]} do not match rows {devices}",
            line=header_idx + 1,
        )
    parts = header.split(None, len(devices))
    extra_text = parts[len(devices)] if len(parts) > len(devices) else ""
    extra_cols = [c for c in _EXTRA_SPLIT.split(extra_text) if c]
    for col in extra_cols:
        # Every affinity column name has a space; a one-word column is a device whose row
        # is missing, i.e. the output was cut short.
        if " " not in col:
            raise ParseError(
                source, f"column {col!r} has no row (truncated matrix?)", line=rows[-1][0] + 1
            )

    links: dict[str, dict[str, str]] = {}
    cpu_affinity: dict[str, str] = {}
    numa_affinity: dict[str, str] = {}
    for lineno, tokens in rows:
        dev = tokens[0]
        cells = tokens[1 : 1 + len(devices)]
        if len(cells) != len(devices):
            raise ParseError(
                source, f"row {dev} has {len(cells)} of {len(devices)} link cells", line=lineno
            )
        for cell in cells:
            if not _LINK.match(cell):
                raise ParseError(source, f"unknown link type {cell!r} in row {dev}", line=lineno)
        links[dev] = dict(zip(devices, cells, strict=True))
        rest = tokens[1 + len(devices) :]
        values = [v for v in rest if v]
        if len(values) > len(extra_cols):
            raise ParseError(
                source,
                f"row {dev} has {len(values)} values after the links but "
                f"the header names {len(extra_cols)} columns",
                line=lineno,
            )
        # Tab-separated rows keep their empty cells, so a value stays under its column (an
        # empty CPU Affinity does not shift the NUMA node into it). nvidia-smi prints one
        # empty cell more before "GPU NUMA ID" than the header has; it is past the affinity
        # columns, which come first. Space-separated rows cannot show an empty cell, so
        # their values are matched left to right.
        for name, value in zip(
            extra_cols, rest if "\t" in lines[lineno - 1] else values, strict=False
        ):
            if not value:
                continue
            if name == "CPU Affinity":
                cpu_affinity[dev] = value
            elif name == "NUMA Affinity":
                numa_affinity[dev] = value

    nic_names: dict[str, str] = {}
    in_nic_legend = False
    for j in range(i, len(lines)):
        stripped = lines[j].strip()
        if stripped == "NIC Legend:":
            in_nic_legend = True
            continue
        if in_nic_legend and stripped:
            m = _LEGEND_NIC.match(lines[j])
            if m is None:
                raise ParseError(source, f"bad NIC legend entry {stripped[:60]!r}", line=j + 1)
            nic_names[m.group(1)] = m.group(2)
    for nic in nic_names:
        if nic not in links:
            raise ParseError(source, f"NIC legend names {nic}, which is not in the matrix")

    return build(
        TopoMatrix,
        source,
        devices=devices,
        links=links,
        cpu_affinity=cpu_affinity,
        numa_affinity=numa_affinity,
        nic_names=nic_names,
    )


_GPU_HEADER = re.compile(r"^GPU (\d+): (.*?)(?: \(UUID: ([^)]+)\))?\s*$")
_LINK_LINE = re.compile(r"^\s*Link (\d+): (.+?)\s*$")
_SPEED = re.compile(r"^(\d+(?:\.\d+)?) GB/s$")
# Messages nvidia-smi prints instead of links: the query is impossible, not a link failure.
_UNSUPPORTED = re.compile(r"not supported|does not have or support", re.IGNORECASE)


#: A ``Link N: ...`` line as printed -> its (frozen, so shareable) link, for the lines read
#: before: every host of a model prints the same ones. Only lines that parsed are kept;
#: emptied past 4096 entries.
_LINK_MEMO: dict[str, NvlinkLink] = {}


def parse_nvlink_status(text: str, source: str = "nvidia-smi nvlink -s") -> NvlinkStatus:
    """Parse ``nvidia-smi nvlink -s``: per GPU, each link's state and speed.

    ``<inactive>`` links are kept with ``active=False``. A per-GPU message such as "Nvlink
    queries are not supported for Devices in MIG mode" or "Device does not have or support
    Nvlink" gives ``supported=False``; other NVML messages (e.g. "all links are inActive")
    keep ``supported=True``. Distinct messages are joined into ``message``.
    """
    gpus: list[GpuNvlinks] = []
    current: tuple[int, str | None, list[NvlinkLink]] | None = None
    messages: list[str] = []
    supported = True

    def flush() -> None:
        if current is not None:
            gpus.append(
                build(GpuNvlinks, source, gpu_index=current[0], uuid=current[1], links=current[2])
            )

    memo = _LINK_MEMO
    if len(memo) > 4096:
        memo.clear()
    for lineno, raw in enumerate(strip_ansi(text).splitlines(), start=1):
        if current is not None:
            known = memo.get(raw)
            if known is not None:  # a link line (not a GPU header) read before
                current[2].append(known)
                continue
        line = raw.strip()
        if not line:
            continue
        header = _GPU_HEADER.match(line)
        if header:
            flush()
            current = (int_of(header.group(1), source, "GPU", line=lineno), header.group(3), [])
            continue
        if current is None:
            raise ParseError(source, f"expected 'GPU <n>: ...', got {line[:60]!r}", line=lineno)
        link = _LINK_LINE.match(raw)
        if link:
            value = link.group(2)
            number = int_of(link.group(1), source, "link", line=lineno)
            if value == "<inactive>":
                read = NvlinkLink(link=number, active=False)
            else:
                speed = _SPEED.match(value)
                if speed is None:
                    raise ParseError(source, f"unreadable link value {value!r}", line=lineno)
                read = NvlinkLink(link=number, active=True, speed_gbps=float(speed.group(1)))
            memo[raw] = read
            current[2].append(read)
            continue
        if "nvlink" in line.lower() or line.startswith("NVML:"):
            if _UNSUPPORTED.search(line):
                supported = False
            if line not in messages:
                messages.append(line)
            continue
        raise ParseError(source, f"unexpected line {line[:60]!r}", line=lineno)
    flush()
    if not gpus:
        raise ParseError(source, "no 'GPU <n>:' sections found", line=1)
    message = "; ".join(messages) or None
    return build(NvlinkStatus, source, supported=supported, message=message, gpus=gpus)
