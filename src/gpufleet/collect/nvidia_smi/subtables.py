"""The nvidia-smi sub-records' declarative tables (moved out of
:mod:`gpufleet.collect.nvidia_smi.fields`): per sub-record attribute, the candidate paths in
the XML and text trees, relative to the sub-record's own node, and the adapter."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpufleet.collect.nvidia_smi.common import (
    _as_str,
    _bool,
    _celsius,
    _int,
    _mib,
    _microseconds,
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
    "memory_used_mib": (
        ("fb_memory_usage/used",),
        ("shared_fb_memory_usage/used", "fb_memory_usage/used"),
        _mib,
    ),
    "memory_free_mib": (
        ("fb_memory_usage/free",),
        ("shared_fb_memory_usage/free", "fb_memory_usage/free"),
        _mib,
    ),
    "sm_count": (
        ("device_attributes/shared/multiprocessor_count",),
        ("device_attributes/shared/multiprocessor_count",),
        _int,
    ),
}


def _reasons(xml: str, text: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Paths of one clocks event reason: "clocks_event_reasons/clocks_event_reason_<x>"
    (R535+) or the older "clocks_throttle_reasons/clocks_throttle_reason_<x>" in XML;
    "<x>" under "Clocks Event Reasons" / "Clocks Throttle Reasons" in text."""
    return (
        (
            f"clocks_event_reasons/clocks_event_reason_{xml}",
            f"clocks_throttle_reasons/clocks_throttle_reason_{xml}",
        ),
        (f"clocks_event_reasons/{text}", f"clocks_throttle_reasons/{text}"),
    )


