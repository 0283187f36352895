"""Parsers for ``nvidia-smi`` output: pure functions from captured text to typed facts.

Three formats, one result type:

* ``nvidia-smi -q -x`` (XML)            -> :func:`parse_nvidia_smi_xml`
* ``nvidia-smi -q`` (indented text)     -> :func:`parse_nvidia_smi_text`
* ``nvidia-smi --query-gpu=... --format=csv`` -> :func:`parse_query_gpu_csv`

The XML and text formats carry the same tree under different names, so both are read
through a small "view" interface and one declarative table (:data:`_GPU_FIELDS`) that lists,
per :class:`~gpufleet.domain.facts.Gpu` attribute, the candidate paths in each format (newest
schema first, older fallbacks after) and the adapter that turns the string into a value.

Conventions shared by all three parsers:

* nvidia-smi's "no value" spellings (``N/A``, ``[N/A]``, ``Not Supported``, ``Unknown Error``,
  ``Requested functionality has been deprecated``, anything in ``[brackets]`` ...) become
  ``None``; a field an older driver does not print at all is ``None`` too.
* A value that is present but cannot be read (``"abc MiB"``) raises :class:`ParseError`:
  a report is either complete or refused, never half-filled.
* Sub-records (ECC counts, retired pages, remapped rows) are ``None`` when every one of their
  values is missing, so "not supported on this GPU" is distinguishable from "zero errors".
* A GPU in an error state is kept and marked (``Gpu.error``, as gpustat keeps an invalid GPU):
  "GPU is lost" / "GPU requires reset" in any value, or "Unknown Error" / "ERR!" in a value
  every working GPU reports (:data:`_VITAL`: UUID, product name, bus id, memory size).
  "Unknown Error" in other fields is ordinary "not supported" noise (real 535 captures print
  ``Addressing Mode : Unknown Error`` on healthy GPUs) and stays ``None``.
* A value that parses but does not fit the facts' bounds (100k GPUs, a 200-character UUID)
  raises :class:`ParseError` naming the field.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import ValidationError

from gpufleet.domain.facts import (
    MAX_GPUS,
    EccErrors,
    Gpu,
    GpuProcess,
    MigDevice,
    NvidiaSmiReport,
    RemappedRows,
    RetiredPages,
)
from gpufleet.errors import ParseError

__all__ = [
    "QUERY_GPU_FIELDS",
    "normalize_pci_bus_id",
    "parse_nvidia_smi_text",
    "parse_nvidia_smi_xml",
    "parse_query_gpu_csv",
    "parse_query_gpu_report",
]

# ----------------------------------------------------------------------------- adapters

# Lower-cased spellings nvidia-smi uses for "no value". Bracketed forms ("[N/A]") are the CSV
# spelling and are handled generically, so only the bare forms are listed.
_MISSING = frozenset(
    {
        "",
        "n/a",
        "na",
        "none",
        "not supported",
        "not available",
        "unknown error",
        "unknown",
        "insufficient permissions",
        "requested functionality has been deprecated",
        "gpu is lost",
        "gpu requires reset",
        "err!",
    }
)


# Error states (lower-cased, brackets stripped) -> how they are recorded on the GPU.
_ERROR_STATES = {
    "gpu is lost": "GPU is lost",
    "gpu requires reset": "GPU requires reset",
    "unknown error": "Unknown Error",
    "err!": "ERR!",
}
#: States that mean a broken GPU wherever they appear.
_ALWAYS_ERROR = frozenset({"gpu is lost", "gpu requires reset"})
#: Gpu attributes every working GPU reports: "Unknown Error"/"ERR!" there is a broken GPU.
_VITAL = frozenset({"uuid", "product_name", "pci_bus_id", "memory_total_mib"})


def _error_state(attr: str, raw: str | None) -> str | None:
    """``"GPU is lost (product_name)"`` if ``raw`` marks the GPU broken, else None."""
    if raw is None:
        return None
    low = raw.strip().strip("[]").strip().lower()
    if low in _ALWAYS_ERROR or (low in _ERROR_STATES and attr in _VITAL):
        return f"{_ERROR_STATES[low]} ({attr})"
    return None


def _fit_error(exc: ValidationError) -> str:
    """The first complaint of a bounds check, as "field: message"."""
    err = exc.errors()[0]
    field = ".".join(str(p) for p in err["loc"]) or "value"
    return f"{field}: {err['msg']}"


class _BadValue(ValueError):
    """A present value that the adapter cannot read (turned into ParseError by the caller)."""


def _clean(raw: str | None) -> str | None:
    """Strip ``raw``; ``None`` for every nvidia-smi spelling of "no value"."""
    if raw is None:
        return None
    value = raw.strip()
    if value.startswith("[") and value.endswith("]"):
        return None  # CSV: "[N/A]", "[Not Supported]", "[Unknown Error]", ...
    low = value.lower()
    # "Not available in WDDM driver model" (Windows per-process memory) and the like.
    if low in _MISSING or low.startswith(("not available", "not supported")):
        return None
    return value


def _as_str(value: str) -> str:
    return value


def _version(value: str) -> str:
    # R610 appends a note: "610.57.04 [Deprecated; will be removed in CUDA 14.0. ...]".
    return value.split()[0]


_NUMBER = re.compile(r"^(?P<num>[-+]?\d+(?:\.\d+)?)\s*(?P<unit>[A-Za-z%]*)$")


def _number(*units: str, integer: bool) -> Callable[[str], float | int]:
    """Adapter for ``"81559 MiB"`` / ``"81559"`` (unit optional: CSV ``nounits`` drops it)."""
    allowed = {u.lower() for u in units}

    def convert(value: str) -> float | int:
        m = _NUMBER.match(value)
        if m is None or (m["unit"] and m["unit"].lower() not in allowed):
            expected = " or ".join(units) if units else "a number"
            raise _BadValue(f"expected {expected}, got {value!r}")
        num = m["num"]
        if len(num) > 30:  # int() refuses > 4300 digits; no reading has 30
            raise _BadValue(f"number too long: {value[:40]!r}...")
        if integer:
            if "." in num:
                raise _BadValue(f"expected a whole number, got {value!r}")
            return int(num)
        return float(num)

    return convert


_int = _number(integer=True)
_mib = _number("MiB", integer=True)
_mhz = _number("MHz", integer=True)
_watts = _number("W", integer=False)
_celsius = _number("C", integer=False)
_percent = _number("%", integer=False)
_link_width = _number("x", integer=True)  # "16x"

_TRUE = frozenset({"enabled", "yes", "on", "active", "true", "1"})
_FALSE = frozenset({"disabled", "no", "off", "not active", "false", "0"})


def _bool(value: str) -> bool:
    low = value.lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise _BadValue(f"expected Enabled/Disabled or Yes/No, got {value!r}")


_PCI = re.compile(
    r"^(?:(?P<domain>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{1,2}):"
    r"(?P<dev>[0-9a-fA-F]{1,2})\.(?P<fn>[0-7])$"
)


def normalize_pci_bus_id(value: str) -> str:
    """``"00000000:19:00.0"`` -> ``"0000:19:00.0"``: lower case, 4-digit domain like lspci.

    nvidia-smi prints a 32-bit domain (8 hex digits); Linux and lspci use 16 bits.
    """
    m = _PCI.match(value.strip())
    if m is None:
        raise _BadValue(f"expected a PCI address like 00000000:19:00.0, got {value!r}")
    domain = int(m["domain"] or "0", 16)
    return f"{domain:04x}:{int(m['bus'], 16):02x}:{int(m['dev'], 16):02x}.{m['fn']}"


def _pci(value: str) -> str:
    return normalize_pci_bus_id(value)


# --------------------------------------------------------------------------- tree views


class _View(Protocol):
    """Read-only access to one node of an XML or text ``-q`` tree by normalised key path."""

    def raw(self, path: str) -> str | None:
        """Text of the first node at ``path`` ("a/b/c"), ``None`` when absent."""

    def node(self, path: str) -> _View | None:
        """First node at ``path``."""

    def nodes(self, path: str) -> list[_View]:
        """Every node at ``path`` (the last segment may repeat, e.g. one per process)."""

    def leaves(self) -> list[tuple[str, str | None, _View]]:
        """Direct children as ``(key, text, view)``."""

    def where(self, path: str) -> tuple[int | None, str]:
        """Line (when known) and a human description of ``path`` for error messages."""


class _XmlView:
    def __init__(self, elem: ET.Element, label: str) -> None:
        self._elem = elem
        self._label = label

    def raw(self, path: str) -> str | None:
        found = self._elem.find(path)
        if found is None:
            return None
        return found.text or ""

    def node(self, path: str) -> _XmlView | None:
        found = self._elem.find(path)
        return None if found is None else _XmlView(found, f"{self._label}/{path}")

    def nodes(self, path: str) -> list[_View]:
        return [_XmlView(e, f"{self._label}/{path}") for e in self._elem.findall(path)]

    def leaves(self) -> list[tuple[str, str | None, _View]]:
        return [(c.tag, c.text, _XmlView(c, f"{self._label}/{c.tag}")) for c in self._elem]

    def where(self, path: str) -> tuple[int | None, str]:
        # The stdlib ElementTree keeps no line numbers; the element path is precise enough.
        return None, f"<{self._label}/{path}>" if path else f"<{self._label}>"


@dataclass
class _TextNode:
    """One ``Key : Value`` (or bare ``Key``) line of ``nvidia-smi -q`` and its children."""

    key: str  # normalised: "FB Memory Usage" -> "fb_memory_usage"
    label: str  # as printed, for messages
    value: str | None
    line: int
    indent: int
    children: list[_TextNode] = field(default_factory=list)
    child_indent: int | None = None


def _norm_key(key: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", key.lower()).strip("_")


class _TextView:
    def __init__(self, node: _TextNode) -> None:
        self._node = node

    def _walk(self, path: str) -> Iterator[_TextNode]:
        *parents, last = path.split("/")
        current = self._node
        for part in parents:
            nxt = next((c for c in current.children if c.key == part), None)
            if nxt is None:
                return
            current = nxt
        yield from (c for c in current.children if c.key == last)

    def raw(self, path: str) -> str | None:
        found = next(self._walk(path), None)
        if found is None:
            return None
        return found.value if found.value is not None else ""

    def node(self, path: str) -> _TextView | None:
        found = next(self._walk(path), None)
        return None if found is None else _TextView(found)

    def nodes(self, path: str) -> list[_View]:
        return [_TextView(n) for n in self._walk(path)]

    def leaves(self) -> list[tuple[str, str | None, _View]]:
        return [(c.key, c.value, _TextView(c)) for c in self._node.children]

    def where(self, path: str) -> tuple[int | None, str]:
        found = next(self._walk(path), None) if path else self._node
        if found is None:
            return self._node.line, f"'{self._node.label}'"
        return found.line, f"'{found.label}'"


# ------------------------------------------------------------------- declarative tables


@dataclass(frozen=True)
class _Field:
    """One Gpu attribute: candidate paths per format (first present wins) and its adapter."""

    attr: str
    xml: tuple[str, ...]
    text: tuple[str, ...]
    convert: Callable[[str], Any]


_GPU_FIELDS: tuple[_Field, ...] = (
    _Field("uuid", ("uuid",), ("gpu_uuid",), _as_str),
    _Field("serial", ("serial",), ("serial_number",), _as_str),
    _Field("pci_bus_id", ("pci/pci_bus_id",), ("pci/bus_id",), _pci),
    _Field("product_name", ("product_name",), ("product_name",), _as_str),
    _Field("product_brand", ("product_brand",), ("product_brand",), _as_str),
    _Field("architecture", ("product_architecture",), ("product_architecture",), _as_str),
    _Field("vbios_version", ("vbios_version",), ("vbios_version",), _as_str),
    _Field("memory_total_mib", ("fb_memory_usage/total",), ("fb_memory_usage/total",), _mib),
    _Field("memory_used_mib", ("fb_memory_usage/used",), ("fb_memory_usage/used",), _mib),
    _Field("memory_free_mib", ("fb_memory_usage/free",), ("fb_memory_usage/free",), _mib),
    _Field("persistence_mode", ("persistence_mode",), ("persistence_mode",), _bool),
    _Field("mig_mode_current", ("mig_mode/current_mig",), ("mig_mode/current",), _bool),
    _Field("mig_mode_pending", ("mig_mode/pending_mig",), ("mig_mode/pending",), _bool),
    _Field("ecc_mode_current", ("ecc_mode/current_ecc",), ("ecc_mode/current",), _bool),
    _Field("ecc_mode_pending", ("ecc_mode/pending_ecc",), ("ecc_mode/pending",), _bool),
    _Field("temperature_c", ("temperature/gpu_temp",), ("temperature/gpu_current_temp",), _celsius),
    _Field(
        "temperature_memory_c",
        ("temperature/memory_temp",),
        ("temperature/memory_current_temp",),
        _celsius,
    ),
    # Board power: "power_draw" until R530, then average (1 s window) and instantaneous;
    # --query-gpu's power.draw reports the average when there is one, so prefer it too.
    _Field(
        "power_draw_w",
        (
            "gpu_power_readings/power_draw",
            "gpu_power_readings/average_power_draw",
            "gpu_power_readings/instant_power_draw",
            "power_readings/power_draw",
        ),
        (
            "gpu_power_readings/power_draw",
            "gpu_power_readings/average_power_draw",
            "gpu_power_readings/instantaneous_power_draw",
            "power_readings/power_draw",
        ),
        _watts,
    ),
    # The limit the driver enforces (what throttles), not the one an admin requested.
    _Field(
        "power_limit_w",
        (
            "gpu_power_readings/current_power_limit",
            "power_readings/enforced_power_limit",
            "power_readings/power_limit",
        ),
        (
            "gpu_power_readings/current_power_limit",
            "gpu_power_readings/gpu_ceiling_power_limit/current_power_limit",  # R610
            "power_readings/enforced_power_limit",
            "power_readings/power_limit",
        ),
        _watts,
    ),
    _Field("clocks_sm_mhz", ("clocks/sm_clock",), ("clocks/sm",), _mhz),
    _Field("clocks_mem_mhz", ("clocks/mem_clock",), ("clocks/memory",), _mhz),
    _Field("clocks_max_sm_mhz", ("max_clocks/sm_clock",), ("max_clocks/sm",), _mhz),
    _Field(
        "pcie_gen_current",
        ("pci/pci_gpu_link_info/pcie_gen/current_link_gen",),
        ("pci/gpu_link_info/pcie_generation/current",),
        _int,
    ),
    _Field(
        "pcie_gen_max",
        ("pci/pci_gpu_link_info/pcie_gen/max_link_gen",),
        ("pci/gpu_link_info/pcie_generation/max",),
        _int,
    ),
    _Field(
        "pcie_width_current",
        ("pci/pci_gpu_link_info/link_widths/current_link_width",),
        ("pci/gpu_link_info/link_width/current",),
        _link_width,
    ),
    _Field(
        "pcie_width_max",
        ("pci/pci_gpu_link_info/link_widths/max_link_width",),
        ("pci/gpu_link_info/link_width/max",),
        _link_width,
    ),
    _Field("fan_speed_pct", ("fan_speed",), ("fan_speed",), _percent),
    _Field("utilization_gpu_pct", ("utilization/gpu_util",), ("utilization/gpu",), _percent),
    _Field("performance_state", ("performance_state",), ("performance_state",), _as_str),
)

# Sub-records: attribute -> {sub-attribute: (xml paths, text paths, adapter)}, relative to
# the sub-record's own node (XML / text).
_SubTable = dict[str, tuple[tuple[str, ...], tuple[str, ...], Callable[[str], Any]]]

_RETIRED_PAGES: _SubTable = {
    "single_bit": (("multiple_single_bit_retirement/retired_count",), ("single_bit_ecc",), _int),
    "double_bit": (("double_bit_retirement/retired_count",), ("double_bit_ecc",), _int),
    "pending": (
        ("pending_retirement", "pending_blacklist"),
        ("pending_page_blacklist", "pending"),
        _bool,
    ),
}
_REMAPPED_ROWS: _SubTable = {
    "correctable": (("remapped_row_corr",), ("correctable_error",), _int),
    "uncorrectable": (("remapped_row_unc",), ("uncorrectable_error",), _int),
    "pending": (("remapped_row_pending",), ("pending",), _bool),
    "failure": (("remapped_row_failure",), ("remapping_failure_occurred",), _bool),
}
_MIG_DEVICE: _SubTable = {
    "gpu_instance_id": (("gpu_instance_id",), ("gpu_instance_id",), _int),
    "compute_instance_id": (("compute_instance_id",), ("compute_instance_id",), _int),
    "memory_total_mib": (
        ("fb_memory_usage/total",),
        ("shared_fb_memory_usage/total", "fb_memory_usage/total"),
        _mib,
    ),
    "sm_count": (
        ("device_attributes/shared/multiprocessor_count",),
        ("device_attributes/shared/multiprocessor_count",),
        _int,
    ),
}
_PROCESS: _SubTable = {
    "pid": (("pid",), (), _int),  # text: the pid is the value of the "Process ID" node
    "type": (("type",), ("type",), _as_str),
    "name": (("process_name",), ("name",), _as_str),
    "used_memory_mib": (("used_memory",), ("used_gpu_memory",), _mib),
}


# ------------------------------------------------------------------ shared GPU extraction


@dataclass(frozen=True)
class _Ctx:
    source: str
    is_xml: bool


def _read(
    ctx: _Ctx, view: _View, paths: Sequence[str], convert: Callable[[str], Any], what: str
) -> Any:
    """First present, non-missing value among ``paths``, converted; ParseError if unreadable."""
    for path in paths:
        value = _clean(view.raw(path))
        if value is None:
            continue
        try:
            return convert(value)
        except _BadValue as exc:
            line, place = view.where(path)
            raise ParseError(ctx.source, f"{place} ({what}): {exc}", line=line) from None
    return None


def _sub(ctx: _Ctx, view: _View | None, table: _SubTable, what: str) -> dict[str, Any] | None:
    """Read a sub-record; ``None`` when its node is absent or every value is missing."""
    if view is None:
        return None
    values = {
        attr: _read(ctx, view, xml if ctx.is_xml else text, conv, f"{what}.{attr}")
        for attr, (xml, text, conv) in table.items()
    }
    return values if any(v is not None for v in values.values()) else None


def _ecc_side(ctx: _Ctx, view: _View | None, what: str) -> EccErrors | None:
    """Sum ECC counts over memory locations for one of ``volatile`` / ``aggregate``.

    Two layouts exist: R470+ lists ``sram_correctable``, ``dram_uncorrectable``,
    ``sram_uncorrectable_parity`` ... directly; older drivers nest per-location counts under
    ``single_bit`` (correctable) and ``double_bit`` (uncorrectable), each with a ``total``.
    """
    if view is None:
        return None
    correctable: list[int] = []
    uncorrectable: list[int] = []
    for key, raw, child in view.leaves():
        if key in ("single_bit", "double_bit"):
            bucket = correctable if key == "single_bit" else uncorrectable
            total = _read(ctx, child, ("total",), _int, f"{what}.{key}.total")
            if total is not None:
                bucket.append(total)
            else:  # no total printed: add up the locations that have a count
                for loc, loc_raw, _ in child.leaves():
                    if loc != "total" and _clean(loc_raw) is not None:
                        bucket.append(_read(ctx, child, (loc,), _int, f"{what}.{key}.{loc}"))
        elif "uncorrectable" in key or "correctable" in key:
            if _clean(raw) is None:
                continue
            value = _read(ctx, view, (key,), _int, f"{what}.{key}")
            (uncorrectable if "uncorrectable" in key else correctable).append(value)
    if not correctable and not uncorrectable:
        return None
    return EccErrors(
        correctable=sum(correctable) if correctable else None,
        uncorrectable=sum(uncorrectable) if uncorrectable else None,
    )


def _mig_devices(ctx: _Ctx, gpu: _View) -> list[MigDevice]:
    if ctx.is_xml:
        views = gpu.nodes("mig_devices/mig_device")
    else:  # R590 text has "MIG Device" blocks right under the GPU; accept the XML nesting too
        views = gpu.nodes("mig_device") or gpu.nodes("mig_devices/mig_device")
    devices = []
    for view in views:
        values = _sub(ctx, view, _MIG_DEVICE, "mig_device") or {}
        devices.append(MigDevice(**values))
    return devices


def _processes(ctx: _Ctx, gpu: _View) -> list[GpuProcess]:
    procs: list[GpuProcess] = []
    if ctx.is_xml:
        for view in gpu.nodes("processes/process_info"):
            values = _sub(ctx, view, _PROCESS, "process") or {}
            if values.get("pid") is None:
                line, place = view.where("pid")
                raise ParseError(ctx.source, f"{place}: process without a pid", line=line)
            procs.append(GpuProcess(**values))
        return procs
    # Text: "Process ID : 1234" carries the pid as its value and type/name/memory as children.
    processes = gpu.node("processes")
    if processes is None:
        return procs
    for key, raw, view in processes.leaves():
        if key != "process_id":
            continue  # "GPU instance ID" / "Compute instance ID" siblings: not modelled
        values = _sub(ctx, view, _PROCESS, "process") or {}
        values["pid"] = _own_int(ctx, view, raw, "process.pid")
        procs.append(GpuProcess(**values))
    return procs


def _own_int(ctx: _Ctx, view: _View, raw: str | None, what: str) -> int:
    value = _clean(raw)
    line, place = view.where("")
    if value is None:
        raise ParseError(ctx.source, f"{place} ({what}): missing", line=line)
    try:
        return int(_int(value))
    except _BadValue as exc:
        raise ParseError(ctx.source, f"{place} ({what}): {exc}", line=line) from None


def _gpu(ctx: _Ctx, view: _View, index: int, header_bus_id: str | None) -> Gpu:
    values: dict[str, Any] = {"index": index}
    for f in _GPU_FIELDS:
        values[f.attr] = _read(ctx, view, f.xml if ctx.is_xml else f.text, f.convert, f.attr)
    if values["pci_bus_id"] is None and header_bus_id:
        # Minimal old schemas omit <pci_bus_id>; the GPU's id attribute / header has it.
        try:
            values["pci_bus_id"] = normalize_pci_bus_id(header_bus_id)
        except _BadValue as exc:
            line, place = view.where("")
            raise ParseError(ctx.source, f"{place}: {exc}", line=line) from None

    ecc = view.node("ecc_errors")
    if ecc is not None:
        values["ecc_volatile"] = _ecc_side(ctx, ecc.node("volatile"), "ecc_volatile")
        values["ecc_aggregate"] = _ecc_side(ctx, ecc.node("aggregate"), "ecc_aggregate")
    retired = _sub(ctx, view.node("retired_pages"), _RETIRED_PAGES, "retired_pages")
    values["retired_pages"] = RetiredPages(**retired) if retired else None
    remapped = _sub(ctx, view.node("remapped_rows"), _REMAPPED_ROWS, "remapped_rows")
    values["remapped_rows"] = RemappedRows(**remapped) if remapped else None
    values["mig_devices"] = _mig_devices(ctx, view)
    values["processes"] = _processes(ctx, view)
    for f in _GPU_FIELDS:
        for path in f.xml if ctx.is_xml else f.text:
            values["error"] = values.get("error") or _error_state(f.attr, view.raw(path))
    try:
        return Gpu(**values)
    except ValidationError as exc:  # a value that parses but does not fit the bounds
        line, place = view.where("")
        raise ParseError(ctx.source, f"{place}: {_fit_error(exc)}", line=line) from None


def _report(source: str, header: dict[str, Any], gpus: list[Gpu]) -> NvidiaSmiReport:
    try:
        return NvidiaSmiReport(**header, gpus=gpus)
    except ValidationError as exc:
        raise ParseError(source, _fit_error(exc)) from None


def _too_many(source: str, count: int) -> None:
    if count > MAX_GPUS:
        raise ParseError(source, f"{count} GPUs: more than any server has ({MAX_GPUS})")


# Report-level fields; paths are the same in XML and text. R610 renames the driver version
# to "KMD Version" and CUDA to "CUDA UMD Version" (the old lines stay, annotated).
_REPORT_FIELDS: dict[str, tuple[tuple[str, ...], Callable[[str], Any]]] = {
    "timestamp": (("timestamp",), _as_str),
    "driver_version": (("kmd_version", "driver_version"), _version),
    "cuda_version": (("cuda_umd_version", "cuda_version"), _version),
    "attached_gpus": (("attached_gpus",), _int),
}


def _report_header(ctx: _Ctx, root: _View) -> dict[str, Any]:
    return {
        attr: _read(ctx, root, paths, convert, attr)
        for attr, (paths, convert) in _REPORT_FIELDS.items()
    }


# ------------------------------------------------------------------------------- XML


def parse_nvidia_smi_xml(text: str, source: str = "nvidia-smi -q -x") -> NvidiaSmiReport:
    """Parse ``nvidia-smi -q -x`` output (DTD v10 .. v13) into a report of every GPU.

    GPU ``index`` is the position in the file, which is nvidia-smi's own index order (PCI bus
    order), not ``minor_number``. Malformed or truncated XML, or a root other than
    ``<nvidia_smi_log>``, raises :class:`ParseError` with line and column.

    ``attached_gpus`` is reported as printed and not checked against the number of ``<gpu>``
    elements: truncation already breaks well-formedness, and trimmed real captures exist.
    """
    if not text.strip():
        raise ParseError(source, "empty output, expected <nvidia_smi_log> XML")
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        line, column = exc.position
        raise ParseError(source, f"malformed XML: {exc}", line=line, column=column + 1) from None
    if root.tag != "nvidia_smi_log":
        raise ParseError(source, f"root element is <{root.tag}>, expected <nvidia_smi_log>", line=1)
    ctx = _Ctx(source, is_xml=True)
    top = _XmlView(root, "nvidia_smi_log")
    elems = root.findall("gpu")
    _too_many(source, len(elems))
    gpus = [
        _gpu(ctx, _XmlView(elem, f"gpu[{i}]"), i, elem.get("id")) for i, elem in enumerate(elems)
    ]
    return _report(source, _report_header(ctx, top), gpus)


# ------------------------------------------------------------------------------ text

_BANNER = re.compile(r"^=+\s*NVSMI LOG\s*=+$")
# "Key      : value" -- the key never contains ':'; a bare key ("MIG Mode", "GPU 0000:..")
# has no " : " separator. The value may itself contain ':' (timestamps, bus ids).
_KEY_VALUE = re.compile(r"^(?P<key>[^:]*?)\s*:(?:\s(?P<value>.*))?$")
_GPU_HEADER = re.compile(r"^GPU (?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])$")


def _text_tree(text: str, source: str) -> tuple[_TextNode, int]:
    """Build the indentation tree of ``-q`` text; returns (root, number of the last line)."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    numbered = [(n, line.rstrip()) for n, line in enumerate(lines, start=1) if line.strip()]
    if not numbered:
        raise ParseError(source, "empty output, expected nvidia-smi -q text")
    first_no, first = numbered[0]
    if not _BANNER.match(first.strip()):
        raise ParseError(
            source,
            f"not nvidia-smi -q output: expected the '==NVSMI LOG==' banner, got {first[:60]!r}",
            line=first_no,
        )
    root = _TextNode(key="", label="<top>", value=None, line=first_no, indent=-1)
    stack = [root]
    for number, line in numbered[1:]:
        if "\t" in line[: len(line) - len(line.lstrip())]:
            raise ParseError(source, "tab in indentation", line=number)
        indent = len(line) - len(line.lstrip(" "))
        body = line.strip()
        m = _KEY_VALUE.match(body)
        if m is not None and m["key"]:
            label, value = m["key"].strip(), (m["value"] or "").strip()
        else:
            label, value = body, None
        while stack[-1].indent >= indent:
            stack.pop()
        parent = stack[-1]
        # Siblings share one indentation; anything else is not nvidia-smi's layout.
        if parent.child_indent is None:
            parent.child_indent = indent
        elif parent.child_indent != indent:
            raise ParseError(
                source,
                f"inconsistent indentation: {indent} spaces where siblings under "
                f"'{parent.label}' have {parent.child_indent}",
                line=number,
            )
        if parent is root and value is None and not _GPU_HEADER.match(body):
            raise ParseError(source, f"unexpected line {body[:60]!r}", line=number)
        node = _TextNode(key=_norm_key(label), label=label, value=value, line=number, indent=indent)
        parent.children.append(node)
        stack.append(node)
    return root, numbered[-1][0]


