"""Parsers for Hygon DCU tools (pure; real captures in tests/fixtures/captured/hygon).

``hy-smi`` (and, before DTK 24.04, DTK's ``rocm-smi``) prints one summary table between ``=``
banners and an ``End of ... SMI Log`` footer. Its header changed across four tool versions,
and every one is known here by its exact column list (:data:`HEADERS`):

* ``rocm-4.0``: ``GPU Temp AvgPwr SCLK MCLK Fan Perf PwrCap VRAM% GPU%`` (rocm-smi in
  ``paddle-dcu:rocm4.0.1``; the device is called "GPU");
* ``dtk-23.10``: ``DCU Temp AvgPwr Fan Perf PwrCap VRAM% DCU%`` (rocm-smi, DTK 23.10.1);
* ``dtk-24.04``: ``DCU Temp AvgPwr Perf PwrCap VRAM% DCU% Mode`` (hy-smi, DTK 24.04.1);
* ``dtk-25.04``: ``HCU Temp AvgPwr Perf PwrCap VRAM% HCU% Dec% Enc% Mode`` (hy-smi, DTK
  25.04.2: ``DCU%`` renamed ``HCU%``, video ``Dec%``/``Enc%`` added).

A header that is none of these is a :class:`ParseError` naming the tool, the line and the
columns: a new tool version is refused, never read by position. Rows are split on runs of
blanks (one capture keeps trailing padding, another none); each value must carry its unit
(``42.0c``/``53.0C``, ``39.0W``, ``0%``/``0.0%``, ``300Mhz``). A table without its footer
was cut short and is refused too. No summary format has an error or ECC column: ``Mode`` is
the only state word.

``rocm-smi --json`` of DTK (``-i --showmeminfo vram --showpower --showserial --showuse
--showtemp --showproductname --showuniqueid``) gives what the table lacks: the PCI device id,
the product name, serial, unique id and VRAM in MiB, per ``cardN``; the utilisation key is
``DCU use (%)`` where AMD's tool says ``GPU use (%)``; an empty ``"": ""`` pair sits among the
keys.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from gpufleet.errors import ParseError

HY_SMI = "hy-smi"
ROCM_SMI_JSON = "rocm-smi --json (DTK)"

#: Format name -> the exact columns of its header line.
HEADERS: dict[str, tuple[str, ...]] = {
    "rocm-4.0": ("GPU", "Temp", "AvgPwr", "SCLK", "MCLK", "Fan", "Perf", "PwrCap", "VRAM%", "GPU%"),
    "dtk-23.10": ("DCU", "Temp", "AvgPwr", "Fan", "Perf", "PwrCap", "VRAM%", "DCU%"),
    "dtk-24.04": ("DCU", "Temp", "AvgPwr", "Perf", "PwrCap", "VRAM%", "DCU%", "Mode"),
    "dtk-25.04": (
        "HCU", "Temp", "AvgPwr", "Perf", "PwrCap", "VRAM%", "HCU%", "Dec%", "Enc%", "Mode",
    ),
}  # fmt: skip
_BY_COLUMNS = {cols: name for name, cols in HEADERS.items()}
_BANNER = re.compile(r"^=+(?:[^=].*?=+)?$")
_FOOTER = re.compile(r"^=+\s*End of (?:ROCm )?SMI Log\s*=+$")
#: column -> (unit suffixes accepted, case-sensitively, as the captures print them)
_UNITS: dict[str, tuple[str, ...]] = {
    "Temp": ("c", "C"),
    "AvgPwr": ("W",),
    "PwrCap": ("W",),
    "SCLK": ("Mhz",),
    "MCLK": ("Mhz",),
}
_NUMBER = re.compile(r"^\d+(?:\.\d+)?$", re.ASCII)
_WORD = re.compile(r"^[A-Za-z][A-Za-z_-]*$")


@dataclass(frozen=True, slots=True)
class HyDevice:
    """One row of the summary table (None: the format has no such column)."""

    index: int
    temperature_c: float
    power_w: float
    power_cap_w: float
    vram_used_pct: float
    utilisation_pct: float
    perf: str
    fan_pct: float | None = None
    sclk_mhz: float | None = None
    mclk_mhz: float | None = None
    decoder_pct: float | None = None
    encoder_pct: float | None = None
    mode: str | None = None


@dataclass(frozen=True, slots=True)
class HySmi:
    """The table: its format (a key of :data:`HEADERS`), the tool's word for a device
    (``GPU``/``DCU``/``HCU``) and its rows, by index."""

    format: str
    device_word: str
    devices: tuple[HyDevice, ...]


def _value(
    raw: str, column: str, source: str, lineno: int, col: int
) -> float | str:
    if column in ("Perf", "Mode"):
        if not _WORD.match(raw):
            raise ParseError(source, f"{column}: not a word: {raw!r}", line=lineno, column=col)
        return raw
    if column.endswith("%") or column == "Fan":
        units: tuple[str, ...] = ("%",)
    else:
        units = _UNITS[column]
    unit = next((u for u in units if raw.endswith(u)), None)
    number = raw[: -len(unit)] if unit else ""
    if unit is None or not _NUMBER.match(number) or len(number) > 12:
        want = "/".join(units)
        raise ParseError(
            source, f"{column}: {raw!r} is not a number in {want}", line=lineno, column=col
        )
    value = float(number)
    if not math.isfinite(value):
        raise ParseError(source, f"{column}: {raw!r} is not finite", line=lineno, column=col)
    return value


def _fields(line: str) -> list[tuple[int, str]]:
    """The blank-separated fields of ``line`` with their 1-based columns."""
    return [(m.start() + 1, m.group()) for m in re.finditer(r"\S+", line)]


def parse_hy_smi(text: str, source: str = HY_SMI) -> HySmi:
    """Parse hy-smi's (or DTK rocm-smi's) summary table (module docstring)."""
    lines = text.splitlines()
    header_at: int | None = None
    fmt = ""
    columns: tuple[str, ...] = ()
    rows: list[HyDevice] = []
    seen: set[int] = set()
    footer = False
    for lineno, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line:
            continue
        if footer:
            raise ParseError(source, f"text after the footer: {line[:60]!r}", line=lineno)
        if _FOOTER.match(line):
            if header_at is None:
                raise ParseError(source, "footer before any table header", line=lineno)
            footer = True
            continue
        if _BANNER.match(line):
            continue
        fields = _fields(raw)
        if header_at is None:
            names = tuple(f for _, f in fields)
            known = _BY_COLUMNS.get(names)
            if known is None:
                raise ParseError(
                    source,
                    f"unknown table header {' '.join(names)[:160]!r} (columns "
                    f"{fields[0][0]}-{len(raw.rstrip())}); known formats: "
                    + "; ".join(f"{k}: {' '.join(v)}" for k, v in HEADERS.items()),
                    line=lineno,
                    column=fields[0][0],
                )
            header_at, fmt, columns = lineno, known, names
            continue
        if len(fields) != len(columns):
            raise ParseError(
                source,
                f"row has {len(fields)} fields, the {fmt} header has {len(columns)} "
                f"({' '.join(columns)})",
                line=lineno,
                column=fields[0][0],
            )
        col0, idx = fields[0]
        if not (idx.isascii() and idx.isdigit()) or len(idx) > 4:
            raise ParseError(
                source, f"{columns[0]}: not a device index: {idx!r}", line=lineno, column=col0
            )
        index = int(idx)
        if index in seen:
            raise ParseError(source, f"{columns[0]} {index} listed twice", line=lineno, column=col0)
        seen.add(index)
        values = {
            name: _value(val, name, source, lineno, col)
            for name, (col, val) in zip(columns[1:], fields[1:], strict=True)
        }
        rows.append(_device(index, columns[0], values))
    if header_at is None:
        raise ParseError(source, "no table header: not hy-smi's summary")
    if not footer:
        raise ParseError(source, "no 'End of SMI Log' footer: the output was cut short")
    if not rows:
        raise ParseError(source, "the table lists no device", line=header_at)
    return HySmi(format=fmt, device_word=columns[0], devices=tuple(rows))


def _device(index: int, word: str, v: dict[str, float | str]) -> HyDevice:
    def num(key: str) -> float | None:
        x = v.get(key)
        return x if isinstance(x, float) else None

    def need(key: str) -> float:
        x = v[key]
        assert isinstance(x, float)  # _value gives a float for every unit column
        return x

    mode = v.get("Mode")
    return HyDevice(
        index=index,
        temperature_c=need("Temp"),
        power_w=need("AvgPwr"),
        power_cap_w=need("PwrCap"),
        vram_used_pct=need("VRAM%"),
        utilisation_pct=need(f"{word}%"),
        perf=str(v["Perf"]),
        fan_pct=num("Fan"),
        sclk_mhz=num("SCLK"),
        mclk_mhz=num("MCLK"),
        decoder_pct=num("Dec%"),
        encoder_pct=num("Enc%"),
        mode=None if mode is None else str(mode),
    )


# --------------------------------------------------------------------------- rocm-smi --json


@dataclass(frozen=True, slots=True)
class DtkCard:
    """One ``cardN`` of DTK's ``rocm-smi --json`` (None: key absent)."""

    index: int
    device_id: str | None  # lower-case hex without 0x ("6210"), as lspci -nn prints it
    series: str | None
    vendor: str | None
    serial: str | None
    unique_id: str | None
    power_w: float | None
    temperature_edge_c: float | None
    temperature_junction_c: float | None
    temperature_memory_c: float | None
    utilisation_pct: float | None
    vram_total_mib: int | None
    vram_used_mib: int | None


