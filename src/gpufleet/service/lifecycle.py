"""Persisting lifecycle transitions: the one place a host's state is written.

Every transition (self-transitions included) becomes an ``transition`` event with actor and
reason, and restarts the state clock and deadline.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from sqlalchemy.orm import Session

from gpufleet.domain.changes import Change
from gpufleet.domain.lifecycle import Transition, advance
from gpufleet.domain.states import Event, HostState
from gpufleet.service.fleet import Fleet, record_event
from gpufleet.store.tables import Host


def deadline_for(fleet: Fleet, state: HostState) -> timedelta | None:
    """Configured deadline of a transient state."""
    if state is HostState.VALIDATING:
        return fleet.settings.validating_deadline
    if state is HostState.RECLAIMING:
        return fleet.settings.reclaiming_deadline
    return None


def transition(
    s: Session,
    fleet: Fleet,
    host: Host,
    event: Event,
    reason: str = "",
    *,
    actor: str | None = None,
    data: dict[str, object] | None = None,
) -> Transition:
    """Apply ``event`` to ``host`` (raises InvalidTransition), persist it and log it."""
    t = advance(host.name, HostState(host.state), event, reason=reason, actor=actor or fleet.actor)
    now = fleet.now()
    host.state = t.to_state.value
    host.state_entered_at = now
    dl = deadline_for(fleet, t.to_state)
    host.state_deadline = now + dl if dl else None
    host.status_reason = t.reason or None
    host.updated_at = now
    if t.to_state not in (HostState.AVAILABLE, HostState.ALLOCATED):
        host.profiles = []
        host.validated_until = None
    arrow = f"{t.from_state} -> {t.to_state}" if t.changed else f"stays {t.to_state}"
    record_event(
        s,
        fleet,
        "transition",
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


def on_changes(s: Session, fleet: Fleet, host: Host, changes: Sequence[Change]) -> None:
    """Record detected changes and send the host back to validation where the table says so."""
    for c in changes:
        record_event(
            s,
            fleet,
            "change-detected",
            f"{c.kind}: {c.field} {c.before} -> {c.after}",
            host=host,
            data={
                "kind": str(c.kind),
                "field": c.field,
                "before": str(c.before),
                "after": str(c.after),
            },
        )
    kinds = ", ".join(sorted({str(c.kind) for c in changes}))
    transition(s, fleet, host, Event.CHANGE_DETECTED, f"change detected: {kinds}")