def parse_nvidia_smi_text(text: str, source: str = "nvidia-smi -q") -> NvidiaSmiReport:
    """Parse the human ``nvidia-smi -q`` text format into the same report as the XML parser.

    Expects the output of a full ``nvidia-smi -q`` (no ``-i`` / ``-d`` filter): the number of
    ``GPU xxxx:xx:xx.x`` sections must equal ``Attached GPUs``. The text format has no
    closing tag, so that count is the only way to tell a complete report from one cut off
    mid-way; a mismatch raises :class:`ParseError` naming the last line. Lines that are not
    the ``==NVSMI LOG==`` layout (no banner, broken indentation) raise too.
    """
    root, last_line = _text_tree(text, source)
    ctx = _Ctx(source, is_xml=False)
    top = _TextView(root)
    header = _report_header(ctx, top)
    sections = [n for n in root.children if n.value is None]
    _too_many(source, len(sections))
    gpus = []
    for i, node in enumerate(sections):
        m = _GPU_HEADER.match(node.label)
        gpus.append(_gpu(ctx, _TextView(node), i, m["bus"] if m else None))
    attached = header["attached_gpus"]
    if attached is None:
        raise ParseError(
            source, "no 'Attached GPUs' line: not a complete nvidia-smi -q output", line=last_line
        )
    if attached != len(gpus):
        attached_line = next(n.line for n in root.children if n.key == "attached_gpus")
        raise ParseError(
            source,
            f"output ends after {len(gpus)} of {attached} GPU sections "
            f"('Attached GPUs' at line {attached_line}): truncated?",
            line=last_line,
        )
    return _report(source, header, gpus)