def _counter(xml: str, text: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    return (
        (f"clocks_event_reasons_counters/clocks_event_reasons_counters_{xml}",),
        (f"clocks_event_reasons_counters/{text}",),
    )


# Relative to the GPU node (the reasons and their counters are two sibling blocks). In text,
# the two HW slowdown causes are indented under "HW Slowdown".
_CLOCK_EVENT_REASONS: _SubTable = {
    attr: (*paths, conv)
    for attr, paths, conv in (
        ("gpu_idle", _reasons("gpu_idle", "idle"), _bool),
        (
            "applications_clocks_setting",
            _reasons("applications_clocks_setting", "applications_clocks_setting"),
            _bool,
        ),
        ("sw_power_cap", _reasons("sw_power_cap", "sw_power_cap"), _bool),
        ("hw_slowdown", _reasons("hw_slowdown", "hw_slowdown"), _bool),
        (
            "hw_thermal_slowdown",
            _reasons("hw_thermal_slowdown", "hw_slowdown/hw_thermal_slowdown"),
            _bool,
        ),
        (
            "hw_power_brake_slowdown",
            _reasons("hw_power_brake_slowdown", "hw_slowdown/hw_power_brake_slowdown"),
            _bool,
        ),
        ("sw_thermal_slowdown", _reasons("sw_thermal_slowdown", "sw_thermal_slowdown"), _bool),
        ("sync_boost", _reasons("sync_boost", "sync_boost"), _bool),
        (
            "display_clocks_setting",
            _reasons("display_clocks_setting", "display_clock_setting"),
            _bool,
        ),
        ("sw_power_cap_us", _counter("sw_power_cap", "sw_power_capping"), _microseconds),
        ("sync_boost_us", _counter("sync_boost", "sync_boost"), _microseconds),
        (
            "sw_thermal_slowdown_us",
            _counter("sw_therm_slowdown", "sw_thermal_slowdown"),
            _microseconds,
        ),
        (
            "hw_thermal_slowdown_us",
            _counter("hw_therm_slowdown", "hw_thermal_slowdown"),
            _microseconds,
        ),
        ("hw_power_brake_us", _counter("hw_power_brake", "hw_power_braking"), _microseconds),
    )
}
# Relative to the "temperature" node. v12 XML names absolute thresholds *_threshold, v13 the
# T.Limit-relative ones *_tlimit_threshold; text says "T.Limit" in the label, and from R610
# on ends the target and the T.Limit threshold labels with " Specification" ("GPU Shutdown
# T.Limit Temp Specification", "GPU Target Temperature Specification") and calls the
# current margin "GPU Current T.Limit Temp".
_TEMPERATURE_THRESHOLDS: _SubTable = {
    "shutdown_c": (("gpu_temp_max_threshold",), ("gpu_shutdown_temp",), _celsius),
    "slowdown_c": (("gpu_temp_slow_threshold",), ("gpu_slowdown_temp",), _celsius),
    "max_operating_c": (("gpu_temp_max_gpu_threshold",), ("gpu_max_operating_temp",), _celsius),
    "memory_max_c": (("gpu_temp_max_mem_threshold",), ("memory_max_operating_temp",), _celsius),
    "target_c": (
        ("gpu_target_temperature",),
        ("gpu_target_temperature", "gpu_target_temperature_specification"),
        _celsius,
    ),
    "tlimit_c": (
        ("gpu_temp_tlimit",),
        ("gpu_t_limit_temp", "gpu_current_t_limit_temp"),
        _celsius,
    ),
    "shutdown_tlimit_c": (
        ("gpu_temp_max_tlimit_threshold",),
        ("gpu_shutdown_t_limit_temp", "gpu_shutdown_t_limit_temp_specification"),
        _celsius,
    ),
    "slowdown_tlimit_c": (
        ("gpu_temp_slow_tlimit_threshold",),
        ("gpu_slowdown_t_limit_temp", "gpu_slowdown_t_limit_temp_specification"),
        _celsius,
    ),
    "max_operating_tlimit_c": (
        ("gpu_temp_max_gpu_tlimit_threshold",),
        ("gpu_max_operating_t_limit_temp", "gpu_max_operating_t_limit_temp_specification"),
        _celsius,
    ),
    "memory_max_tlimit_c": (
        ("gpu_temp_max_mem_tlimit_threshold",),
        ("memory_max_operating_t_limit_temp",),
        _celsius,
    ),
}
# Relative to the "fabric" node.
_FABRIC: _SubTable = {
    "state": (("state",), ("state",), _as_str),
    "status": (("status",), ("status",), _as_str),
    "clique_id": (("cliqueId",), ("cliqueid",), _as_str),
    "cluster_uuid": (("clusterUuid",), ("clusteruuid",), _as_str),
    "health_summary": (("health/summary",), ("health/summary",), _as_str),
    "bandwidth": (("health/bandwidth",), ("health/bandwidth",), _as_str),
    "route_recovery_in_progress": (
        ("health/route_recovery_in_progress",),
        ("health/route_recovery_in_progress",),
        _bool,
    ),
    "route_unhealthy": (("health/route_unhealthy",), ("health/route_unhealthy",), _bool),
    "access_timeout_recovery": (
        ("health/access_timeout_recovery",),
        ("health/access_timeout_recovery",),
        _bool,
    ),
    "incorrect_configuration": (
        ("health/incorrect_configuration",),
        ("health/incorrect_configuration",),
        _as_str,
    ),
    # Printed in R580 XML only among our captures (as N/A); the text label is not known from
    # a capture, so the text report gets no path rather than a guessed one.
    "partition_assigned": (("health/partition_assigned",), (), _as_str),
}
# Relative to the "platformInfo" (XML) / "Platform Info" (text) node.
_PLATFORM: _SubTable = {
    "chassis_serial": (("chassis_serial_number",), ("chassis_serial_number",), _as_str),
    "slot_number": (("slot_number",), ("slot_number",), _int),
    "tray_index": (("tray_index",), ("tray_index",), _int),
    "host_id": (("host_id",), ("host_id",), _int),
    "peer_type": (("peer_type",), ("peer_type",), _as_str),
    "module_id": (("module_id",), ("module_id",), _int),
    "gpu_fabric_guid": (("gpu_fabric_guid",), ("gpu_fabric_guid",), _as_str),
}
_PROCESS: _SubTable = {
    "pid": (("pid",), (), _int),  # text: the pid is the value of the "Process ID" node
    "type": (("type",), ("type",), _as_str),
    "name": (("process_name",), ("name",), _as_str),
    "used_memory_mib": (("used_memory",), ("used_gpu_memory",), _mib),
}
