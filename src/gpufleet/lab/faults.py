"""Lab faults: the kinds a lab host can carry and the check that a model can show them."""

from __future__ import annotations

import re
from collections.abc import Sequence

from gpufleet.domain.vendors import plugin
from gpufleet.errors import ConfigError
from gpufleet.lab.catalogue import model_spec
from gpufleet.lab.vendors import LabVendor, lab_vendor, lab_vendors

DEFAULT_DRIFT_DRIVER = "535.154.05"
_ALT_DRIFT_DRIVER = "550.90.07"  # used when a host already runs DEFAULT_DRIFT_DRIVER

#: Faults the SSH lab / sim transport act on; the section renderer ignores them.
TRANSPORT_FAULTS: frozenset[str] = frozenset(
    {"unreachable", "hang", "wrong-key", "host-key-changed", "tray-missing", "sshd-down"}
)
#: Faults a boot ends (issue 29 item 7): ``sshd-down`` refuses SSH like ``unreachable`` until
#: the machine is power-cycled through its lab BMC (``lab create --bmc``, lab/bmc.py).
BOOT_FAULTS: frozenset[str] = frozenset({"sshd-down"})
#: Faults of a rack's compute tray (lab/racks.py; issue 27): the tray's fabric not started,
#: completed with Insufficient Resources, a route unhealthy. ``tray-missing`` (the tray is
#: not there) is a transport fault above.
RACK_FAULTS: frozenset[str] = frozenset(
    {"fabric-not-started", "fabric-insufficient-resources", "fabric-route-unhealthy"}
)
#: Lab models whose capture reports a multi-node NVLink fabric and a rack position.
RACK_TRAY_MODELS: frozenset[str] = frozenset({"gb200-4x"})
#: What a lessee may leave behind (reclaim checks, domain/reclaim.py): a compute process on a
#: GPU, a mount under a data path, a process and a crontab of a lessee's user.
RECLAIM_FAULTS: frozenset[str] = frozenset(
    {"gpu-process", "stale-mount", "lessee-process", "lessee-crontab"}
)
#: Faults only the inspection probe shows (lab/probe.py; issue 10): a GPU over temperature,
#: HW power brake, a straggler GPU (each ``KIND[:<gpu index>]``), IB ``link_downed`` raised
#: (``ib-link-downed[:N]``), a full root file system. The collection's sections ignore them.
#: Issue 24 (no data is a fault): the GPU query failing as a host's nvidia-smi does when a
#: GPU cannot be reached (``gpu-handle-error``, rc 15), when the driver is not loaded
#: (``driver-not-loaded``, rc 9), when it hangs past the probe's ``timeout`` (``probe-timeout``,
#: rc 124), and cut kernel-log Xid lines (``xid-cut``).
PROBE_FAULTS: frozenset[str] = frozenset(
    {
        "hot",
        "power-brake",
        "straggler",
        "ib-link-downed",
        "disk-full",
        "gpu-handle-error",
        "driver-not-loaded",
        "probe-timeout",
        "xid-cut",
    }
)
#: What ``gpufleet remediate`` meets on the host (lab/remedy.py; issue 10): a GPU reset that
#: fails (nvidia-smi -r exits non-zero).
REMEDY_FAULTS: frozenset[str] = frozenset({"reset-fails"})
#: The fault kinds of the lab's own (NVIDIA) hosts and of every host's transport; ``xid`` is
#: written ``xid:<code>[:<gpu index>]``, ``driver-drift`` may carry a version
#: (``driver-drift:550.90.07``), ``ib-down``/``ib-polling`` a CA name. The vendors' lab models
#: add their own (:func:`fault_kinds`).
BASE_FAULT_KINDS: tuple[str, ...] = (
    "gpu-missing",
    "driver-drift",
    "ecc-uncorrectable",
    "remap-pending",
    "remap-failure",
    "ib-down",
    "ib-polling",
    "xid",
    "nvidia-smi-missing",
    "garbage",
    "truncated",
    *sorted(TRANSPORT_FAULTS),
    *sorted(RECLAIM_FAULTS),
    *sorted(PROBE_FAULTS),
    *sorted(REMEDY_FAULTS),
    *sorted(RACK_FAULTS),
)


