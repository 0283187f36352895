"""``nvidia-smi --query-gpu=... --format=csv``."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from pydantic import ValidationError

from gpufleet.collect.nvidia_smi.common import (
    _as_str,
    _BadValue,
    _bool,
    _celsius,
    _clean,
    _error_state,
    _fit_error,
    _int,
    _link_width,
    _mhz,
    _mib,
    _microseconds,
    _pci,
    _percent,
    _version,
    _watts,
)
from gpufleet.collect.nvidia_smi.fields import _report, _too_many
from gpufleet.domain.facts import (
    ClockEventReasons,
    EccErrors,
    Gpu,
    GpuFabric,
    GpuPlatform,
    NvidiaSmiReport,
    RemappedRows,
    RetiredPages,
    TemperatureThresholds,
)
from gpufleet.errors import ParseError

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
    "power.limit",
    "power.default_limit",
    "power.min_limit",
    "power.max_limit",
    "temperature.gpu.tlimit",
    "compute_mode",
    "utilization.memory",
    "clocks_event_reasons.gpu_idle",
    "clocks_event_reasons.applications_clocks_setting",
    "clocks_event_reasons.sw_power_cap",
    "clocks_event_reasons.hw_slowdown",
    "clocks_event_reasons.hw_thermal_slowdown",
    "clocks_event_reasons.hw_power_brake_slowdown",
    "clocks_event_reasons.sw_thermal_slowdown",
    "clocks_event_reasons.sync_boost",
    "clocks_event_reasons_counters.sw_power_cap",
    "clocks_event_reasons_counters.sync_boost",
    "clocks_event_reasons_counters.sw_thermal_slowdown",
    "clocks_event_reasons_counters.hw_thermal_slowdown",
    "clocks_event_reasons_counters.hw_power_brake_slowdown",
    "fabric.state",
    "fabric.status",
    "fabric.cliqueId",
    "fabric.clusterUuid",
    "fabric.health.summary",
    "fabric.health.bandwidth",
    "fabric.health.route_recovery_in_progress",
    "fabric.health.route_unhealthy",
    "fabric.health.access_timeout_recovery",
    "fabric.health.incorrect_configuration",
    "platform.chassis_serial_number",
    "platform.slot_number",
    "platform.tray_index",
    "platform.host_id",
    "platform.peer_type",
    "platform.module_id",
    "platform.gpu_fabric_guid",
    "addressing_mode",
)
"""The cheap periodic ``--query-gpu`` field list (canonical names from ``--help-query-gpu``,
so a ``--format=csv`` header row echoes them back). Needs R470+ (remapped_rows.*,
temperature.memory; R535+ for the clocks event reasons, R550+ for fabric.*, and the fabric
health, platform and addressing-mode fields that driver 590's ``--help-query-gpu`` lists;
``fabric.health.partition_assigned`` is read when a header names it, not asked for: not every
590 lists it);
``power_limit_w`` is the *enforced* limit, like the XML/text parsers report, and
``power.limit`` (the requested one) fills ``power_limit_requested_w``."""

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
    # Health (issue 10): the other power limits, thresholds, mode, reasons and fabric.
    "power.limit": ("power_limit_requested_w", _watts),
    "power.default_limit": ("power_limit_default_w", _watts),
    "power.min_limit": ("power_limit_min_w", _watts),
    "power.max_limit": ("power_limit_max_w", _watts),
    "temperature.gpu.tlimit": ("temperature_thresholds.tlimit_c", _celsius),
    "compute_mode": ("compute_mode", _as_str),
    "utilization.memory": ("utilization_memory_pct", _percent),
    **{
        f"{prefix}.{reason}": (f"clock_event_reasons.{reason}", _bool)
        for prefix in ("clocks_event_reasons", "clocks_throttle_reasons")
        for reason in (
            "gpu_idle",
            "applications_clocks_setting",
            "sw_power_cap",
            "hw_slowdown",
            "hw_thermal_slowdown",
            "hw_power_brake_slowdown",
            "sw_thermal_slowdown",
            "sync_boost",
            "display_clocks_setting",
        )
    },
    **{
        f"clocks_event_reasons_counters.{name}": (f"clock_event_reasons.{attr}", _microseconds)
        for name, attr in (
            ("sw_power_cap", "sw_power_cap_us"),
            ("sync_boost", "sync_boost_us"),
            ("sw_thermal_slowdown", "sw_thermal_slowdown_us"),
            ("hw_thermal_slowdown", "hw_thermal_slowdown_us"),
            ("hw_power_brake_slowdown", "hw_power_brake_us"),
        )
    },
    "fabric.state": ("fabric.state", _as_str),
    "fabric.status": ("fabric.status", _as_str),
    "fabric.cliqueId": ("fabric.clique_id", _as_str),
    "fabric.clusterUuid": ("fabric.cluster_uuid", _as_str),
    "fabric.health.summary": ("fabric.health_summary", _as_str),
    # Rack-scale facts (issue 27): fabric health, platform info, addressing mode.
    "fabric.health.bandwidth": ("fabric.bandwidth", _as_str),
    "fabric.health.route_recovery_in_progress": ("fabric.route_recovery_in_progress", _bool),
    "fabric.health.route_unhealthy": ("fabric.route_unhealthy", _bool),
    "fabric.health.access_timeout_recovery": ("fabric.access_timeout_recovery", _bool),
    "fabric.health.incorrect_configuration": ("fabric.incorrect_configuration", _as_str),
    "fabric.health.partition_assigned": ("fabric.partition_assigned", _as_str),
    "platform.chassis_serial_number": ("platform.chassis_serial", _as_str),
    "platform.slot_number": ("platform.slot_number", _int),
    "platform.tray_index": ("platform.tray_index", _int),
    "platform.host_id": ("platform.host_id", _int),
    "platform.peer_type": ("platform.peer_type", _as_str),
    "platform.module_id": ("platform.module_id", _int),
    "platform.gpu_fabric_guid": ("platform.gpu_fabric_guid", _as_str),
    "addressing_mode": ("addressing_mode", _as_str),
}
_SUB_MODELS: dict[
    str,
    type[EccErrors]
    | type[RetiredPages]
    | type[RemappedRows]
    | type[ClockEventReasons]
    | type[TemperatureThresholds]
    | type[GpuFabric]
    | type[GpuPlatform],
] = {
    "ecc_volatile": EccErrors,
    "ecc_aggregate": EccErrors,
    "retired_pages": RetiredPages,
    "remapped_rows": RemappedRows,
    "clock_event_reasons": ClockEventReasons,
    "temperature_thresholds": TemperatureThresholds,
    "fabric": GpuFabric,
    "platform": GpuPlatform,
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
        try:
            values[outer] = _SUB_MODELS[outer](**sub) if has_value else None
        except ValidationError as exc:  # e.g. a negative ECC count
            raise ParseError(source, f"{outer}.{_fit_error(exc)}", line=number) from None
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