# ------------------------------------------------------------------------------- CSV

QUERY_GPU_FIELDS: tuple[str, ...] = (
    "index",
    "uuid",
    "serial",
    "name",
    "pci.bus_id",
    "driver_version",
    "vbios_version",
    "memory.total",
    "memory.used",
    "memory.free",
    "temperature.gpu",
    "temperature.memory",
    "power.draw",
    "enforced.power.limit",
    "utilization.gpu",
    "ecc.errors.corrected.volatile.total",
    "ecc.errors.uncorrected.volatile.total",
    "ecc.errors.corrected.aggregate.total",
    "ecc.errors.uncorrected.aggregate.total",
    "retired_pages.single_bit_ecc.count",
    "retired_pages.double_bit.count",
    "retired_pages.pending",
    "remapped_rows.correctable",
    "remapped_rows.uncorrectable",
    "remapped_rows.pending",
    "remapped_rows.failure",
    "clocks.current.sm",
    "clocks.current.memory",
    "clocks.max.sm",
    "pcie.link.gen.current",
    "pcie.link.gen.max",
    "pcie.link.width.current",
    "pcie.link.width.max",
    "fan.speed",
    "pstate",
    "persistence_mode",
    "mig.mode.current",
    "mig.mode.pending",
    "ecc.mode.current",
    "ecc.mode.pending",
)
"""The cheap periodic ``--query-gpu`` field list (canonical names from ``--help-query-gpu``,
so a ``--format=csv`` header row echoes them back). Needs R470+ (remapped_rows.*,
temperature.memory); ``power.limit`` would be the *requested* limit, so the enforced one is
queried, like the XML/text parsers report."""

