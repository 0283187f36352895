"""Leases enforced in Slurm (issue 26): one reservation ``gpufleet-lease-<id>`` per lease
holding hosts (now or in the future), for its hosts, window, users and account (``Accounts=``
when the lease names one); removed when the lease is released, expires or is cancelled;
updated when it is renewed. Someone else's reservation
on a gpufleet host is respected: the host is held (a ``slurm-foreign-reservation`` alarm keeps
it out of placement and free capacity; an ``external-hold`` event makes campaigns skip it).

Like the node sync (:mod:`gpufleet.service.exports.slurm`): the leases are read in one short
transaction, ``scontrol`` runs with no transaction open, and what was done or failed is
recorded in one short transaction (``slurm-reservation`` events; a ``slurm-reservation``
alarm, critical, on the hosts of a lease Slurm does not enforce, closed once it does).
The decisions are pure (:mod:`gpufleet.domain.slurm_reservations`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import select

from gpufleet.collect.slurm import SlurmClient
from gpufleet.domain.events import AlarmKind, AlarmSeverity, EventKind
from gpufleet.domain.leases import LeaseState
from gpufleet.domain.slurm_reservations import (
    ResAction,
    ResChange,
    Reservation,
    WantedReservation,
    foreign_holds,
    plan_reservations,
)
from gpufleet.domain.sync import Cause, Disagreement, Target
from gpufleet.errors import LocalIOError
from gpufleet.service.allocation.holds import record_holds
from gpufleet.service.core.alarms import close_alarms, raise_alarm
from gpufleet.service.core.fleet import Fleet, record_event
from gpufleet.store.tables import Alarm, Host, Lease

#: The ``external-hold`` system name of a foreign reservation.
HOLD_SYSTEM = "slurm-reservation"


@dataclass
class ReservationReport:
    """What a reservation sync planned, did, and could not do."""

    changes: list[ResChange]
    existing: list[Reservation]
    held: dict[str, str]  # host -> someone else's reservation on it
    dry_run: bool = False
    done: list[str] = field(default_factory=list)  # "create gpufleet-lease-3"
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors

    def as_json(self) -> dict[str, object]:
        return {"changes": [c.as_json() for c in self.changes], "done": self.done,
                "errors": self.errors, "held": self.held,
                "reservations": [r.as_json() for r in self.existing]}


def wanted_reservations(fleet: Fleet) -> tuple[list[WantedReservation], list[str]]:
    """(a reservation per lease holding hosts, every gpufleet host name); one transaction."""
    with fleet.db.session() as s:
        names = list(s.scalars(select(Host.name).order_by(Host.name)))
        leases = s.scalars(
            select(Lease).where(Lease.state.in_([LeaseState.RESERVED, LeaseState.ACTIVE]))
            .order_by(Lease.id)
        ).all()
        wanted = [
            WantedReservation(
                lease.id,
                tuple(sorted(lh.host_name for lh in lease.hosts if lh.holding)),
                tuple(sorted(set(lease.users or [lease.owner]))),
                lease.starts_at,
                lease.ends_at,
                (str(lease.request["account"]),) if (lease.request or {}).get("account") else (),
            )
            for lease in leases
        ]
    return wanted, names


def reservation_sync(
    fleet: Fleet, client: SlurmClient | None = None, dry_run: bool = False
) -> ReservationReport:
    """Make Slurm's ``gpufleet-lease-*`` reservations match the leases; see the module."""
    client = client or SlurmClient()
    wanted, names = wanted_reservations(fleet)
    existing = client.reservations()  # no transaction open while scontrol runs
    now = fleet.now()
    changes = plan_reservations(wanted, existing, now)
    report = ReservationReport(changes, existing, foreign_holds(existing, names, now), dry_run)
    if dry_run:
        return report
    failed: dict[str, str] = {}
    applied: list[tuple[ResChange, str]] = []
    for c in changes:
        try:
            note = _apply(client, c)
        except LocalIOError as exc:
            report.errors.append(f"{c.name}: {c.action}: {exc}")
            failed[c.name] = str(exc)
            continue
        applied.append((c, note))
        report.done.append(f"{c.action} {c.name}")
    _record(fleet, wanted, names, applied, failed, report.held)
    return report