def _vendor_faults() -> dict[str, LabVendor]:
    """Fault kind -> the lab vendor whose hosts show it, for kinds only vendors' hosts show
    (issue 15: ``lab/vendors``, e.g. Ascend's ``npu-alarm``)."""
    return {
        kind: lab for lab in lab_vendors() for kind in lab.faults if kind not in BASE_FAULT_KINDS
    }


def fault_kinds() -> tuple[str, ...]:
    """Every fault kind: :data:`BASE_FAULT_KINDS`, then the vendors' own (sorted)."""
    return BASE_FAULT_KINDS + tuple(sorted(_vendor_faults()))


# --------------------------------------------------------------------------- faults


def _split_fault(fault: str) -> tuple[str, str | None]:
    kind, _, arg = fault.partition(":")
    return kind, (arg or None)


def validate_faults(model: str, faults: Sequence[str]) -> None:
    """Raise :class:`ConfigError` for an unknown fault or one the model cannot show."""
    spec = model_spec(model)
    vendor_kinds = _vendor_faults()
    lab = lab_vendor(spec.vendor)  # None: the lab's own NVIDIA hosts
    for fault in faults:
        kind, arg = _split_fault(fault)
        if kind not in BASE_FAULT_KINDS and kind not in vendor_kinds:
            known = ", ".join(fault_kinds())
            raise ConfigError(f"unknown lab fault {fault!r} (known: {known})")
        why: str | None = None
        if spec.role != "gpu" and kind not in TRANSPORT_FAULTS:
            raise ConfigError(
                f"lab fault {fault!r} does not apply to a {model} host: it has no accelerator"
            )
        if kind in vendor_kinds or lab is not None:
            if kind in TRANSPORT_FAULTS:
                pass
            elif lab is not None and kind in lab.faults:
                why = lab.check_fault(spec, kind, arg)
            elif kind in vendor_kinds:
                why = f"it has no {plugin(vendor_kinds[kind].vendor).description}"
            else:
                why = f"it has no NVIDIA GPUs ({spec.vendor} accelerators)"
            if why:
                raise ConfigError(f"lab fault {fault!r} does not apply to a {model} host: {why}")
            continue
        if kind == "xid":
            parts = (arg or "").split(":")
            if (
                not parts[0].isdigit()
                or len(parts) > 2
                or (len(parts) == 2 and not (parts[1].isdigit() and int(parts[1]) < spec.gpu_count))
            ):
                why = "expected xid:<code> or xid:<code>:<gpu index>"
        elif (kind in RACK_FAULTS or kind == "tray-missing") and model not in RACK_TRAY_MODELS:
            why = "it is not a rack's compute tray (no multi-node NVLink fabric)"
        elif kind in ("remap-pending", "remap-failure") and not spec.has_remapped_rows:
            why = "its GPUs do not report remapped rows"
        elif kind in ("ib-down", "ib-polling") and spec.ibstat_file is None:
            why = "it has no RDMA adapters"
        elif kind == "gpu-missing" and spec.gpu_count < 2:
            why = "it has a single GPU (use nvidia-smi-missing)"
        elif kind == "driver-drift" and arg is not None and not re.fullmatch(r"[\d.]+", arg):
            why = "expected driver-drift[:<version>]"
        elif kind in ("hot", "power-brake", "straggler") and arg is not None:
            if not (arg.isdigit() and int(arg) < spec.gpu_count):
                why = f"expected {kind}[:<gpu index>]"
        elif kind == "ib-link-downed" and (
            spec.ibstat_file is None or (arg is not None and not arg.isdigit())
        ):
            why = "expected ib-link-downed[:<count>] on a host with RDMA adapters"
        elif arg is not None and kind not in ("xid", "driver-drift", "ib-down", "ib-polling"):
            why = "it takes no argument"
        if why:
            raise ConfigError(f"lab fault {fault!r} does not apply to a {model} host: {why}")
