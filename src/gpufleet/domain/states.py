"""The lifecycle vocabulary: host states and the events that move hosts between them.

The transition table itself lives in :mod:`gpufleet.domain.lifecycle`; health and the reason a
host stopped (:class:`~gpufleet.domain.health.Fault`) are kept beside the state, never folded
into it (no ``DEGRADED_AVAILABLE``).
"""

from __future__ import annotations

from enum import StrEnum


class HostState(StrEnum):
    """Where a host is in its life, from "exists" to "verified, allocatable"."""

    ENROLLED = "enrolled"
    """Known to gpufleet (inventory or discovery) but never validated; not schedulable."""

    VALIDATING = "validating"
    """Checks are running, or the last verdict failed and the reason is recorded (drift, a
    missing profile requirement). Transient: a run that never reports times out."""

    AVAILABLE = "available"
    """Validated for at least one workload profile and free; the only schedulable state."""

    ALLOCATED = "allocated"
    """Handed to a user or scheduler; gpufleet watches it but does not touch it."""

    RECLAIMING = "reclaiming"
    """Released and being cleaned (GPU reset, pending row remaps applied, quick checks) before
    going back to the pool; Ironic's ``cleaning``. Transient."""

    MAINTENANCE = "maintenance"
    """Held by an operator; gpufleet records faults and changes but moves it nowhere until the
    operator ends maintenance, which always goes through validation."""

    QUARANTINED = "quarantined"
    """Pulled out because of a hardware fault, a failed reclaim or a timeout; leaves only by an
    operator declaring it repaired (back to validation) or retiring it."""

    RETIRED = "retired"
    """Out of the fleet for good (decommissioned, returned); terminal."""


#: States a host can sit in indefinitely.
STABLE_STATES: frozenset[HostState] = frozenset(
    {
        HostState.ENROLLED,
        HostState.AVAILABLE,
        HostState.ALLOCATED,
        HostState.MAINTENANCE,
        HostState.QUARANTINED,
        HostState.RETIRED,
    }
)

#: States with a deadline (see ``lifecycle.DEFAULT_DEADLINES``): work is in flight.
TRANSIENT_STATES: frozenset[HostState] = frozenset({HostState.VALIDATING, HostState.RECLAIMING})

#: States in which a host may be handed out.
SCHEDULABLE: frozenset[HostState] = frozenset({HostState.AVAILABLE})


class Event(StrEnum):
    """Something that happened to a host; the lifecycle table says where it leads."""

    VALIDATE = "validate"
    """Start a validation run (operator or enrolment); a re-run while validating restarts it."""

    VALIDATION_PASSED = "validation_passed"
    """At least one profile passed and no hardware fault was found."""

    VALIDATION_FAILED = "validation_failed"
    """No profile passed (drift, a down port ...). A self-transition: the host stays
    ``validating`` and the reasons are recorded in the transition's history row."""

    HARDWARE_FAULT = "hardware_fault"
    """A quarantining fault was seen (lost GPU, uncorrectable ECC, row-remap failure, fatal
    Xid) by validation or by monitoring."""

    ALLOCATE = "allocate"
    """Hand the host to a user or scheduler."""

    RELEASE = "release"
    """The user is done; the host is reclaimed before it is offered again."""

    RECLAIM_PASSED = "reclaim_passed"
    """Cleanup and quick checks after release succeeded."""

    RECLAIM_FAILED = "reclaim_failed"
    """Cleanup or quick checks after release failed."""

    MAINTENANCE_ON = "maintenance_on"
    """Operator takes the host out of service to work on it."""

    MAINTENANCE_OFF = "maintenance_off"
    """Operator is done; the host is validated again (never straight to available)."""

    CHANGE_DETECTED = "change_detected"
    """A collection found a change that invalidates the last validation (GPU swap, driver
    upgrade, reimage, GPU count, NIC swap)."""

    CHANGE_DECLARED = "change_declared"
    """An operator (or a CMDB hook) says such a change was made."""

    TIMEOUT = "timeout"
    """A transient state outlived its deadline (a run that never reported)."""

    UNQUARANTINE = "unquarantine"
    """Operator declares the fault repaired; the host is validated again."""

    RETIRE = "retire"
    """Take the host out of the fleet for good."""

    EXPIRE = "expire"
    """The host's validation record is older than the pool allows."""

    RECLAIM = "reclaim"
    """An operator re-runs the reclaim checks of a host that owes a passing reclaim (one that
    failed reclaim, or left ``reclaiming`` another way): ``gpufleet reclaim HOST``."""
