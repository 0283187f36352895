"""No data is a fault (issue 24 item 1): what the inspection sweep does with a host it could
not observe.

* A probe that answered but could not observe (the GPU tool missing, the driver not loaded,
  a GPU handle error, a GPU in an error state, the tool timing out, cut Xid lines, an
  unreadable part) gives the host the outcome :data:`PROBE_FAILED`, never ``ok``; the
  failures are stored with the sample and the ``observe`` rules of the policy decide how
  many sweeps in a row make it act (default two: the host leaves ``available`` with the
  fault of :data:`OBSERVE_FAULTS` and one alarm).
* Fewer GPUs answering than the host should have (``gpu-count-low``): the count the host
  should have comes from the store (:func:`expected_gpu_counts`), never from the probe.
* A host whose *transport* failed (unreachable, timeout, auth failure: the probe never ran)
  is handed to :func:`transport_unobserved`; acting on it is the ``unreachable`` fault's
  work (issue 24 item 2), so this hook records nothing yet: the host keeps its outcome
  (``unreachable``/``timeout``/...), which is never ``ok`` either.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.domain.health import Fault
from gpufleet.domain.rules import RulePolicy
from gpufleet.service.core.fleet import Fleet
from gpufleet.store.tables import FactSnapshot, Host

#: The outcome of a host whose probe answered but could not observe everything.
PROBE_FAILED = "probe_failed"

#: The fault a host is quarantined with for each shipped observe rule.
OBSERVE_FAULTS: dict[str, Fault] = {
    "gpu-tool-missing": Fault.TELEMETRY_LOST,
    "gpu-tool-error": Fault.TELEMETRY_LOST,
    "gpu-probe-timeout": Fault.TELEMETRY_LOST,
    "gpu-driver-not-loaded": Fault.DRIVER_NOT_LOADED,
    "gpu-handle-error": Fault.GPU_LOST,
    "gpu-error-state": Fault.GPU_LOST,
    "gpu-count-low": Fault.GPU_LOST,
}


def expected_gpu_counts(s: Session, host_ids: Sequence[int]) -> dict[int, int]:
    """The GPUs each host should have: the inventory's ``gpu_count`` when given, else the
    count of its latest collected facts (what the host was validated with); hosts with
    neither are left out (the rule then sees no count, and does not fire)."""
    if not host_ids:
        return {}
    out: dict[int, int] = {}
    rows = s.execute(
        select(Host.id, Host.expected, FactSnapshot.gpu_count)
        .outerjoin(FactSnapshot, FactSnapshot.id == Host.latest_snapshot_id)
        .where(Host.id.in_(host_ids))
    )
    for hid, expected, facts in rows:
        declared = (expected or {}).get("gpu_count")
        count = _count(declared) if declared is not None else None
        if count is None and facts:
            count = int(facts)
        if count:
            out[hid] = count
    return out


def _count(value: Any) -> int | None:
    try:
        n = int(value)
    except (TypeError, ValueError):
        return None
    return n if n > 0 else None


def transport_unobserved(
    fleet: Fleet, policy: RulePolicy, at: datetime, hosts: Mapping[int, Any]
) -> None:
    """Hook for the hosts whose transport failed this sweep (refused, timeout, auth failure,
    host key changed): the probe never ran, so there is no sample and no finding here. The
    ``unreachable`` fault and its alarm (issue 24 item 2) act on them: inspect() counts them
    in :func:`gpufleet.service.hosts.reachability.after_sweep` with the hosts it reached, so this
    records nothing more and the host's outcome (``unreachable``, ``timeout`` ...) stands."""
    del fleet, policy, at, hosts
