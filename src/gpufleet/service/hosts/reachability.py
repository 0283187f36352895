"""Unreachable is a state the platform acts on (issue 24, item 2).

Every collection and inspection attempt that could not reach a host (connection refused, no
route, timeout, login refused, another host key) adds one to the host's run of failed
contacts (``hosts.unreachable_attempts``, from ``unreachable_since``); one that reaches it
(the script ran, even if its output was bad) ends the run. When the run reaches
``GPUFLEET_UNREACHABLE_ATTEMPTS`` attempts, or has lasted ``GPUFLEET_UNREACHABLE_MINUTES``
since its first failure, the platform acts, once per run:

* one ``host-unreachable`` alarm, whose text carries the BMC's view when the host has a BMC
  (power state, health, new event-log entries and the diagnosis ``gpufleet bmc status``
  gives: the BMC is read *outside* any transaction, between counting and acting);
* an ``available`` host leaves for ``validating`` (event ``validate``) with health critical and
  fault ``unreachable``: out of ``allocate`` and ``capacity`` at once; a ``validating`` host
  records the fault (``validation_failed``, its clock restarts). Leased and reclaiming hosts get
  the alarm (the lease runs on; a reclaim that cannot reach the host times out); enrolled,
  maintenance and quarantined hosts are counted only (nobody relies on them).

Coming back: the next contact that reaches the host closes the alarm and clears the fault,
and the host stays in ``validating`` until ``gpufleet validate`` passes it: it never returns to
the pool straight from ``unreachable``.

``collect`` calls :func:`on_reached` inside its apply transaction and :func:`on_unreached`
after it; ``inspect`` calls :func:`after_sweep` once per sweep.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from gpufleet.collect.transport import Outcome
from gpufleet.domain.bmc import UNREACHABLE_STEPS
from gpufleet.domain.events import AlarmKind, AlarmSeverity
from gpufleet.domain.health import Fault, Health
from gpufleet.domain.states import Event, HostState
from gpufleet.errors import GpufleetError
from gpufleet.service.core.alarms import close_alarms, raise_alarm
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.core.lifecycle import transition
from gpufleet.store.tables import Alarm, Host

#: Outcomes of an attempt that reached the host (something ran on it).
REACHED = frozenset({Outcome.OK, Outcome.BAD_OUTPUT})
#: Outcomes of an attempt that could not reach it. ``error`` (a transport that could not be
#: built, a result discarded) says nothing about the host and counts neither way.
UNREACHED = frozenset(
    {Outcome.UNREACHABLE, Outcome.TIMEOUT, Outcome.AUTH_FAILED, Outcome.HOST_KEY_CHANGED}
)
#: States in which an unreachable host raises the alarm (the others are counted only).
ALARM_STATES = frozenset(
    {HostState.AVAILABLE, HostState.VALIDATING, HostState.ALLOCATED, HostState.RECLAIMING}
)
BMC_ADDRESS = "gpufleet_bmc_address"  # the variable service/hosts/bmc.py reads


def is_due(attempts: int, since: datetime | None, now: datetime, fleet: Fleet) -> bool:
    """The run of failed contacts is long enough to act on (attempts or minutes)."""
    st = fleet.settings
    if attempts >= st.unreachable_attempts:
        return True
    return since is not None and now - since >= timedelta(minutes=st.unreachable_minutes)


def on_reached(s: Session, fleet: Fleet, host: Host, source: str) -> list[str]:
    """In the caller's transaction (``host`` read under a row lock): the host answered, so
    its run of failed contacts ends; an open alarm closes and the fault ``unreachable``
    clears (a ``validating`` host stays there until ``validate`` passes it). Returns what was
    done, for the caller's report."""
    if not host.unreachable_attempts and host.fault is not Fault.UNREACHABLE:
        return []
    host.unreachable_attempts = 0
    host.unreachable_since = None
    actions: list[str] = []
    if close_alarms(s, fleet, host, AlarmKind.HOST_UNREACHABLE, f"reachable again ({source})"):
        actions.append("reachable again: unreachable alarm closed")
    if host.fault is Fault.UNREACHABLE and HostState(host.state) is HostState.VALIDATING:
        why = f"reachable again ({source}): validate to return it to the pool"
        transition(
            s, fleet, host, Event.VALIDATE, why,
            health=Health.OK, fault=None, fault_reason=None,
            data={"source": source, "reachable": True},
        )
        actions.append(why)
    return actions


@dataclass
class _Due:
    host_id: int
    name: str
    attempts: int
    since: datetime | None
    has_bmc: bool


@dataclass
class BmcView:
    """What the host's BMC said while SSH could not reach the host."""

    text: str
    data: dict[str, Any] = field(default_factory=dict)


def _count(fleet: Fleet, host_id: int, outcome: Outcome) -> _Due | None:
    """Add one failed contact; the host when the platform must act now (run long enough, a
    state that raises the alarm, no alarm open yet), else None."""
    now = fleet.now()
    with fleet.db.session() as s:
        host = s.get(Host, host_id, with_for_update=True)
        if host is None:
            return None
        host.unreachable_attempts = (host.unreachable_attempts or 0) + 1
        if host.unreachable_since is None:
            host.unreachable_since = now
        if not _should_act(s, fleet, host, now):
            return None
        return _Due(host.id, host.name, host.unreachable_attempts, host.unreachable_since,
                    bool(host.vars.get(BMC_ADDRESS)))


def _should_act(s: Session, fleet: Fleet, host: Host, now: datetime) -> bool:
    if HostState(host.state) not in ALARM_STATES:
        return False
    if not is_due(host.unreachable_attempts, host.unreachable_since, now, fleet):
        return False
    open_alarm = s.scalar(
        select(Alarm.id).where(
            Alarm.host_id == host.id,
            Alarm.kind == AlarmKind.HOST_UNREACHABLE,
            Alarm.closed_at.is_(None),
        )
    )
    return open_alarm is None


