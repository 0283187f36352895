"""Parser for ``rocm-smi ... --json`` (pure; real captures in tests/fixtures/captured/amd).

The JSON is ``{"card0": {...}, ..., "system": {...}}`` with every value a string. Key names
change across ROCm versions, so each field is read from the first key present:

* model: ``Card Series`` (6.1+), ``Card series`` (4.3-6.0), ``Device Name`` (6.x ``-a``);
  absent on the oldest tool (then None).
* PCI device id: ``GPU ID`` (<= 5.7) or ``Device ID`` (6.x).
* power: ``Average Graphics Package Power (W)``, or on ROCm 6.x cards that report the current
  socket power, ``Current Socket Graphics Package Power (W)`` (rocm-smi prints one of the two).
* ``Serial Number``/``Unique ID`` are ``"N/A"`` or ``"0"`` when the board does not expose
  them (MI100 on ROCm 5.7.1): both mean "unknown" (None).

rocm-smi's JSON carries no ECC/RAS counts; ``PCIe Replay Count`` is the one error counter.
``amd-smi`` is not parsed: no real capture of it is available yet.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from gpufleet.domain.accelerators import normalize_pci_address
from gpufleet.errors import ParseError

_CARD = re.compile(r"^card(\d+)$")
_BRACKET = re.compile(r"\[([^\]]+)\]")
_UNKNOWN = {"", "N/A", "0", "NA"}
#: Package power: ``Average ...`` up to ROCm 5.x and on cards that report an average; ROCm 6.x
#: prints ``Current Socket Graphics Package Power (W)`` where the card reports the current
#: socket power instead (the one power value of such a card).
_POWER_KEYS = (
    "Average Graphics Package Power (W)",
    "Current Socket Graphics Package Power (W)",
)
_TOPO = re.compile(
    r"^\(Topology\) (?P<what>Link type|Weight|Hops) between DRM devices (?P<a>\d+) and (?P<b>\d+)$"
)


@dataclass(frozen=True, slots=True)
class RocmCard:
    index: int
    series: str | None
    device_id: str | None  # lower-case hex without 0x, as lspci/the node labeller print it
    sku: str | None
    vbios: str | None
    serial: str | None
    unique_id: str | None
    bus_id: str | None
    vram_total_bytes: int | None
    vram_used_bytes: int | None
    temperature_edge_c: float | None
    temperature_junction_c: float | None
    temperature_memory_c: float | None
    power_average_w: float | None
    power_max_w: float | None
    pcie_replay_count: int | None
    gfx_version: str | None
    firmware: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TopoLink:
    """``(Topology) ... between DRM devices A and B`` from the ``system`` object."""

    a: int
    b: int
    link_type: str | None  # "PCIE" / "XGMI", as printed
    weight: int | None
    hops: int | None


@dataclass(frozen=True, slots=True)
class RocmSmi:
    cards: tuple[RocmCard, ...]
    driver_version: str | None
    topology: tuple[TopoLink, ...] = ()


def _first(d: dict[str, Any], *keys: str) -> str | None:
    for k in keys:
        v = d.get(k)
        if isinstance(v, str) and v.strip():
            return v.strip()
    return None


def _known(v: str | None) -> str | None:
    return None if v is None or v in _UNKNOWN else v


def _number(
    card: str, d: dict[str, Any], keys: str | tuple[str, ...], source: str
) -> float | None:
    """The first of ``keys`` (one or several) present, as a number (None: absent or ``N/A``)."""
    names = (keys,) if isinstance(keys, str) else keys
    key = next((k for k in names if _first(d, k) is not None), names[0])
    v = _first(d, key)
    if v is None or v.startswith("N/A"):  # also "N/A (Secondary die)" (ROCm 6.0.2)
        return None
    try:
        return float(v)
    except ValueError:
        raise ParseError(source, f"{card}: {key!r} is not a number: {v!r}") from None


def _int(card: str, d: dict[str, Any], key: str, source: str) -> int | None:
    n = _number(card, d, key, source)
    return None if n is None else int(n)


def parse_rocm_smi_json(text: str, source: str = "rocm-smi --json") -> RocmSmi:
    """Parse rocm-smi's JSON into one :class:`RocmCard` per ``cardN`` (sorted by N)."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ParseError(source, f"not JSON: {e.msg}", line=e.lineno, column=e.colno) from None
    if not isinstance(doc, dict):
        raise ParseError(source, "top level is not an object")
    cards: list[RocmCard] = []
    foreign = 0
    for key, body in doc.items():
        m = _CARD.match(key)
        if m is None:
            continue
        if not isinstance(body, dict):
            raise ParseError(source, f"{key} is not an object")
        if not _is_amd(body):
            foreign += 1  # Hygon's DTK ships a rocm-smi too: its DCUs are Hygon's, not AMD's
            continue
        cards.append(_card(int(m.group(1)), key, body, source))
    if not cards and not foreign:
        raise ParseError(source, "no cardN entries")
    system = doc.get("system")
    driver = _first(system, "Driver version") if isinstance(system, dict) else None
    topology = _topology(system, source) if isinstance(system, dict) else ()
    return RocmSmi(
        cards=tuple(sorted(cards, key=lambda c: c.index)),
        driver_version=driver,
        topology=topology,
    )


