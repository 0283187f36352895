"""The hosts' deadlines (issue 25: moved out of validation): a host stuck in ``validating`` or
``reclaiming`` past its deadline times out to ``quarantined``; an ``available`` host whose
validation record expired goes back to ``validating``. Validation fires them before it
judges; the periodic sweep (:mod:`gpufleet.service.background.sweeper`) fires them with the
leases' starts and expiries."""

from __future__ import annotations

from sqlalchemy import select

from gpufleet.domain.health import Fault, Health
from gpufleet.domain.lifecycle import is_overdue
from gpufleet.domain.states import Event, HostState
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.core.lifecycle import state_deadlines, transition
from gpufleet.store.tables import Host


def sweep_deadlines(fleet: Fleet) -> list[str]:
    """Fire the hosts' deadlines: overdue transient states -> quarantined ("timed out"),
    expired validation records -> validating. Returns the host names touched."""
    touched: list[str] = []
    now = fleet.now()
    deadlines = state_deadlines(fleet)
    with fleet.db.session() as s:
        for h in s.scalars(
            select(Host)
            .where(
                Host.state.in_(
                    [
                        HostState.VALIDATING.value,
                        HostState.RECLAIMING.value,
                        HostState.AVAILABLE.value,
                    ]
                )
            )
            .with_for_update(skip_locked=True)
        ):
            st = HostState(h.state)
            if st is HostState.AVAILABLE:
                if h.validated_until is not None and h.validated_until < now:
                    transition(s, fleet, h, Event.EXPIRE, "validation record expired")
                    touched.append(h.name)
            elif is_overdue(st, h.state_entered_at, now, deadlines):
                transition(
                    s,
                    fleet,
                    h,
                    Event.TIMEOUT,
                    f"timed out in {st.value}",
                    health=Health.CRITICAL,
                    fault=Fault.TIMED_OUT,
                    fault_reason=f"stuck in {st.value}",
                )
                touched.append(h.name)
    return touched
