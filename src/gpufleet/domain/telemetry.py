"""Instantaneous readings in a facts document (issue 8, "history that does not explode").

A collection reads, beside what a host *has* (identity, configuration, health history), what
it is doing at that second: temperatures, power draw, utilization, current clocks, fan speed,
memory in use, the performance state, the clock event reasons active now (and their
microsecond counters), the processes on each GPU, the PCIe link's current generation and
width (it trains down at idle), nvidia-smi's own timestamp, the kernel-log line an Xid sits
on (it moves as the ring buffer wraps). On a real fleet these differ between any two
collections; a snapshot per collection would store the same facts again every time.

:data:`READINGS` declares them, as paths in a facts document (``HostFacts.model_dump(
mode="json")``; ``[]`` is every element of a list), and :func:`stable_view` gives the document
without them: what the content hash of a snapshot covers (``service/collect.facts_digest``).
Everything else stays in it: driver/CUDA/VBIOS/firmware versions, UUIDs and serials, memory
totals, ECC modes and counters, retired pages and row remapping, repair flags, Xid events
(code, time, message), fabric state, NVLink and NIC port states and rates, MIG and
persistence mode, power limits, temperature thresholds, compute mode, error counters of
other vendors' accelerators, links, health.

Pure: no I/O, no store; the document is not changed (the parts on a declared path are copied).
"""

from __future__ import annotations

from typing import Any

#: The readings of every GPU of ``nvidia-smi`` (``Gpu`` fields).
GPU_READINGS: tuple[str, ...] = (
    "temperature_c",
    "temperature_memory_c",
    "power_draw_w",
    "utilization_gpu_pct",
    "utilization_memory_pct",
    "clocks_sm_mhz",
    "clocks_mem_mhz",
    "fan_speed_pct",
    "memory_used_mib",
    "memory_free_mib",
    "performance_state",
    "clock_event_reasons",  # the reasons active now and their time-spent counters
    "processes",
    "pcie_gen_current",
    "pcie_width_current",
    "temperature_thresholds.tlimit_c",  # current headroom to T.Limit, not a threshold
    "mig_devices[].memory_used_mib",
    "mig_devices[].memory_free_mib",
)

#: The readings of another vendor's accelerator (``Accelerator`` fields).
ACCELERATOR_READINGS: tuple[str, ...] = ("temperature_c", "power_w", "memory_used_mib")

#: Every reading of a facts document, as a path (``.`` between keys, ``[]`` every element).
READINGS: tuple[str, ...] = (
    "collected_at",
    "nvidia_smi.timestamp",
    *(f"nvidia_smi.gpus[].{p}" for p in GPU_READINGS),
    *(f"accelerators[].{p}" for p in ACCELERATOR_READINGS),
    "xids[].line",  # where the Xid sits in the captured log; the event is kept
    "xid_unreadable[].line",
)

_EACH = "[]"
# A path tree: key -> subtree, or None for a key dropped whole.
_Tree = dict[str, "_Tree | None"]


def _tree(paths: tuple[str, ...]) -> _Tree:
    root: _Tree = {}
    for path in paths:
        steps: list[str] = []
        for key in path.split("."):
            if key.endswith(_EACH):
                steps += [key[: -len(_EACH)], _EACH]
            else:
                steps.append(key)
        node = root
        for step in steps[:-1]:
            child = node.setdefault(step, {})
            if child is None:  # a parent dropped whole already covers this path
                break
            node = child
        else:
            node[steps[-1]] = None
    return root


_READINGS_TREE = _tree(READINGS)


def _without(value: Any, tree: _Tree) -> Any:
    if isinstance(value, list):
        sub = tree.get(_EACH)
        return [_without(v, sub) for v in value] if sub else value
    if not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    for key, v in value.items():
        if key not in tree:
            out[key] = v
            continue
        sub = tree[key]
        if sub is not None:
            out[key] = _without(v, sub)
    return out


def stable_view(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` (a facts document, ``model_dump(mode="json")``) without its readings
    (:data:`READINGS`, ``collected_at`` included): equal views, same facts apart from what
    moves by itself. ``doc`` is left as it is."""
    out: dict[str, Any] = _without(doc, _READINGS_TREE)
    return out