# Field (canonical name or alias, as accepted by nvidia-smi) -> (target, adapter). A dotted
# target fills a sub-record. "driver_version" has no Gpu attribute: see parse_query_gpu_report.
_CSV_COLUMNS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "index": ("index", _int),
    "uuid": ("uuid", _as_str),
    "gpu_uuid": ("uuid", _as_str),
    "serial": ("serial", _as_str),
    "gpu_serial": ("serial", _as_str),
    "name": ("product_name", _as_str),
    "gpu_name": ("product_name", _as_str),
    "pci.bus_id": ("pci_bus_id", _pci),
    "gpu_bus_id": ("pci_bus_id", _pci),
    "vbios_version": ("vbios_version", _as_str),
    "memory.total": ("memory_total_mib", _mib),
    "memory.used": ("memory_used_mib", _mib),
    "memory.free": ("memory_free_mib", _mib),
    "temperature.gpu": ("temperature_c", _celsius),
    "temperature.memory": ("temperature_memory_c", _celsius),
    "power.draw": ("power_draw_w", _watts),
    "enforced.power.limit": ("power_limit_w", _watts),
    "gpu.power.current_limit": ("power_limit_w", _watts),
    "utilization.gpu": ("utilization_gpu_pct", _percent),
    "ecc.errors.corrected.volatile.total": ("ecc_volatile.correctable", _int),
    "ecc.errors.uncorrected.volatile.total": ("ecc_volatile.uncorrectable", _int),
    "ecc.errors.corrected.aggregate.total": ("ecc_aggregate.correctable", _int),
    "ecc.errors.uncorrected.aggregate.total": ("ecc_aggregate.uncorrectable", _int),
    "retired_pages.single_bit_ecc.count": ("retired_pages.single_bit", _int),
    "retired_pages.sbe": ("retired_pages.single_bit", _int),
    "retired_pages.double_bit.count": ("retired_pages.double_bit", _int),
    "retired_pages.dbe": ("retired_pages.double_bit", _int),
    "retired_pages.pending": ("retired_pages.pending", _bool),
    "remapped_rows.correctable": ("remapped_rows.correctable", _int),
    "remapped_rows.sbe": ("remapped_rows.correctable", _int),
    "remapped_rows.uncorrectable": ("remapped_rows.uncorrectable", _int),
    "remapped_rows.dbe": ("remapped_rows.uncorrectable", _int),
    "remapped_rows.pending": ("remapped_rows.pending", _bool),
    "remapped_rows.failure": ("remapped_rows.failure", _bool),
    "clocks.current.sm": ("clocks_sm_mhz", _mhz),
    "clocks.sm": ("clocks_sm_mhz", _mhz),
    "clocks.current.memory": ("clocks_mem_mhz", _mhz),
    "clocks.mem": ("clocks_mem_mhz", _mhz),
    "clocks.max.sm": ("clocks_max_sm_mhz", _mhz),
    "pcie.link.gen.current": ("pcie_gen_current", _int),
    "pcie.link.gen.max": ("pcie_gen_max", _int),
    "pcie.link.width.current": ("pcie_width_current", _link_width),
    "pcie.link.width.max": ("pcie_width_max", _link_width),
    "fan.speed": ("fan_speed_pct", _percent),
    "pstate": ("performance_state", _as_str),
    "persistence_mode": ("persistence_mode", _bool),
    "mig.mode.current": ("mig_mode_current", _bool),
    "mig.mode.pending": ("mig_mode_pending", _bool),
    "ecc.mode.current": ("ecc_mode_current", _bool),
    "ecc.mode.pending": ("ecc_mode_pending", _bool),
}
_SUB_MODELS: dict[str, type[EccErrors] | type[RetiredPages] | type[RemappedRows]] = {
    "ecc_volatile": EccErrors,
    "ecc_aggregate": EccErrors,
    "retired_pages": RetiredPages,
    "remapped_rows": RemappedRows,
}
_HEADER_UNIT = re.compile(r"\s*\[[^\]]*\]$")  # "memory.total [MiB]" -> "memory.total"
_FIELD_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")