_CARD = re.compile(r"^card(\d{1,4})$", re.ASCII)
_UNKNOWN = {"", "N/A", "NA"}
_USE_KEYS = ("DCU use (%)", "HCU use (%)", "GPU use (%)")


def _text(card: str, d: dict[str, Any], key: str, source: str) -> str | None:
    v = d.get(key)
    if v is None:
        return None
    if not isinstance(v, str):
        raise ParseError(source, f"{card}: {key!r} is not a string: {type(v).__name__}")
    v = v.strip()
    return None if v in _UNKNOWN else v


def _float(card: str, d: dict[str, Any], key: str, source: str) -> float | None:
    v = _text(card, d, key, source)
    if v is None:
        return None
    if not _NUMBER.match(v) or len(v) > 16:
        raise ParseError(source, f"{card}: {key!r} is not a number: {v[:40]!r}")
    return float(v)


def parse_rocm_smi_dtk_json(text: str, source: str = ROCM_SMI_JSON) -> tuple[DtkCard, ...]:
    """Parse DTK's ``rocm-smi --json`` into one :class:`DtkCard` per ``cardN`` (by N)."""
    try:
        doc = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as e:
        if isinstance(e, json.JSONDecodeError):
            raise ParseError(source, f"not JSON: {e.msg}", line=e.lineno, column=e.colno) from None
        raise ParseError(source, "not JSON: nested too deep") from None
    if not isinstance(doc, dict):
        raise ParseError(source, "top level is not an object")
    cards: list[DtkCard] = []
    for key, body in doc.items():
        m = _CARD.match(key)
        if m is None:
            continue
        if not isinstance(body, dict):
            raise ParseError(source, f"{key} is not an object")
        cards.append(_card(int(m.group(1)), key, body, source))
    if not cards:
        raise ParseError(source, "no cardN entries")
    return tuple(sorted(cards, key=lambda c: c.index))


