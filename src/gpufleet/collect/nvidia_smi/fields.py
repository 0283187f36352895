"""The declarative table :data:`_GPU_FIELDS` (the sub-tables are in
:mod:`gpufleet.collect.nvidia_smi.subtables`): per Gpu attribute, the candidate paths in the
XML and text trees and the adapter; and the GPU extraction both the XML and the text parser
share."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from gpufleet.collect.nvidia_smi.common import (
    _MEMOS,
    _UNSEEN,
    _as_str,
    _BadValue,
    _bool,
    _celsius,
    _clean,
    _error_state,
    _fit_error,
    _int,
    _link_width,
    _memo,
    _mhz,
    _mib,
    _pci,
    _percent,
    _version,
    _View,
    _watts,
    normalize_pci_bus_id,
)
from gpufleet.collect.nvidia_smi.subtables import (
    _CLOCK_EVENT_REASONS,
    _FABRIC,
    _MIG_DEVICE,
    _PLATFORM,
    _PROCESS,
    _REMAPPED_ROWS,
    _RETIRED_PAGES,
    _TEMPERATURE_THRESHOLDS,
    _SubTable,
)
from gpufleet.domain.facts import (
    MAX_GPUS,
    ClockEventReasons,
    EccErrors,
    Gpu,
    GpuFabric,
    GpuPlatform,
    GpuProcess,
    MigDevice,
    NvidiaSmiReport,
    RemappedRows,
    RetiredPages,
    TemperatureThresholds,
)
from gpufleet.errors import ParseError

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
    _Field("minor_number", ("minor_number",), ("minor_number",), _int),
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
    _Field("addressing_mode", ("addressing_mode",), ("addressing_mode",), _as_str),
    # Health: the other power limits (R530+ under gpu_power_readings; "power_limit" was the
    # requested one in the older power_readings), compute mode, memory-controller load and
    # the R590 ECC repair flags (under ECC Errors).
    _Field(
        "power_limit_requested_w",
        ("gpu_power_readings/requested_power_limit", "power_readings/power_limit"),
        (
            "gpu_power_readings/requested_power_limit",
            "gpu_power_readings/gpu_ceiling_power_limit/requested_power_limit",  # R610
            "power_readings/power_limit",
        ),
        _watts,
    ),
    _Field(
        "power_limit_default_w",
        ("gpu_power_readings/default_power_limit", "power_readings/default_power_limit"),
        (
            "gpu_power_readings/default_power_limit",
            "gpu_power_readings/gpu_ceiling_power_limit/default_power_limit",  # R610
            "power_readings/default_power_limit",
        ),
        _watts,
    ),
    _Field(
        "power_limit_min_w",
        ("gpu_power_readings/min_power_limit", "power_readings/min_power_limit"),
        ("gpu_power_readings/min_power_limit", "power_readings/min_power_limit"),
        _watts,
    ),
    _Field(
        "power_limit_max_w",
        ("gpu_power_readings/max_power_limit", "power_readings/max_power_limit"),
        ("gpu_power_readings/max_power_limit", "power_readings/max_power_limit"),
        _watts,
    ),
    _Field("compute_mode", ("compute_mode",), ("compute_mode",), _as_str),
    _Field(
        "utilization_memory_pct", ("utilization/memory_util",), ("utilization/memory",), _percent
    ),
    _Field(
        "ecc_channel_repair_pending",
        ("ecc_errors/channel_repair_pending",),
        ("ecc_errors/channel_repair_pending",),
        _bool,
    ),
    _Field(
        "ecc_tpc_repair_pending",
        ("ecc_errors/tpc_repair_pending",),
        ("ecc_errors/tpc_repair_pending",),
        _bool,
    ),
    _Field(
        "ecc_unrepairable_memory",
        ("ecc_errors/unrepairable_memory",),
        ("ecc_errors/unrepairable_memory",),
        _bool,
    ),
)

# ------------------------------------------------------------------ shared GPU extraction


@dataclass(frozen=True)
class _Ctx:
    source: str
    is_xml: bool


def _read(
    ctx: _Ctx,
    view: _View,
    paths: Sequence[str],
    convert: Callable[[str], Any],
    what: str,
    attr: str = "",
) -> Any:
    """First present, non-missing value among ``paths``, converted; ParseError if unreadable
    (naming ``what``, or ``what.attr`` when ``attr`` is given)."""
    memo = _MEMOS.get(convert)
    if memo is None:
        memo = _memo(convert)
    for path in paths:
        raw = view.raw(path)
        if raw is None:
            continue
        known = memo.get(raw, _UNSEEN)
        if known is not _UNSEEN:
            if known is None:
                continue
            return known
        value = _clean(raw)
        if value is None:
            memo[raw] = None
            continue
        try:
            result = memo[raw] = convert(value)
        except _BadValue as exc:
            line, place = view.where(path)
            name = f"{what}.{attr}" if attr else what
            raise ParseError(ctx.source, f"{place} ({name}): {exc}", line=line) from None
        return result
    return None


def _sub(ctx: _Ctx, view: _View | None, table: _SubTable, what: str) -> dict[str, Any] | None:
    """Read a sub-record; ``None`` when its node is absent or every value is missing."""
    if view is None:
        return None
    values = {
        attr: _read(ctx, view, xml if ctx.is_xml else text, conv, what, attr)
        for attr, (xml, text, conv) in table.items()
    }
    return values if any(v is not None for v in values.values()) else None


#: The value memo of :func:`_int` (ECC counts).
_INT_MEMO: dict[str, Any] = _memo(_int)


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
    leaves = view.leaves()
    # What view.raw(key) answers (the first child called key), for the memo shortcut below.
    first: dict[str, str] = {}
    for key, raw, _ in leaves:
        if key not in first:
            first[key] = raw if raw is not None else ""
    memo = _INT_MEMO
    for key, raw, child in leaves:
        if key in ("single_bit", "double_bit"):
            bucket = correctable if key == "single_bit" else uncorrectable
            total = _read(ctx, child, ("total",), _int, f"{what}.{key}.total")
            if total is not None:
                bucket.append(total)
            else:  # no total printed: add up the locations that have a count
                for loc, loc_raw, _ in child.leaves():
                    if loc != "total" and _clean(loc_raw) is not None:
                        count = _read(ctx, child, (loc,), _int, f"{what}.{key}.{loc}")
                        if count is not None:  # a repeated name whose first says no value
                            bucket.append(count)
        elif "uncorrectable" in key or "correctable" in key:
            if _clean(raw) is None:
                continue
            known = memo.get(first[key])  # a count read before: what _read would return
            value = known if known is not None else _read(ctx, view, (key,), _int, f"{what}.{key}")
            if value is not None:  # the first child of a repeated name said no value
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


#: Each Gpu field with the value memo of its adapter.
_GPU_PLAN: tuple[tuple[_Field, dict[str, object]], ...] = tuple(
    (f, _memo(f.convert)) for f in _GPU_FIELDS
)


def _gpu(ctx: _Ctx, view: _View, index: int, header_bus_id: str | None) -> Gpu:
    values: dict[str, Any] = {"index": index}
    error: str | None = None
    # One read of each path serves both the value (the first present one, converted, as
    # _read does) and the error state (every path is looked at for a "GPU is lost").
    raw_of = view.raw
    is_xml = ctx.is_xml
    for f, memo in _GPU_PLAN:
        value: Any = None
        found = False
        for path in f.xml if is_xml else f.text:
            raw = raw_of(path)
            if raw is None:
                continue
            if error is None:
                error = _error_state(f.attr, raw)
            if found:
                continue
            # memo: see _read; the error state above is read from every raw value still
            known = memo.get(raw, _UNSEEN)
            if known is not _UNSEEN:
                if known is not None:
                    found = True
                    value = known
                continue
            if (clean := _clean(raw)) is None:
                memo[raw] = None
                continue
            found = True
            try:
                value = memo[raw] = f.convert(clean)
            except _BadValue as exc:
                line, place = view.where(path)
                raise ParseError(ctx.source, f"{place} ({f.attr}): {exc}", line=line) from None
        values[f.attr] = value
    if values["pci_bus_id"] is None and header_bus_id:
        # Minimal old schemas omit <pci_bus_id>; the GPU's id attribute / header has it.
        try:
            values["pci_bus_id"] = normalize_pci_bus_id(header_bus_id)
        except _BadValue as exc:
            line, place = view.where("")
            raise ParseError(ctx.source, f"{place}: {exc}", line=line) from None

    # The sub-records are bounded too (a negative ECC count or clock-event time, a process
    # without a name ...): they are built inside the try, so they refuse as the Gpu does.
    try:
        ecc = view.node("ecc_errors")
        if ecc is not None:
            values["ecc_volatile"] = _ecc_side(ctx, ecc.node("volatile"), "ecc_volatile")
            values["ecc_aggregate"] = _ecc_side(ctx, ecc.node("aggregate"), "ecc_aggregate")
        retired = _sub(ctx, view.node("retired_pages"), _RETIRED_PAGES, "retired_pages")
        values["retired_pages"] = RetiredPages(**retired) if retired else None
        remapped = _sub(ctx, view.node("remapped_rows"), _REMAPPED_ROWS, "remapped_rows")
        values["remapped_rows"] = RemappedRows(**remapped) if remapped else None
        reasons = _sub(ctx, view, _CLOCK_EVENT_REASONS, "clock_event_reasons")
        values["clock_event_reasons"] = ClockEventReasons(**reasons) if reasons else None
        thresholds = _sub(
            ctx, view.node("temperature"), _TEMPERATURE_THRESHOLDS, "temperature_thresholds"
        )
        values["temperature_thresholds"] = (
            TemperatureThresholds(**thresholds) if thresholds else None
        )
        fabric = _sub(ctx, view.node("fabric"), _FABRIC, "fabric")
        values["fabric"] = GpuFabric(**fabric) if fabric else None
        node = view.node("platformInfo" if is_xml else "platform_info")
        platform = _sub(ctx, node, _PLATFORM, "platform")
        values["platform"] = GpuPlatform(**platform) if platform else None
        values["mig_devices"] = _mig_devices(ctx, view)
        values["processes"] = _processes(ctx, view)
        values["error"] = error
        return Gpu(**values)
    except ValidationError as exc:  # a value that parses but does not fit the bounds
        line, place = view.where("")
        record = "" if exc.title == "Gpu" else f"{exc.title} "  # a sub-record: name it
        raise ParseError(ctx.source, f"{place}: {record}{_fit_error(exc)}", line=line) from None


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
