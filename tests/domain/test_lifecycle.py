from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gpufleet.config import Settings
from gpufleet.domain.lifecycle import (
    DEFAULT_DEADLINES,
    TRANSITIONS,
    Transition,
    advance,
    allowed_events,
    apply_event,
    deadline_of,
    is_overdue,
)
from gpufleet.domain.states import (
    SCHEDULABLE,
    STABLE_STATES,
    TRANSIENT_STATES,
    Event,
    HostState,
)
from gpufleet.errors import InvalidTransition

S, E = HostState, Event

# Written out independently of the module: changing the table means changing this list too.
EXPECTED_ROWS = [
    (S.ENROLLED, E.VALIDATE, S.VALIDATING),
    (S.AVAILABLE, E.VALIDATE, S.VALIDATING),
    (S.VALIDATING, E.VALIDATE, S.VALIDATING),
    (S.VALIDATING, E.VALIDATION_PASSED, S.AVAILABLE),
    (S.VALIDATING, E.VALIDATION_FAILED, S.VALIDATING),
    (S.AVAILABLE, E.EXPIRE, S.VALIDATING),
    (S.ENROLLED, E.HARDWARE_FAULT, S.QUARANTINED),
    (S.VALIDATING, E.HARDWARE_FAULT, S.QUARANTINED),
    (S.AVAILABLE, E.HARDWARE_FAULT, S.QUARANTINED),
    (S.ALLOCATED, E.HARDWARE_FAULT, S.QUARANTINED),
    (S.RECLAIMING, E.HARDWARE_FAULT, S.QUARANTINED),
    (S.MAINTENANCE, E.HARDWARE_FAULT, S.MAINTENANCE),
    (S.QUARANTINED, E.HARDWARE_FAULT, S.QUARANTINED),
    (S.AVAILABLE, E.ALLOCATE, S.ALLOCATED),
    (S.ALLOCATED, E.RELEASE, S.RECLAIMING),
    (S.RECLAIMING, E.RECLAIM_PASSED, S.AVAILABLE),
    (S.RECLAIMING, E.RECLAIM_FAILED, S.QUARANTINED),
    (S.QUARANTINED, E.RECLAIM, S.RECLAIMING),  # issue 24: a host that owes a reclaim
    (S.VALIDATING, E.RECLAIM, S.RECLAIMING),
    (S.ENROLLED, E.MAINTENANCE_ON, S.MAINTENANCE),
    (S.VALIDATING, E.MAINTENANCE_ON, S.MAINTENANCE),
    (S.AVAILABLE, E.MAINTENANCE_ON, S.MAINTENANCE),
    (S.RECLAIMING, E.MAINTENANCE_ON, S.MAINTENANCE),
    (S.QUARANTINED, E.MAINTENANCE_ON, S.MAINTENANCE),
    (S.MAINTENANCE, E.MAINTENANCE_OFF, S.VALIDATING),
    (S.ENROLLED, E.CHANGE_DETECTED, S.ENROLLED),
    (S.VALIDATING, E.CHANGE_DETECTED, S.VALIDATING),
    (S.AVAILABLE, E.CHANGE_DETECTED, S.VALIDATING),
    (S.ALLOCATED, E.CHANGE_DETECTED, S.ALLOCATED),
    (S.RECLAIMING, E.CHANGE_DETECTED, S.VALIDATING),
    (S.MAINTENANCE, E.CHANGE_DETECTED, S.MAINTENANCE),
    (S.QUARANTINED, E.CHANGE_DETECTED, S.QUARANTINED),
    (S.ENROLLED, E.CHANGE_DECLARED, S.ENROLLED),
    (S.VALIDATING, E.CHANGE_DECLARED, S.VALIDATING),
    (S.AVAILABLE, E.CHANGE_DECLARED, S.VALIDATING),
    (S.ALLOCATED, E.CHANGE_DECLARED, S.ALLOCATED),
    (S.RECLAIMING, E.CHANGE_DECLARED, S.VALIDATING),
    (S.MAINTENANCE, E.CHANGE_DECLARED, S.MAINTENANCE),
    (S.QUARANTINED, E.CHANGE_DECLARED, S.VALIDATING),
    (S.VALIDATING, E.TIMEOUT, S.QUARANTINED),
    (S.RECLAIMING, E.TIMEOUT, S.QUARANTINED),
    (S.QUARANTINED, E.UNQUARANTINE, S.VALIDATING),
    (S.ENROLLED, E.RETIRE, S.RETIRED),
    (S.VALIDATING, E.RETIRE, S.RETIRED),
    (S.AVAILABLE, E.RETIRE, S.RETIRED),
    (S.RECLAIMING, E.RETIRE, S.RETIRED),
    (S.MAINTENANCE, E.RETIRE, S.RETIRED),
    (S.QUARANTINED, E.RETIRE, S.RETIRED),
]


def test_table_is_exactly_the_documented_rows() -> None:
    assert {(s, e): t for s, e, t in EXPECTED_ROWS} == TRANSITIONS
    assert len(EXPECTED_ROWS) == len(TRANSITIONS)


@pytest.mark.parametrize(("state", "event", "target"), EXPECTED_ROWS)
def test_every_row_applies(state: HostState, event: Event, target: HostState) -> None:
    assert apply_event("gpu-01", state, event) is target
    assert event in allowed_events(state)


ILLEGAL = [
    (S.AVAILABLE, E.RELEASE),
    (S.ENROLLED, E.ALLOCATE),
    (S.VALIDATING, E.ALLOCATE),
    (S.ALLOCATED, E.MAINTENANCE_ON),
    (S.ALLOCATED, E.RETIRE),
    (S.ALLOCATED, E.VALIDATE),
    (S.QUARANTINED, E.VALIDATION_PASSED),
    (S.QUARANTINED, E.VALIDATE),
    (S.MAINTENANCE, E.VALIDATION_PASSED),
    (S.AVAILABLE, E.TIMEOUT),
    (S.RETIRED, E.VALIDATE),
    (S.RETIRED, E.HARDWARE_FAULT),
    (S.RETIRED, E.RETIRE),
]


