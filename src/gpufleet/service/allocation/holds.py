"""Holds someone else put on a host's node, as the syncs last saw them: a Kubernetes node
cordoned without gpufleet's record, a Slurm node drained with another reason.

The syncs (:mod:`gpufleet.service.exports.k8s`, :mod:`gpufleet.service.exports.slurm`) record an
``external-hold`` event when what they see changes (held, or no longer held), in the
transaction where they record the rest; campaigns read the last observation per system and
skip held hosts (never taken over). Nothing here does network I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.domain.events import EventKind
from gpufleet.service.core.fleet import Fleet, record_event
from gpufleet.store.tables import Event, Host


def _last(s: Session, host_ids: Iterable[int]) -> dict[tuple[int, str], Event]:
    """The newest ``external-hold`` event per (host id, system)."""
    ids = list(host_ids)
    out: dict[tuple[int, str], Event] = {}
    for i in range(0, len(ids), 500):
        rows = s.scalars(
            select(Event)
            .where(Event.kind == EventKind.EXTERNAL_HOLD, Event.host_id.in_(ids[i:i + 500]))
            .order_by(Event.id)
        )
        for e in rows:
            assert e.host_id is not None
            out[(e.host_id, str(e.data.get("system", "")))] = e
    return out


def record_holds(
    s: Session, fleet: Fleet, system: str, seen: Mapping[str, tuple[Host, str, str | None]]
) -> None:
    """``seen``: host name -> (host, node, why held or None) as ``system`` reports it now;
    an event for every host whose observation differs from the last one recorded (a host
    never seen held records nothing until it is)."""
    last = _last(s, (h.id for h, _, _ in seen.values()))
    for host, node, why in seen.values():
        before = last.get((host.id, system))
        was = bool(before is not None and before.data.get("held"))
        now = why is not None
        if now == was and (not now or (before is not None and before.data.get("detail") == why)):
            continue
        record_event(
            s, fleet, EventKind.EXTERNAL_HOLD,
            f"{system} node {node}: {why}" if why else
            f"{system} node {node}: no longer held by someone else",
            host=host,
            data={"system": system, "node": node, "held": why is not None, "detail": why},
        )


def held(s: Session, host_ids: Iterable[int]) -> dict[int, str]:
    """Host id -> why, for hosts some system last saw held by someone else."""
    out: dict[int, str] = {}
    for (host_id, _), e in sorted(_last(s, host_ids).items()):
        if e.data.get("held"):
            why = str(e.data.get("detail") or e.message)
            out[host_id] = f"{out[host_id]}; {why}" if host_id in out else why
    return out