def _csv_header(cells: list[str], fields: Sequence[str]) -> list[str] | None:
    """Field names if ``cells`` is a ``--format=csv`` header row, else ``None``."""
    names = [_HEADER_UNIT.sub("", c) for c in cells]
    if not all(_FIELD_NAME.match(n) for n in names):
        return None
    known = set(_CSV_COLUMNS) | set(fields) | {"timestamp"}
    return names if names[0] in known else None


def _csv_rows(
    text: str, fields: Sequence[str], source: str
) -> Iterator[tuple[int, dict[str, str]]]:
    columns = list(fields)
    first = True
    for number, line in enumerate(text.replace("\r\n", "\n").split("\n"), start=1):
        if not line.strip():
            continue
        # nvidia-smi never quotes; no queried value contains a comma.
        cells = [c.strip() for c in line.split(",")]
        if first:
            first = False
            header = _csv_header(cells, fields)
            if header is not None:
                columns = header  # a header names the columns, whatever was asked for
                continue
        if len(cells) != len(columns):
            raise ParseError(
                source,
                f"expected {len(columns)} columns, got {len(cells)}: {line[:80]!r}",
                line=number,
            )
        yield number, dict(zip(columns, cells, strict=True))


def _csv_gpu(row: dict[str, str], position: int, number: int, source: str) -> Gpu:
    flat: dict[str, Any] = {}
    for name, cell in row.items():
        target = _CSV_COLUMNS.get(name)
        if target is None:
            continue  # a field we do not model (the exporter bundles query ~200)
        attr, convert = target
        flat["error"] = flat.get("error") or _error_state(attr, cell)
        value = _clean(cell)
        if value is None:
            flat.setdefault(attr, None)
            continue
        try:
            flat[attr] = convert(value)
        except _BadValue as exc:
            raise ParseError(source, f"column {name!r}: {exc}", line=number) from None
    values: dict[str, Any] = {}
    subs: dict[str, dict[str, Any]] = {}
    for attr, value in flat.items():
        if "." in attr:
            outer, inner = attr.split(".", 1)
            subs.setdefault(outer, {})[inner] = value
        else:
            values[attr] = value
    for outer, sub in subs.items():
        has_value = any(v is not None for v in sub.values())
        values[outer] = _SUB_MODELS[outer](**sub) if has_value else None
    if values.get("index") is None:
        values["index"] = position
    try:
        return Gpu(**values)
    except ValidationError as exc:  # a value that parses but does not fit the bounds
        raise ParseError(source, _fit_error(exc), line=number) from None