def _topology(system: dict[str, Any], source: str) -> tuple[TopoLink, ...]:
    pairs: dict[tuple[int, int], dict[str, str]] = {}
    for key, value in system.items():
        m = _TOPO.match(key)
        if m is None or not isinstance(value, str):
            continue
        pairs.setdefault((int(m.group("a")), int(m.group("b"))), {})[m.group("what")] = value

    def num(d: dict[str, str], what: str, pair: tuple[int, int]) -> int | None:
        v = d.get(what)
        if v is None:
            return None
        if not v.isdigit():
            raise ParseError(source, f"system: {what} between {pair[0]} and {pair[1]}: {v!r}")
        return int(v)

    return tuple(
        TopoLink(
            a=a,
            b=b,
            link_type=d.get("Link type"),
            weight=num(d, "Weight", (a, b)),
            hops=num(d, "Hops", (a, b)),
        )
        for (a, b), d in sorted(pairs.items())
    )


#: How rocm-smi names AMD as a card's vendor: the pci.ids name, or the raw id when the name
#: lookup failed (ROCm 4.3).
_AMD_VENDOR = ("advanced micro devices", "amd", "0x1002")


def _is_amd(d: dict[str, Any]) -> bool:
    """A card rocm-smi lists is AMD's unless its ``Card Vendor`` names another vendor (DTK's
    rocm-smi on a Hygon host prints ``Chengdu Haiguang IC Design Co., Ltd.``); a card without
    the key is AMD's, as every rocm-smi of AMD's own prints it."""
    vendor = _first(d, "Card Vendor", "Card vendor")
    return vendor is None or vendor.strip().lower().startswith(_AMD_VENDOR)


def _card(index: int, name: str, d: dict[str, Any], source: str) -> RocmCard:
    series = _first(d, "Card Series", "Card series", "Device Name")
    if series is not None and series.startswith("0x"):
        series = None  # ROCm 4.3 printed the raw vendor id when the name lookup failed
    dev = _first(d, "GPU ID", "Device ID")
    if dev is not None:
        if not re.fullmatch(r"0x[0-9a-fA-F]{1,4}", dev):
            raise ParseError(source, f"{name}: device id {dev!r} is not hex")
        dev = dev[2:].lower().rjust(4, "0")
    bus = _first(d, "PCI Bus")
    if bus is not None:
        try:
            bus = normalize_pci_address(bus)
        except ValueError:
            raise ParseError(source, f"{name}: not a PCI bus id: {bus!r}") from None
    firmware = {
        k.removesuffix(" firmware version"): v
        for k, v in d.items()
        if k.endswith(" firmware version") and isinstance(v, str)
    }
    return RocmCard(
        index=index,
        series=series,
        device_id=dev,
        sku=_first(d, "Card SKU"),
        vbios=_first(d, "VBIOS version"),
        serial=_known(_first(d, "Serial Number")),
        unique_id=_known(_first(d, "Unique ID")),
        bus_id=bus,
        vram_total_bytes=_int(name, d, "VRAM Total Memory (B)", source),
        vram_used_bytes=_int(name, d, "VRAM Total Used Memory (B)", source),
        temperature_edge_c=_number(name, d, "Temperature (Sensor edge) (C)", source),
        temperature_junction_c=_number(name, d, "Temperature (Sensor junction) (C)", source),
        temperature_memory_c=_number(name, d, "Temperature (Sensor memory) (C)", source),
        power_average_w=_number(name, d, _POWER_KEYS, source),
        power_max_w=_number(name, d, "Max Graphics Package Power (W)", source),
        pcie_replay_count=_int(name, d, "PCIe Replay Count", source),
        gfx_version=_first(d, "GFX Version"),
        firmware=firmware,
    )


def product_name(series: str | None) -> str | None:
    """The Instinct marketing name in a series string: ``"Arcturus GL-XL [Instinct MI100]"``
    -> ``"Instinct MI100"``; ``"AMD INSTINCT MI250 (MCM) OAM AC MBA"`` ->
    ``"INSTINCT MI250"`` (the ``AMD`` prefix and the form-factor tail are dropped)."""
    if series is None:
        return None
    m = _BRACKET.search(series)
    if m is not None:
        return m.group(1).strip()
    name = series.removeprefix("AMD ").strip()
    return name.split(" (", 1)[0].strip() or None


#: libdrm's ``amdgpu.ids`` names for Instinct device ids that have one entry there (the node
#: labeller's fallback when sysfs ``product_name`` is empty; ROCm/k8s-device-plugin
#: ``cmd/k8s-node-labeller/amdgpu.ids``). rocm-smi then prints the pci.ids name
#: ("Arcturus GL-XL [Instinct MI100]"), which is not what the labeller reads.
_AMDGPU_IDS = {
    "738c": "AMD Instinct MI100",
    "7408": "AMD Instinct MI250X",
    "740f": "AMD Instinct MI210",
    "74a0": "AMD Instinct MI300A",
    "74a1": "AMD Instinct MI300X",
    "74a5": "AMD Instinct MI325X",
    "75a0": "AMD Instinct MI350X",
    "75a3": "AMD Instinct MI355X",
}


def labeller_product_name(series: str | None, device_id: str | None) -> str | None:
    """The product name AMD's node labeller reads for this card, unsanitised.

    A series without the pci.ids ``Codename [Marketing]`` form is the board's own
    ``product_name`` (``"AMD INSTINCT MI250 (MCM) OAM AC MBA"``): kept whole. The pci.ids
    form means the board exposes none, so the labeller asks libdrm: its ``amdgpu.ids`` name
    for the device id (``738c`` -> ``"AMD Instinct MI100"``), None for an id not listed here
    (no guess)."""
    if series is None:
        return None
    if _BRACKET.search(series) is None:
        return series
    return None if device_id is None else _AMDGPU_IDS.get(device_id)