def _card(index: int, name: str, d: dict[str, Any], source: str) -> DtkCard:
    dev = _text(name, d, "Device ID", source)
    if dev is not None:
        if not re.fullmatch(r"0x[0-9a-fA-F]{1,4}", dev):
            raise ParseError(source, f"{name}: Device ID {dev!r} is not hex")
        dev = dev[2:].lower().rjust(4, "0")
    use_key = next((k for k in _USE_KEYS if k in d), None)
    total = _float(name, d, "vram Total Memory (MiB)", source)
    used = _float(name, d, "vram Total Used Memory (MiB)", source)
    return DtkCard(
        index=index,
        device_id=dev,
        series=_text(name, d, "Card Series", source),
        vendor=_text(name, d, "Card Vendor", source),
        serial=_text(name, d, "Serial Number", source),
        unique_id=_text(name, d, "Unique ID", source),
        power_w=_float(name, d, "Average Graphics Package Power (W)", source),
        temperature_edge_c=_float(name, d, "Temperature (Sensor edge) (C)", source),
        temperature_junction_c=_float(name, d, "Temperature (Sensor junction) (C)", source),
        temperature_memory_c=_float(name, d, "Temperature (Sensor mem) (C)", source),
        utilisation_pct=None if use_key is None else _float(name, d, use_key, source),
        vram_total_mib=None if total is None else int(total),
        vram_used_mib=None if used is None else int(used),
    )