def bmc_view(fleet: Fleet, name: str, outcome: Outcome) -> BmcView:
    """Read ``name``'s BMC now (the read is stored, its cross-checks applied, as ``bmc
    status`` does) and describe it: power state, health, new event-log entries, diagnosis."""
    from gpufleet.domain.bmc import (
        BmcIdentity,
        BmcOutcome,
        BmcReading,
        diagnose,
        unreachable_step,
    )
    from gpufleet.service.hosts.bmc import bmc_status

    try:
        got = [st for st in bmc_status(fleet, f"name:{name}") if st.host == name]
    except GpufleetError as exc:
        return BmcView(f"BMC not read: {exc}", {"outcome": "error", "reason": str(exc)})
    if not got:
        return BmcView("BMC not read", {"outcome": "error"})
    st = got[0]
    if not st.ok:
        diagnosis = diagnose(outcome, BmcOutcome(st.outcome), None)
        text = f"BMC {st.outcome}" + (f" ({st.reason})" if st.reason else "")
        return BmcView(text + (f"; {diagnosis}" if diagnosis else ""),
                       {"outcome": st.outcome, "reason": st.reason, "diagnosis": diagnosis,
                        "step": unreachable_step(BmcOutcome(st.outcome), None)})
    reading = BmcReading(system_id="-", identity=BmcIdentity(), power_state=st.power_state,
                         health=st.health)
    diagnosis = diagnose(outcome, BmcOutcome.OK, reading)
    sel = st.sel_new
    text = f"BMC says power {st.power_state or 'unknown'}, health {st.health or 'unknown'}"
    if sel:
        first = sel[0]
        text += (f"; {len(sel)} new SEL entr{'y' if len(sel) == 1 else 'ies'}: "
                 f"[{first.get('severity') or '?'}] {first.get('message', '')}")
    else:
        text += "; no new SEL entries"
    if diagnosis:
        text += f"; {diagnosis}"
    return BmcView(text, {"outcome": st.outcome, "power_state": st.power_state,
                          "health": st.health, "sel_new": sel, "diagnosis": diagnosis,
                          "step": unreachable_step(BmcOutcome.OK, reading)})


def on_unreached(
    fleet: Fleet, host_id: int, outcome: Outcome, reason: str, source: str
) -> list[str]:
    """After the caller's transaction (none may be open: the BMC is read over the network):
    count one failed contact and act when the run is long enough. Returns what was done."""
    due = _count(fleet, host_id, outcome)
    if due is None:
        return []
    view = bmc_view(fleet, due.name, outcome) if due.has_bmc else None
    return _act(fleet, due, outcome, reason, source, view)


def _act(
    fleet: Fleet, due: _Due, outcome: Outcome, reason: str, source: str, view: BmcView | None
) -> list[str]:
    now = fleet.now()
    with fleet.db.session() as s:
        host = s.get(Host, due.host_id, with_for_update=True)
        # reached, or acted on by another worker, while the BMC was read
        if host is None or not host.unreachable_attempts or not _should_act(s, fleet, host, now):
            return []
        since = host.unreachable_since or now
        n = host.unreachable_attempts
        why = (f"unreachable: {n} failed contact{'s' if n != 1 else ''} since "
               f"{since:%Y-%m-%d %H:%M:%S} UTC (last, {source}: {outcome}: {reason or '-'})")
        step = str(view.data.get("step") or "escalate") if view else "escalate"
        todo = UNREACHABLE_STEPS[step].format(host=host.name)
        message = (f"{host.name}: {why}" + (f". {view.text}" if view else ". no BMC configured")
                   + f"; recommended: {step} ({todo})")
        data: dict[str, Any] = {
            "attempts": n, "since": since.isoformat(), "outcome": str(outcome),
            "reason": reason, "source": source, "action": step,
        }
        if view is not None:
            data["bmc"] = view.data
        raise_alarm(s, fleet, host, AlarmKind.HOST_UNREACHABLE, AlarmSeverity.CRITICAL,
                    message, data=data)
        actions = [f"alarm: {message}"]
        state = HostState(host.state)
        event = {HostState.AVAILABLE: Event.VALIDATE,
                 HostState.VALIDATING: Event.VALIDATION_FAILED}.get(state)
        if event is not None:
            t = transition(s, fleet, host, event, why, health=Health.CRITICAL,
                           fault=Fault.UNREACHABLE, fault_reason=message,
                           data={"faults": [Fault.UNREACHABLE.value], "source": source})
            actions.append(f"{t.from_state} -> {t.to_state}: fault unreachable")
        return actions


def after_sweep(
    fleet: Fleet, outcomes: Mapping[int, tuple[Outcome, str]], source: str
) -> dict[int, list[str]]:
    """One sweep's outcomes by host id (``inspect``): failed contacts counted and acted on,
    hosts that answered after a run of failures brought back. Returns the actions by host."""
    out: dict[int, list[str]] = {}
    reached = [hid for hid, (o, _) in outcomes.items() if o in REACHED]
    if reached:
        with fleet.db.session() as s:
            back = list(s.scalars(select(Host.id).where(
                Host.id.in_(reached),
                or_(Host.unreachable_attempts > 0, Host.fault == Fault.UNREACHABLE),
            )))
        for hid in back:
            with fleet.db.session() as s:
                host = s.get(Host, hid, with_for_update=True)
                if host is not None:
                    out[hid] = on_reached(s, fleet, host, source)
    for hid, (o, why) in outcomes.items():
        if o in UNREACHED:
            out[hid] = on_unreached(fleet, hid, o, why, source)
    return out
