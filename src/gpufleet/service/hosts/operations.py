"""Operator actions on hosts: maintenance, retire, unquarantine, declared changes, accepting a
new SSH host key (rekey), removing a host.

Each action works on one host by name; :func:`each` applies it to every host a selector
matches, one transaction per host, so one refusal (an allocated host) does not undo the rest.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from gpufleet.collect.hostkeys import check_fingerprint, is_fingerprint_pin, pin_fingerprint
from gpufleet.domain.changes import DeclaredChangeKind
from gpufleet.domain.events import EventKind
from gpufleet.domain.health import Health
from gpufleet.domain.lifecycle import apply_event
from gpufleet.domain.states import Event, HostState
from gpufleet.errors import ConfigError, Conflict, GpufleetError, InvalidTransition
from gpufleet.service.core.fleet import Fleet, record_event
from gpufleet.service.core.lifecycle import KEEP, reclaim_owed, retrying, transition
from gpufleet.service.core.select import is_explicit, selected_names
from gpufleet.service.hosts.drain import DrainApi, drain_first, drain_or_skip
from gpufleet.store.repo import no_host
from gpufleet.store.tables import (
    CollectionResult,
    FactSnapshot,
    GpuRow,
    Host,
    NicRow,
    Validation,
)
from gpufleet.store.tables import Event as EventRow


def _host(s: Session, name: str) -> Host:
    host = s.scalar(select(Host).where(Host.name == name).with_for_update())
    if host is None:
        raise no_host(s, name)
    return host


def maintenance_on(
    fleet: Fleet,
    name: str,
    reason: str,
    until: datetime | None = None,
    eta: datetime | None = None,
    drain: dict[str, Any] | None = None,
    *,
    no_drain: bool = False,
    drain_timeout: timedelta | None = None,
    drain_api: DrainApi | None = None,
) -> str:
    """Take a host out for maintenance (refused while allocated); ``eta``: when it is
    expected back (default: ``until``), shown in summary, capacity and ``hosts show``;
    ``drain``: how its Slurm node was drained first (or ``no_drain``), kept on the event;
    None: drained here where work runs in Slurm (:func:`drain_first`, the API's way).
    Issue 26: where a cluster is configured the host's pods are evicted first
    (:mod:`gpufleet.service.hosts.drain`; a drain that is blocked refuses the maintenance);
    ``no_drain`` skips that, recorded on the event (``k8s_drain``); ``drain_timeout``: how
    long the Slurm drain waits for running jobs (default 30 min or the lease end)."""
    with fleet.db.session() as s:  # refused transitions are refused before any eviction
        h = _host(s, name)
        apply_event(h.name, HostState(h.state), Event.MAINTENANCE_ON)
    if drain is None:
        drained = drain_first(fleet, name, "maintenance", why=reason, no_drain=no_drain,
                              slurm_timeout=drain_timeout, api=drain_api)
        drain = drained.pop("slurm", None)
    else:
        drained = drain_or_skip(fleet, name, "maintenance", no_drain=no_drain, api=drain_api)
    return _maintenance_on(fleet, name, reason, until, eta, drained, drain)


@retrying
def _maintenance_on(
    fleet: Fleet,
    name: str,
    reason: str,
    until: datetime | None,
    eta: datetime | None,
    drained: dict[str, Any],
    drain: dict[str, Any] | None,
) -> str:
    back = eta or until
    with fleet.db.session() as s:
        h = _host(s, name)
        transition(
            s,
            fleet,
            h,
            Event.MAINTENANCE_ON,
            reason,
            data={
                "until": until.isoformat() if until else None,
                "eta": back.isoformat() if back else None,
                "k8s_drain": drained,
            }
            | ({"drain": drain} if drain is not None else {}),
        )
        h.maintenance_until = until
        h.eta = back
        return h.state


@retrying
def set_eta(fleet: Fleet, name: str, eta: datetime | None) -> str:
    """Say when a host in maintenance or quarantine is expected back (None clears it);
    refused in any other state (InvalidTransition, exit 5)."""
    with fleet.db.session() as s:
        h = _host(s, name)
        if HostState(h.state) not in (HostState.MAINTENANCE, HostState.QUARANTINED):
            raise InvalidTransition(h.name, h.state, "eta", ["maintenance", "quarantined"])
        h.eta = eta
        h.updated_at = fleet.now()
        record_event(
            s,
            fleet,
            EventKind.ETA,
            f"expected back by {eta.isoformat(timespec='minutes')}" if eta else "eta cleared",
            host=h,
            data={"eta": eta.isoformat() if eta else None, "state": str(h.state)},
        )
        return f"{h.state}, back by {eta.isoformat(timespec='minutes')}" if eta else h.state


@retrying
def maintenance_off(fleet: Fleet, name: str, reason: str = "maintenance done") -> str:
    """End maintenance: the host goes to validating, never straight to available."""
    with fleet.db.session() as s:
        h = _host(s, name)
        transition(s, fleet, h, Event.MAINTENANCE_OFF, reason)
        h.maintenance_until = None
        h.eta = None
        return h.state


def retire(
    fleet: Fleet,
    name: str,
    reason: str,
    *,
    no_drain: bool = False,
    drain_timeout: timedelta | None = None,
    drain_api: DrainApi | None = None,
) -> str:
    """Retire a host for good (refused while allocated). Issue 26: drained first wherever
    work runs (:func:`drain_first`: Slurm jobs waited for up to ``drain_timeout``, pods
    evicted; blocked: refused), unless ``no_drain``; recorded on the event (``drain``)."""
    with fleet.db.session() as s:  # refused transitions are refused before any drain
        h = _host(s, name)
        apply_event(h.name, HostState(h.state), Event.RETIRE)
    drained = drain_first(fleet, name, "retire", why=reason, no_drain=no_drain,
                          slurm_timeout=drain_timeout, api=drain_api)
    return _retire(fleet, name, reason, drained)


@retrying
def _retire(fleet: Fleet, name: str, reason: str, drained: dict[str, Any]) -> str:
    with fleet.db.session() as s:
        h = _host(s, name)
        transition(s, fleet, h, Event.RETIRE, reason, data={"drain": drained})
        return h.state


@retrying
def unquarantine(fleet: Fleet, name: str, reason: str, *, force: bool = False) -> str:
    """Operator says the fault is repaired: back to validating.

    A host that owes a passing reclaim (its lessee's leftovers were found, or never seen
    gone) is refused (exit 5, what to run named) unless ``force``: then the waiver is
    recorded (a ``reclaim-waived`` event with what the reclaim had found, the reason and
    the actor) and the host goes through validation as any other."""
    with fleet.db.session() as s:
        h = _host(s, name)
        owed = h.reclaim_due
        if owed and not force and HostState(h.state) is HostState.QUARANTINED:
            raise reclaim_owed(h, Event.UNQUARANTINE)
        transition(
            s,
            fleet,
            h,
            Event.UNQUARANTINE,
            reason,
            data={"fault": h.fault, "fault_reason": h.fault_reason}
            | ({"forced": True, "reclaim_due": owed} if owed else {}),
            health=Health.OK,
            fault=None,
            fault_reason=None,
        )
        h.eta = None
        if owed:
            h.reclaim_due = None
            record_event(
                s,
                fleet,
                EventKind.RECLAIM_WAIVED,
                f"reclaim waived by {fleet.actor}: {reason} (it had found: {owed})",
                host=h,
                data={"reclaim_due": owed, "reason": reason},
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
            data={"ticket": ticket} if ticket else None,
            fault=None if clear else KEEP,
            fault_reason=None if clear else KEEP,
        )
        return h.state


#: What ``change record --kind reimage`` tells the operator: a reimaged host has a new SSH
#: host key, which gpufleet refuses until the operator accepts it.
REIMAGE_HINT = (
    "a reimage gives the host a new SSH host key, which the next collection refuses (alarm, "
    "quarantine); before it, accept the new key with 'gpufleet hosts rekey HOST', or pin the "
    "one you read on the host's console: 'gpufleet hosts rekey HOST --fingerprint SHA256:...' "
    "(ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub)"
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
    return each_name(names, action)


def check_reason(reason: str, what: str = "--reason") -> str:
    """A reason recorded with a change: blank is refused (:class:`ConfigError`, exit 2 /
    HTTP 422), since the event would say nothing of why."""
    if not reason or not reason.strip():
        raise ConfigError(f"{what}: give a reason (it is recorded in the events); it is blank")
    return reason.strip()


def each_change(
    fleet: Fleet,
    selector: str,
    action: Callable[[str], str],
    *,
    verb: str,
    reason: str | None = None,
    confirm_all: bool = False,
) -> list[HostOutcome]:
    """:func:`each` for an action that changes hosts (retire, maintenance, unquarantine,
    change record): a blank ``reason`` is refused first; a selector reaching more than one
    host and more than ``GPUFLEET_CONFIRM_SHARE`` of the non-retired fleet is refused
    (:class:`ConfigError`, exit 2 / HTTP 422) unless ``confirm_all`` (``--all``)."""
    if reason is not None:
        check_reason(reason)
    with fleet.db.session() as s:
        names = selected_names(s, selector)
        share = fleet.settings.confirm_share
        if len(names) > 1 and not confirm_all:
            total = s.scalar(
                select(func.count()).select_from(Host).where(Host.state != HostState.RETIRED)
            )
            if total and len(names) > share * total:
                raise ConfigError(
                    f"{verb} '{selector}' would reach {len(names)} of {total} hosts, more than "
                    f"GPUFLEET_CONFIRM_SHARE ({share:.0%}) of the fleet: check the selector, or "
                    f'confirm with --all (API: "confirm_all": true)'
                )
    return each_name(names, action)


def each_name(names: list[str], action: Callable[[str], str]) -> list[HostOutcome]:
    """:func:`each` over hosts already selected, by name."""
    out: list[HostOutcome] = []
    for name in names:
        try:
            out.append(HostOutcome(name, str(action(name))))
        except GpufleetError as exc:
            out.append(HostOutcome(name, error=exc))
    return out


def named_hosts(fleet: Fleet, selector: str, verb: str) -> list[str]:
    """The hosts an explicit ``selector`` matches, for an action that must not reach the whole
    fleet by accident (``remove``, ``rekey``): empty or ``all`` is a ConfigError (exit 2), no
    match is NotFound (exit 4)."""
    if not is_explicit(selector):
        raise ConfigError(f"{verb}: name the hosts (a name, glob or selector), not '{selector}'")
    with fleet.db.session() as s:
        return selected_names(s, selector)


# --- host keys ------------------------------------------------------------------------------


@dataclass
class Rekeyed:
    """One host's ``hosts rekey``: the fingerprint it had pinned, the one now expected (None:
    the next collection pins the key it is offered), and where the host stands."""

    host: str
    old: str | None = None
    expected: str | None = None
    state: str | None = None
    fault: str | None = None
    error: GpufleetError | None = None


def rekey(fleet: Fleet, name: str, reason: str, fingerprint: str | None = None, *,
          ticket: str | None = None) -> Rekeyed:
    """Accept a new SSH host key for ``name`` (after a reimage).

    Without ``fingerprint`` the pinned key is cleared: the next collection trusts the key it is
    offered and pins it (first use again). With one, only a key with that SHA256 fingerprint
    is accepted from now on (checked during key exchange, so nothing runs on a host offering
    another; that is a host-key change, with its alarm); the first match pins the full key.
    Either way a ``host-key-rekeyed`` event records actor, old and expected fingerprints and
    ``reason`` (and ``ticket``, a campaign's). The host's state is left alone: a host
    quarantined for a changed key stays quarantined until an operator lifts it
    (``unquarantine``)."""
    expected = check_fingerprint(fingerprint) if fingerprint is not None else None
    with fleet.db.session() as s:
        h = _host(s, name)
        old = pin_fingerprint(h.host_key) if h.host_key else None
        if expected is None or expected != old or is_fingerprint_pin(h.host_key):
            h.host_key = expected  # the same key as pinned: keep the full key
        h.updated_at = fleet.now()
        then = (
            f"the next collection accepts only {expected}"
            if expected
            else "the next collection pins the key it is offered (first use)"
        )
        record_event(
            s,
            fleet,
            EventKind.HOST_KEY_REKEYED,
            f"host key re-pinned ({reason}): was {old or 'none'}; {then}",
            host=h,
            data={"old": old, "expected": expected, "reason": reason}
            | ({"ticket": ticket} if ticket else {}),
        )
        return Rekeyed(h.name, old, expected, h.state, h.fault)


def rekey_hosts(
    fleet: Fleet, selector: str, reason: str, fingerprint: str | None = None
) -> list[Rekeyed]:
    """:func:`rekey` every host ``selector`` names; a fingerprint fits one host only."""
    if fingerprint is not None:
        check_fingerprint(fingerprint)  # a typo is refused before any host is touched
    names = named_hosts(fleet, selector, "rekey")
    if fingerprint is not None and len(names) > 1:
        raise ConfigError(
            f"--fingerprint is one host's key, but '{selector}' matches {len(names)} hosts "
            f"({', '.join(names[:5])}{' ...' if len(names) > 5 else ''})"
        )
    out: list[Rekeyed] = []
    for name in names:
        try:
            out.append(rekey(fleet, name, reason, fingerprint))
        except GpufleetError as exc:
            out.append(Rekeyed(name, error=exc))
    return out


# --- removing hosts -------------------------------------------------------------------------


def remove_host(fleet: Fleet, name: str, reason: str) -> str:
    """Remove ``name`` and everything stored about it (facts, GPU and NIC rows, collection
    results, validations); returns the state it was in.

    Refused while the host is allocated (InvalidTransition, exit 5) or claimed by a running
    collection (Conflict, exit 6). The audit log keeps the host's events (their ``host_id``
    cleared, the name kept) and gains a ``host-removed`` event with the host's last state."""
    now = fleet.now()
    with fleet.db.session() as s:
        h = _host(s, name)
        if HostState(h.state) is HostState.ALLOCATED:
            raise InvalidTransition(
                h.name, h.state, "remove", ["any state but allocated (release it first)"]
            )
        if h.claim_token is not None and h.claimed_until is not None and h.claimed_until > now:
            raise Conflict(
                what=f"host {h.name} (claimed by a running collection until "
                f"{h.claimed_until.isoformat(timespec='seconds')})"
            )
        host_id, version, state = h.id, h.state_version, h.state
        snapshots = s.scalar(
            select(func.count()).select_from(FactSnapshot).where(FactSnapshot.host_id == host_id)
        )
        last = {
            "state": str(state),
            "health": str(h.health),
            "fault": str(h.fault) if h.fault else None,
            "fault_reason": h.fault_reason,
            "address": h.address,
            "port": h.port,
            "groups": list(h.groups or []),
            "pool": h.pool,
            "host_key": pin_fingerprint(h.host_key) if h.host_key else None,
            "last_outcome": str(h.last_outcome) if h.last_outcome else None,
            "snapshots": snapshots,
            "reason": reason,
        }
        s.expunge(h)
        # The audit log outlives the host: its events keep the name, lose the row id.
        s.execute(update(EventRow).where(EventRow.host_id == host_id).values(host_id=None))
        ev = record_event(
            s,
            fleet,
            EventKind.HOST_REMOVED,
            f"host removed ({reason}); it was {state}",
            data=last,
        )
        ev.host_name = name
        s.execute(update(Host).where(Host.id == host_id).values(latest_snapshot_id=None))
        for table in (Validation, CollectionResult, GpuRow, NicRow, FactSnapshot):
            s.execute(delete(table).where(table.host_id == host_id))
        gone = s.execute(delete(Host).where(Host.id == host_id, Host.state_version == version))
        if getattr(gone, "rowcount", 0) != 1:
            raise Conflict(what=f"host {name}")  # its state changed meanwhile; nothing removed
        return str(state)
