"""Operator actions on hosts: maintenance, retire, unquarantine, declared changes.

Each action works on one host by name; :func:`each` applies it to every host a selector
matches, one transaction per host, so one refusal (an allocated host) does not undo the rest.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.domain.changes import DeclaredChangeKind
from gpufleet.domain.events import EventKind
from gpufleet.domain.health import Health
from gpufleet.domain.lifecycle import apply_event
from gpufleet.domain.states import Event, HostState
from gpufleet.errors import GpufleetError, NotFound
from gpufleet.service.fleet import Fleet, record_event
from gpufleet.service.lifecycle import KEEP, retrying, transition
from gpufleet.service.select import selected_names
from gpufleet.store.tables import Host


def _host(s: Session, name: str) -> Host:
    host = s.scalar(select(Host).where(Host.name == name).with_for_update())
    if host is None:
        raise NotFound(f"no host named '{name}'")
    return host


@retrying
def maintenance_on(fleet: Fleet, name: str, reason: str, until: datetime | None = None) -> str:
    """Take a host out for maintenance (refused while allocated)."""
    with fleet.db.session() as s:
        h = _host(s, name)
        transition(
            s,
            fleet,
            h,
            Event.MAINTENANCE_ON,
            reason,
            data={"until": until.isoformat() if until else None},
        )
        h.maintenance_until = until
        return h.state


@retrying
def maintenance_off(fleet: Fleet, name: str, reason: str = "maintenance done") -> str:
    """End maintenance: the host goes to validating, never straight to available."""
    with fleet.db.session() as s:
        h = _host(s, name)
        transition(s, fleet, h, Event.MAINTENANCE_OFF, reason)
        h.maintenance_until = None
        return h.state


@retrying
def retire(fleet: Fleet, name: str, reason: str) -> str:
    """Retire a host for good (refused while allocated)."""
    with fleet.db.session() as s:
        h = _host(s, name)
        transition(s, fleet, h, Event.RETIRE, reason)
        return h.state


@retrying
def unquarantine(fleet: Fleet, name: str, reason: str) -> str:
    """Operator says the fault is repaired: back to validating."""
    with fleet.db.session() as s:
        h = _host(s, name)
        transition(
            s,
            fleet,
            h,
            Event.UNQUARANTINE,
            reason,
            data={"fault": h.fault, "fault_reason": h.fault_reason},
            health=Health.OK,
            fault=None,
            fault_reason=None,
        )
        return h.state


@retrying
def record_change(
    fleet: Fleet, name: str, kind: DeclaredChangeKind, ticket: str | None, note: str = ""
) -> str:
    """A declared change (driver upgrade, reimage, GPU/NIC swap): log it and revalidate."""
    with fleet.db.session() as s:
        h = _host(s, name)
        msg = f"{kind.value} declared" + (f" (ticket {ticket})" if ticket else "")
        record_event(
            s,
            fleet,
            EventKind.CHANGE_DECLARED,
            msg + (f": {note}" if note else ""),
            host=h,
            data={"kind": kind.value, "ticket": ticket, "note": note},
        )
        to = apply_event(h.name, HostState(h.state), Event.CHANGE_DECLARED)
        clear = to is HostState.VALIDATING
        transition(
            s,
            fleet,
            h,
            Event.CHANGE_DECLARED,
            msg,
            fault=None if clear else KEEP,
            fault_reason=None if clear else KEEP,
        )
        return h.state


#: What ``change record --kind reimage`` tells the operator: a reimaged host has a new SSH
#: host key, which gpufleet refuses until the operator accepts it.
REIMAGE_HINT = (
    "a reimage gives the host a new SSH host key, which the next collection refuses; "
    "accept it with 'gpufleet hosts rekey HOST' (or pin it: --fingerprint SHA256:...)"
)


@dataclass
class HostOutcome:
    """One host's result of an action applied through a selector."""

    host: str
    state: str | None = None
    error: GpufleetError | None = None


def each(fleet: Fleet, selector: str, action: Callable[[str], str]) -> list[HostOutcome]:
    """Apply ``action(host_name)`` (returning the new state) to every host ``selector``
    matches, by name; :class:`NotFound` (exit 4) when it matches none. A gpufleet error on
    one host is recorded in its outcome and the others still run."""
    with fleet.db.session() as s:
        names = selected_names(s, selector)
    out: list[HostOutcome] = []
    for name in names:
        try:
            out.append(HostOutcome(name, str(action(name))))
        except GpufleetError as exc:
            out.append(HostOutcome(name, error=exc))
    return out
