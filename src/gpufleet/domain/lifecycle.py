"""The host lifecycle: one declarative transition table and the one function that applies it.

Choices worth knowing (the rows below are the whole truth):

* ``validation_failed`` is a **self-transition** (validating -> validating): the host stays out
  of the pool, and the transition row carries the reasons (drift, failed checks).
* **Deadlines** catch work that never reported (Ironic's "stuck states treated as fail"), not
  hosts that keep failing for a recorded reason: ``entered_at`` is the time of the host's last
  transition, self-transitions included, so each verdict restarts the clock.
* **Changes** (detected or declared) send an available host back to validation at once. On an
  *allocated* host the change is only recorded (self-transition): pulling a host from under a
  running job because its driver moved is worse than the drift. Reclaim compares the facts with
  those of the last validation, so the change is seen again then and ``change_detected`` takes the
  host from ``reclaiming`` to ``validating`` instead of back to the pool. In maintenance and
  quarantine a change is recorded only; leaving those states validates anyway.
* ``hardware_fault`` quarantines from every working state, **including allocated** (a lost GPU
  or a fatal Xid has already broken the job; the service tells the holder). In maintenance and
  quarantine it is recorded only (self-transition), so the operator keeps control.
* ``maintenance_on`` is refused on an allocated host: release it first.
* ``retire`` is allowed from anything but allocated; retired is terminal.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from gpufleet.domain.states import Event, HostState
from gpufleet.errors import InvalidTransition

S = HostState
E = Event

TRANSITIONS: dict[tuple[HostState, Event], HostState] = {
    # --- enrolment and validation
    (S.ENROLLED, E.VALIDATE): S.VALIDATING,  # cli `gpufleet validate` (first validation)
    (S.AVAILABLE, E.VALIDATE): S.VALIDATING,  # cli/api `gpufleet validate` (operator re-check)
    (S.VALIDATING, E.VALIDATE): S.VALIDATING,  # service/hosts/validate: new attempt, clock restarts
    (S.VALIDATING, E.VALIDATION_PASSED): S.AVAILABLE,  # service/hosts/validate.py
    (S.VALIDATING, E.VALIDATION_FAILED): S.VALIDATING,  # service/hosts/validate: reasons recorded
    (S.AVAILABLE, E.EXPIRE): S.VALIDATING,  # service/hosts/deadlines: record too old
    # --- hardware faults (validation or monitoring)
    (S.ENROLLED, E.HARDWARE_FAULT): S.QUARANTINED,  # service/hosts/validate.py, monitoring
    (S.VALIDATING, E.HARDWARE_FAULT): S.QUARANTINED,  # service/hosts/validate.py
    (S.AVAILABLE, E.HARDWARE_FAULT): S.QUARANTINED,  # service/hosts/collect.py (critical fault)
    (S.ALLOCATED, E.HARDWARE_FAULT): S.QUARANTINED,  # monitoring (not built yet): job broken
    (S.RECLAIMING, E.HARDWARE_FAULT): S.QUARANTINED,  # service/allocation/reclaim.py
    (S.MAINTENANCE, E.HARDWARE_FAULT): S.MAINTENANCE,  # monitoring (not built yet): recorded only
    (S.QUARANTINED, E.HARDWARE_FAULT): S.QUARANTINED,  # monitoring (not built yet): recorded only
    # --- allocation and reclaim (Ironic: teardown always passes through cleaning)
    (S.AVAILABLE, E.ALLOCATE): S.ALLOCATED,  # service/allocation/allocation.py
    (S.ALLOCATED, E.RELEASE): S.RECLAIMING,  # service/allocation/allocation.py
    (S.RECLAIMING, E.RECLAIM_PASSED): S.AVAILABLE,  # service/allocation/reclaim.py
    (S.RECLAIMING, E.RECLAIM_FAILED): S.QUARANTINED,  # service/allocation/reclaim.py
    # a host that owes a passing reclaim: `gpufleet reclaim HOST` re-runs the checks
    (S.QUARANTINED, E.RECLAIM): S.RECLAIMING,  # service/allocation/reclaim.py
    (S.VALIDATING, E.RECLAIM): S.RECLAIMING,  # service/allocation/reclaim.py
    # --- maintenance (operator)
    (S.ENROLLED, E.MAINTENANCE_ON): S.MAINTENANCE,  # cli/api `gpufleet maintenance on`
    (S.VALIDATING, E.MAINTENANCE_ON): S.MAINTENANCE,  # cli/api: aborts the run
    (S.AVAILABLE, E.MAINTENANCE_ON): S.MAINTENANCE,  # cli/api
    (S.RECLAIMING, E.MAINTENANCE_ON): S.MAINTENANCE,  # cli/api: aborts the reclaim
    (S.QUARANTINED, E.MAINTENANCE_ON): S.MAINTENANCE,  # cli/api: taken away for repair
    (S.MAINTENANCE, E.MAINTENANCE_OFF): S.VALIDATING,  # cli/api `gpufleet maintenance off`
    # --- changes: detected by service/hosts/collect (changes.detect_changes), declared by cli/api
    (S.ENROLLED, E.CHANGE_DETECTED): S.ENROLLED,  # recorded; first validation sees it anyway
    (S.VALIDATING, E.CHANGE_DETECTED): S.VALIDATING,  # restarts the attempt
    (S.AVAILABLE, E.CHANGE_DETECTED): S.VALIDATING,
    (S.ALLOCATED, E.CHANGE_DETECTED): S.ALLOCATED,  # recorded; re-seen at reclaim
    (S.RECLAIMING, E.CHANGE_DETECTED): S.VALIDATING,  # allocation/reclaim.py: full validation
    (S.MAINTENANCE, E.CHANGE_DETECTED): S.MAINTENANCE,  # recorded; maintenance_off validates
    (S.QUARANTINED, E.CHANGE_DETECTED): S.QUARANTINED,  # recorded; only a human unquarantines
    (S.ENROLLED, E.CHANGE_DECLARED): S.ENROLLED,  # cli/api `gpufleet change record`
    (S.VALIDATING, E.CHANGE_DECLARED): S.VALIDATING,
    (S.AVAILABLE, E.CHANGE_DECLARED): S.VALIDATING,
    (S.ALLOCATED, E.CHANGE_DECLARED): S.ALLOCATED,
    (S.RECLAIMING, E.CHANGE_DECLARED): S.VALIDATING,
    (S.MAINTENANCE, E.CHANGE_DECLARED): S.MAINTENANCE,
    (S.QUARANTINED, E.CHANGE_DECLARED): S.VALIDATING,  # e.g. RMA'd GPU swapped: the repair
    # --- deadlines
    (S.VALIDATING, E.TIMEOUT): S.QUARANTINED,  # service/hosts/validate.py sweep, reason "timed out"
    (S.RECLAIMING, E.TIMEOUT): S.QUARANTINED,  # service/hosts/validate.py sweep, reason "timed out"
    # --- repair and retirement (operator)
    (S.QUARANTINED, E.UNQUARANTINE): S.VALIDATING,  # cli/api `gpufleet unquarantine`
    (S.ENROLLED, E.RETIRE): S.RETIRED,  # cli/api `gpufleet retire`
    (S.VALIDATING, E.RETIRE): S.RETIRED,
    (S.AVAILABLE, E.RETIRE): S.RETIRED,
    (S.RECLAIMING, E.RETIRE): S.RETIRED,
    (S.MAINTENANCE, E.RETIRE): S.RETIRED,
    (S.QUARANTINED, E.RETIRE): S.RETIRED,
}

#: How long a transient state may last before the sweeper fires ``timeout``; callers may pass
#: their own mapping (from configuration) to :func:`is_overdue`.
DEFAULT_DEADLINES: Mapping[HostState, timedelta] = {
    HostState.VALIDATING: timedelta(hours=2),
    HostState.RECLAIMING: timedelta(minutes=30),
}


@dataclass(frozen=True, slots=True)
class Transition:
    """One applied event, as the service records it in the host's history."""

    host: str
    from_state: HostState
    to_state: HostState
    event: Event
    reason: str = ""
    actor: str = "gpufleet"

    @property
    def changed(self) -> bool:
        """False for self-transitions (a recorded verdict, fault or change)."""
        return self.from_state != self.to_state


