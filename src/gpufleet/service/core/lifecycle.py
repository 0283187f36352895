"""Persisting lifecycle transitions: the one place a host's state, health and fault are written.

:func:`transition` is Ironic's ``process_event``: it applies a lifecycle event through the
domain table, writes state, deadline, reason, health and fault *together*, and appends a
``transition`` event with actor and reason. No service assigns ``Host.state``, ``health`` or
``fault`` itself.

The write is a compare-and-set: ``UPDATE hosts ... WHERE id = ? AND state = <read> AND
state_version = <read>``. A writer that decided on a state someone else has since changed
(a validation that read ``available`` while an operator put the host in maintenance) updates
no row and gets :class:`~gpufleet.errors.Conflict`; its transaction rolls back, so neither the
operator's change nor the event chain (each transition's ``from`` is the previous one's ``to``)
is lost. :func:`retrying` re-reads and re-decides.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from datetime import timedelta
from enum import Enum
from typing import Any, ParamSpec, TypeVar

from sqlalchemy import update
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from gpufleet.domain.changes import Change
from gpufleet.domain.events import EventKind
from gpufleet.domain.health import Fault, Health
from gpufleet.domain.lifecycle import Transition, advance, deadline_of
from gpufleet.domain.states import Event, HostState
from gpufleet.errors import Conflict, InvalidTransition
from gpufleet.service.core.fleet import Fleet, record_event
from gpufleet.store.tables import Host

T = TypeVar("T")
P = ParamSpec("P")

#: How often a use case that lost a compare-and-set re-reads and re-decides.
CONFLICT_ATTEMPTS = 5


class Keep(Enum):
    """Marker: leave this field as it is."""

    KEEP = "keep"


KEEP = Keep.KEEP


def state_deadlines(fleet: Fleet) -> dict[HostState, timedelta]:
    """The transient states' deadlines as configured (``GPUFLEET_*_DEADLINE_MINUTES``; the
    defaults are :data:`gpufleet.domain.lifecycle.DEFAULT_DEADLINES`)."""
    return {
        HostState.VALIDATING: fleet.settings.validating_deadline,
        HostState.RECLAIMING: fleet.settings.reclaiming_deadline,
    }


def transition(
    s: Session,
    fleet: Fleet,
    host: Host,
    event: Event,
    reason: str = "",
    *,
    actor: str | None = None,
    data: dict[str, object] | None = None,
    health: Health | Keep = KEEP,
    fault: Fault | Keep | None = KEEP,
    fault_reason: str | Keep | None = KEEP,
    status_reason: str | Keep | None = KEEP,
) -> Transition:
    """Apply ``event`` to ``host`` and write state, health and fault in one compare-and-set.

    Raises :class:`~gpufleet.errors.InvalidTransition` when the table refuses the event and
    :class:`~gpufleet.errors.Conflict` when the host's state changed since it was read.
    ``status_reason`` defaults to the transition's reason.
    """
    read_state = HostState(host.state)
    read_version = host.state_version or 0
    t = advance(host.name, read_state, event, reason=reason, actor=actor or fleet.actor)
    check_reclaim_due(host, t)
    now = fleet.now()
    values: dict[str, Any] = {
        "state": t.to_state,
        "state_entered_at": now,
        "state_deadline": deadline_of(t.to_state, now, state_deadlines(fleet)),
        "status_reason": (t.reason or None) if isinstance(status_reason, Keep) else status_reason,
        "state_version": read_version + 1,
        "updated_at": now,
    }
    if t.to_state not in (HostState.AVAILABLE, HostState.ALLOCATED):
        values["profiles"] = []
        values["validated_until"] = None
    if not isinstance(health, Keep):
        values["health"] = health
    if not isinstance(fault, Keep):
        values["fault"] = fault
    if not isinstance(fault_reason, Keep):
        values["fault_reason"] = fault_reason
    if event is Event.RELEASE:
        # the lessee's leftovers must be seen gone before the host is offered again
        values["reclaim_due"] = f"released: {t.reason or 'lease ended'}"
    result = s.execute(
        update(Host)
        .where(
            Host.id == host.id,
            Host.state == read_state,
            Host.state_version == read_version,
        )
        .values(**values)
        # names the host for placement's summary (store/placement_index.py), refreshed
        # at commit; without it the whole summary would be marked stale
        .execution_options(synchronize_session=False, gpufleet_hosts=(host.id,))
    )
    if getattr(result, "rowcount", 1) != 1:
        raise Conflict(
            f"host {host.name}: its state changed while '{event.value}' was being applied "
            f"(read '{read_state.value}'); nothing was written, retry"
        )
    for key, value in values.items():
        set_committed_value(host, key, value)
    arrow = f"{t.from_state} -> {t.to_state}" if t.changed else f"stays {t.to_state}"
    record_event(
        s,
        fleet,
        EventKind.TRANSITION,
        f"{event.value}: {arrow}" + (f" ({t.reason})" if t.reason else ""),
        host=host,
        actor=t.actor,
        data={
            "from": t.from_state.value,
            "to": t.to_state.value,
            "event": event.value,
            "reason": t.reason,
            **(data or {}),
        },
    )
    return t


def reclaim_owed_message(name: str, due: str) -> str:
    """Why a host that owes a passing reclaim cannot go back to the pool, and what to do."""
    return (
        f"host {name} owes a passing reclaim ({due}): run 'gpufleet reclaim {name}' to re-run "
        f"the checks, or 'gpufleet unquarantine {name} --force --reason ...' (recorded)"
    )


def check_reclaim_due(host: Host, t: Transition) -> None:
    """Fail closed: only a passing reclaim takes a host that owes one to ``available``
    (validation holds such a host itself; this is the backstop of the one writer)."""
    if (
        t.to_state is HostState.AVAILABLE
        and host.reclaim_due
        and t.event is not Event.RECLAIM_PASSED
    ):
        raise reclaim_owed(host, t.event)


def reclaim_owed(host: Host, event: Event) -> InvalidTransition:
    """The refusal (exit 5, HTTP 409) of ``event`` on a host that owes a passing reclaim."""
    exc = InvalidTransition(host.name, str(host.state), event.value)
    exc.detail = reclaim_owed_message(host.name, host.reclaim_due or "reclaim not passed")
    return exc


def retrying(fn: Callable[P, T]) -> Callable[P, T]:
    """Decorate a use case that runs one transaction and re-reads what it decides on: when it
    loses a compare-and-set (:class:`Conflict`) it runs again, up to 5 times in all; the last
    Conflict propagates."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        for attempt in range(CONFLICT_ATTEMPTS):
            try:
                return fn(*args, **kwargs)
            except Conflict:
                if attempt == CONFLICT_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")

    return wrapper


def on_changes(s: Session, fleet: Fleet, host: Host, changes: Sequence[Change]) -> None:
    """Record detected changes and send the host back to validation where the table says so."""
    for c in changes:
        record_event(
            s,
            fleet,
            EventKind.CHANGE_DETECTED,
            f"{c.kind}: {c.field} {c.before} -> {c.after}",
            host=host,
            data={
                "kind": str(c.kind),
                "field": c.field,
                "before": str(c.before),
                "after": str(c.after),
                # the snapshot that showed the change: ``gpufleet prune`` keeps it
                "snapshot": host.latest_snapshot_id,
            },
        )
    kinds = ", ".join(sorted({str(c.kind) for c in changes}))
    transition(s, fleet, host, Event.CHANGE_DETECTED, f"change detected: {kinds}")