@pytest.mark.parametrize(("state", "event"), ILLEGAL)
def test_illegal_events_are_refused_with_a_named_message(state: HostState, event: Event) -> None:
    with pytest.raises(InvalidTransition) as info:
        apply_event("gpu-07", state, event)
    err = info.value
    assert (err.host, err.state, err.event) == ("gpu-07", str(state), str(event))
    message = str(err)
    assert "gpu-07" in message and f"'{event}'" in message and f"'{state}'" in message
    assert err.allowed == [str(e) for e in allowed_events(state)]
    assert err.http_status == 409


def test_allowed_events_listed_in_the_error() -> None:
    with pytest.raises(InvalidTransition, match=r"allowed: .*release"):
        apply_event("h", S.ALLOCATED, E.ALLOCATE)


def test_retired_is_terminal_and_every_other_state_has_a_way_out() -> None:
    assert allowed_events(S.RETIRED) == []
    for state in HostState:
        if state is not S.RETIRED:
            assert any(TRANSITIONS[(state, e)] != state for e in allowed_events(state)), state


def test_retire_from_anything_but_allocated() -> None:
    for state in HostState:
        allowed = (state, E.RETIRE) in TRANSITIONS
        assert allowed is (state not in (S.ALLOCATED, S.RETIRED)), state


def test_available_only_reached_through_validation_or_reclaim() -> None:
    sources = {s for (s, _e), t in TRANSITIONS.items() if t is S.AVAILABLE}
    assert sources == {S.VALIDATING, S.RECLAIMING}
    assert TRANSITIONS[(S.MAINTENANCE, E.MAINTENANCE_OFF)] is S.VALIDATING


def test_quarantine_left_only_by_operator_events() -> None:
    exits = {e for (s, e), t in TRANSITIONS.items() if s is S.QUARANTINED and t is not s}
    assert exits == {E.UNQUARANTINE, E.CHANGE_DECLARED, E.MAINTENANCE_ON, E.RETIRE, E.RECLAIM}


def test_state_groups() -> None:
    assert set(HostState) == STABLE_STATES | TRANSIENT_STATES
    assert not STABLE_STATES & TRANSIENT_STATES
    assert {S.VALIDATING, S.RECLAIMING} == TRANSIENT_STATES
    assert {S.AVAILABLE} == SCHEDULABLE
    assert set(DEFAULT_DEADLINES) == TRANSIENT_STATES


def test_advance_records_the_transition() -> None:
    t = advance("gpu-01", S.VALIDATING, E.VALIDATION_FAILED, reason="driver drift", actor="svc")
    assert t == Transition("gpu-01", S.VALIDATING, S.VALIDATING, E.VALIDATION_FAILED,
                           "driver drift", "svc")
    assert not t.changed
    assert advance("gpu-01", S.AVAILABLE, E.ALLOCATE).changed


def test_timeout_reason_defaults_to_timed_out() -> None:
    t = advance("gpu-01", S.RECLAIMING, E.TIMEOUT)
    assert (t.to_state, t.reason) == (S.QUARANTINED, "timed out")
    assert advance("gpu-01", S.VALIDATING, E.TIMEOUT, reason="no report").reason == "no report"


def test_advance_refuses_like_apply_event() -> None:
    with pytest.raises(InvalidTransition):
        advance("gpu-01", S.RETIRED, E.VALIDATE)


T0 = datetime(2024, 9, 1, 8, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("state", "elapsed", "overdue"),
    [
        (S.VALIDATING, timedelta(hours=1, minutes=59), False),
        (S.VALIDATING, timedelta(hours=2), False),  # deadline reached, not passed
        (S.VALIDATING, timedelta(hours=2, seconds=1), True),
        (S.RECLAIMING, timedelta(minutes=29), False),
        (S.RECLAIMING, timedelta(minutes=31), True),
        (S.AVAILABLE, timedelta(days=400), False),  # stable states have no deadline
        (S.QUARANTINED, timedelta(days=400), False),
    ],
)
def test_default_deadlines(state: HostState, elapsed: timedelta, overdue: bool) -> None:
    assert is_overdue(state, T0, T0 + elapsed) is overdue


def test_caller_deadlines_override_defaults() -> None:
    deadlines = {S.VALIDATING: timedelta(minutes=10)}
    assert is_overdue(S.VALIDATING, T0, T0 + timedelta(minutes=11), deadlines)
    assert not is_overdue(S.RECLAIMING, T0, T0 + timedelta(days=1), deadlines)


def test_one_rule_for_deadlines_and_one_home_for_their_defaults() -> None:
    entered = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
    assert deadline_of(S.VALIDATING, entered) == entered + timedelta(hours=2)
    assert deadline_of(S.RECLAIMING, entered, {S.RECLAIMING: timedelta(minutes=5)}) == (
        entered + timedelta(minutes=5)
    )
    assert deadline_of(S.AVAILABLE, entered) is None
    due = deadline_of(S.RECLAIMING, entered)
    assert due is not None
    assert not is_overdue(S.RECLAIMING, entered, due)  # at the deadline: not yet
    assert is_overdue(S.RECLAIMING, entered, due + timedelta(microseconds=1))
    fields = Settings.model_fields
    assert fields["validating_deadline"].default == DEFAULT_DEADLINES[S.VALIDATING]
    assert fields["reclaiming_deadline"].default == DEFAULT_DEADLINES[S.RECLAIMING]