def allowed_events(state: HostState) -> list[Event]:
    """Events the table accepts in ``state``, in declaration order."""
    return [event for (src, event) in TRANSITIONS if src == state]


def apply_event(host: str, state: HostState, event: Event) -> HostState:
    """Return the state ``event`` leads to from ``state``; refuse what the table lacks.

    Raises :class:`~gpufleet.errors.InvalidTransition` naming host, state, event and the
    events that would have been accepted.
    """
    try:
        return TRANSITIONS[(state, event)]
    except KeyError:
        raise InvalidTransition(
            host, str(state), str(event), allowed=[str(e) for e in allowed_events(state)]
        ) from None


def advance(
    host: str, state: HostState, event: Event, *, reason: str = "", actor: str = "gpufleet"
) -> Transition:
    """Apply ``event`` and return the :class:`Transition` to persist and log."""
    if event is Event.TIMEOUT and not reason:
        reason = "timed out"
    return Transition(host, state, apply_event(host, state, event), event, reason, actor)


def is_overdue(
    state: HostState,
    entered_at: datetime,
    now: datetime,
    deadlines: Mapping[HostState, timedelta] = DEFAULT_DEADLINES,
) -> bool:
    """True if ``state`` has a deadline and ``now`` is past it (:func:`deadline_of`)."""
    due = deadline_of(state, entered_at, deadlines)
    return due is not None and now > due


def deadline_of(
    state: HostState,
    entered_at: datetime,
    deadlines: Mapping[HostState, timedelta] = DEFAULT_DEADLINES,
) -> datetime | None:
    """When a host that entered ``state`` at ``entered_at`` times out (the one rule: entered
    plus the state's deadline); None when the state has none.

    ``entered_at`` is the time of the host's last transition (self-transitions included).
    """
    deadline = deadlines.get(state)
    return None if deadline is None else entered_at + deadline