def parse_query_gpu_csv(
    text: str,
    fields: Sequence[str] = QUERY_GPU_FIELDS,
    source: str = "nvidia-smi --query-gpu",
) -> list[Gpu]:
    """Parse ``nvidia-smi --query-gpu=<fields> --format=csv[,noheader][,nounits]`` output.

    Without a header row the columns are ``fields`` in order; a header row (``--format=csv``)
    names the columns itself and ``fields`` is then ignored, so any superset of fields can be
    read. Values with units (``81559 MiB``) and without are both accepted; unknown fields are
    skipped. A row with the wrong number of columns raises :class:`ParseError` with its line.
    """
    return [
        _csv_gpu(row, position, number, source)
        for position, (number, row) in enumerate(_csv_rows(text, fields, source))
    ]


def parse_query_gpu_report(
    text: str,
    fields: Sequence[str] = QUERY_GPU_FIELDS,
    source: str = "nvidia-smi --query-gpu",
) -> NvidiaSmiReport:
    """Like :func:`parse_query_gpu_csv`, wrapped in a report that keeps ``driver_version``."""
    rows = list(_csv_rows(text, fields, source))
    _too_many(source, len(rows))
    gpus = [_csv_gpu(row, i, number, source) for i, (number, row) in enumerate(rows)]
    drivers = {
        _version(v) for _, row in rows if (v := _clean(row.get("driver_version"))) is not None
    }
    if len(drivers) > 1:
        raise ParseError(source, f"rows disagree on driver_version: {sorted(drivers)}")
    header = {"driver_version": drivers.pop() if drivers else None, "attached_gpus": len(gpus)}
    return _report(source, header, gpus)