def _apply(client: SlurmClient, c: ResChange) -> str:
    """Run one change; a note for the event (empty, or how a busy reservation was ended)."""
    if c.action is ResAction.CREATE:
        client.create_reservation(c.name, c.fields)
    elif c.action is ResAction.UPDATE:
        client.update_reservation(c.name, c.fields)
    else:
        try:
            client.delete_reservation(c.name)
        except LocalIOError as exc:
            if "in use" not in str(exc).lower():
                raise
            # a job still runs in it: Slurm refuses the delete; ending it now frees the nodes
            # for everyone (the job keeps running), and a later sync deletes it
            client.update_reservation(c.name, {"EndTime": "now"})
            return "in use by a running job: ended now instead of deleted"
    return ""


def _record(
    fleet: Fleet,
    wanted: list[WantedReservation],
    names: list[str],
    applied: list[tuple[ResChange, str]],
    failed: dict[str, str],
    held: dict[str, str],
) -> None:
    with fleet.db.session() as s:
        rows = {h.name: h for h in s.scalars(select(Host))}
        open_kinds = {(a.host_id, a.kind) for a in s.scalars(select(Alarm).where(
            Alarm.closed_at.is_(None), Alarm.kind.in_(
                [AlarmKind.SLURM_RESERVATION, AlarmKind.SLURM_FOREIGN_RESERVATION])))}
        for c, note in applied:
            for node in c.nodes:
                if node in rows:
                    record_event(
                        s, fleet, EventKind.SLURM_RESERVATION,
                        f"slurm: {c.action} reservation {c.name} ({c.why})"
                        + (f"; {note}" if note else ""),
                        host=rows[node],
                        data={"action": c.action.value, "reservation": c.name,
                              "lease": c.lease_id, "set": dict(c.fields), "note": note},
                    )
        for w in wanted:
            for node in w.nodes:
                host = rows.get(node)
                if host is None:
                    continue
                if w.name in failed:
                    if (host.id, AlarmKind.SLURM_RESERVATION) not in open_kinds:
                        raise_alarm(s, fleet, host, AlarmKind.SLURM_RESERVATION,
                                    AlarmSeverity.CRITICAL,
                                    f"lease {w.lease_id} not enforced in Slurm: reservation "
                                    f"{w.name}: {failed[w.name]}",
                                    {"reservation": w.name, "lease": w.lease_id})
                elif (host.id, AlarmKind.SLURM_RESERVATION) in open_kinds:
                    close_alarms(s, fleet, host, AlarmKind.SLURM_RESERVATION,
                                 f"reservation {w.name} matches lease {w.lease_id}")
        for name in names:
            host = rows[name]
            why = held.get(name)
            is_open = (host.id, AlarmKind.SLURM_FOREIGN_RESERVATION) in open_kinds
            if why is not None and not is_open:
                raise_alarm(s, fleet, host, AlarmKind.SLURM_FOREIGN_RESERVATION,
                            AlarmSeverity.WARNING, f"held: {why}", {"detail": why})
            elif why is None and is_open:
                close_alarms(s, fleet, host, AlarmKind.SLURM_FOREIGN_RESERVATION,
                             "no other Slurm reservation on the node")
        record_holds(s, fleet, HOLD_SYSTEM, {n: (rows[n], n, held.get(n)) for n in names})


def reservation_disagreements(report: ReservationReport) -> list[Disagreement]:
    """``sync status``: per host, a lease Slurm does not enforce (yet) and someone else's
    reservation holding it (from a dry-run :func:`reservation_sync`)."""
    out: list[Disagreement] = []
    for c in report.changes:
        what = {
            ResAction.CREATE: f"lease {c.lease_id} has no Slurm reservation",
            ResAction.UPDATE: f"reservation {c.name} differs from lease {c.lease_id}: {c.why}",
            ResAction.DELETE: f"reservation {c.name} outlives its lease {c.lease_id}",
        }[c.action]
        for node in c.nodes:
            out.append(Disagreement(node, Target.SLURM, Cause.PENDING, what,
                                    f"{c.action} reservation {c.name}"))
    for host, why in sorted(report.held.items()):
        out.append(Disagreement(host, Target.SLURM, Cause.FOREIGN, why,
                                "nothing: the host stays held while it exists"))
    return out
