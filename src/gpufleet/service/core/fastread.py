"""The fast read layer (issue 25; issue 30 item 3): the reads people type most, in plain SQL
on the database driver's own connection, returning the typed views the commands render.

One read implementation, two start-ups: the entry point's lean start
(:mod:`gpufleet.cli.entry`) opens the database with the driver itself
(:func:`gpufleet.store.readmodel.open_read`: stdlib ``sqlite3``, ``psycopg``; no SQLAlchemy)
and the Typer commands, the API and every other caller of the service read through a
connection of the store's engine (:func:`fleet_read`): the same SQL, the same
:class:`HostView` / :class:`LeaseView`.

Light on purpose: importing this module imports no SQLAlchemy, ORM table or pydantic.

A read answers None where it cannot answer exactly what the command prints: a selector it
does not take (an error to report: the store's query reports it), a selection that matches
nothing (the store's query names the unknown host or pool). The caller then runs the store's
query (:func:`gpufleet.service.views.hosts.list_hosts`), which reports in its one way.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from gpufleet.domain.decision import Decision
from gpufleet.domain.events import CollectionOutcome, EventKind, EvidenceKind
from gpufleet.domain.health import Fault, Health
from gpufleet.domain.leases import HOLDING, LeaseState
from gpufleet.domain.remediation import Action
from gpufleet.domain.states import HostState
from gpufleet.errors import ConfigError
from gpufleet.service.core.select_terms import (
    check_state,
    check_term_count,
    check_terms,
    is_explicit,
    like_literal,
    name_like,
    split_term,
)
from gpufleet.store.readmodel import Read, engine_read, json_value, utc

if TYPE_CHECKING:
    from gpufleet.domain.facts import HostFacts
    from gpufleet.service.core.fleet import Fleet


@contextmanager
def fleet_read(fleet: Fleet) -> Iterator[Read]:
    """A :class:`~gpufleet.store.readmodel.Read` on a connection of ``fleet``'s engine."""
    with engine_read(fleet.db.engine) as read:
        yield read


# --- hosts list --------------------------------------------------------------------------------


@dataclass
class HostView:
    """One row of ``hosts list``."""

    name: str
    address: str
    state: str
    health: str
    fault: str | None
    pool: str | None
    groups: list[str]
    gpu_count: int | None
    gpu_model: str | None
    driver: str | None
    cuda: str | None
    profiles: list[str]
    last_collected_at: datetime | None
    last_outcome: str | None
    last_reason: str | None
    status_reason: str | None
    #: When a host in maintenance or quarantine is expected back (None: not said).
    eta: datetime | None = None


#: A listed host: the host's own columns a row shows and its latest snapshot's derived
#: columns (the store's ``LIST_COLUMNS``, in plain SQL).
_HOST_LIST = (
    "SELECT h.name, h.address, h.state, h.health, h.fault, h.pool, h.groups, h.profiles,"
    " h.last_collected_at, h.last_outcome, h.last_reason, h.status_reason, h.eta,"
    " s.gpu_count, s.gpu_model, s.driver, s.cuda"
    " FROM hosts h LEFT JOIN fact_snapshots s ON s.id = h.latest_snapshot_id"
)

#: A host whose eta is shown (maintenance or quarantine).
_ETA_STATES = (HostState.MAINTENANCE, HostState.QUARANTINED)


def _where(read: Read, selector: str | None) -> tuple[str, list[Any]] | None:
    """The WHERE clause (empty: every host) and parameters of ``selector`` (the syntax of
    :mod:`gpufleet.service.core.select`), or None for a selector this read does not take
    (one the store's query refuses: it says why)."""
    if not is_explicit(selector):
        return "", []
    assert selector is not None
    clauses: list[str] = []
    params: list[Any] = []
    try:
        check_term_count(selector)
        for term in check_terms(selector):
            kind, value = split_term(term)
            if kind == "name":
                clauses.append("lower(h.name) LIKE {p} ESCAPE {p}")
                params += [name_like(term, value), "\\"]
            elif kind == "pool":
                clauses.append("h.pool = {p}")
                params.append(value)
            elif kind == "rack":
                clauses.append("lower(h.rack) = {p}")
                params.append(value.lower())
            elif kind == "state":
                clauses.append("h.state = {p}")
                params.append(check_state(value).value)
            elif kind == "group":
                clauses.append("lower(CAST(h.groups AS TEXT)) LIKE {p} ESCAPE {p}")
                params += [f'%"{like_literal(value.lower())}"%', "\\"]
            elif kind == "model":
                like = (
                    "s.gpu_model ILIKE {p}"
                    if read.postgres
                    else "lower(s.gpu_model) LIKE lower({p})"
                )
                clauses.append(f"({like} ESCAPE {{p}})")
                params += [f"%{like_literal(value)}%", "\\"]
            else:
                return None
    except ConfigError:
        return None
    return " WHERE " + " OR ".join(clauses), params


def host_list(read: Read, selector: str | None = None) -> list[HostView] | None:
    """The hosts ``selector`` selects (None or ``all``: every host), by name, as ``hosts
    list`` shows them; None when this read cannot answer (see the module's doc)."""
    where = _where(read, selector)
    if where is None:
        return None
    sql, params = where
    rows = read.rows(_HOST_LIST + sql + " ORDER BY h.name", params)
    if not rows and is_explicit(selector):
        return None  # the store's query says which name is unknown
    lists: dict[str, list[str]] = {}
    return [host_view(r, lists) for r in rows]


def host_view(r: Sequence[Any], lists: dict[str, list[str]]) -> HostView:
    """A host-list row (the columns of ``_HOST_LIST``, which are ``service.views.hosts.
    LIST_COLUMNS`` in the same order) as :class:`HostView`, from the driver's values or the
    ORM's (already typed: the conversions take both); unpacked by position; ``lists``: the
    JSON lists decoded so far, by their text (a fleet repeats a few)."""
    (name, address, state, health, fault, pool, groups, profiles, collected, outcome, reason,
     status, eta, gpu_count, gpu_model, driver, cuda) = r  # fmt: skip
    state = HostState(state)
    return HostView(
        name=name,
        address=address,
        state=state,
        health=Health(health),
        fault=None if fault is None else Fault(fault),
        pool=pool,
        groups=_json_list(groups, lists),
        gpu_count=gpu_count,
        gpu_model=gpu_model,
        driver=driver,
        cuda=cuda,
        profiles=_json_list(profiles, lists),
        last_collected_at=utc(collected),
        last_outcome=None if outcome is None else CollectionOutcome(outcome),
        last_reason=reason,
        status_reason=status,
        eta=utc(eta) if state in _ETA_STATES else None,
    )


def _json_list(value: Any, lists: dict[str, list[str]]) -> list[str]:
    """A copy of the JSON list ``value`` (text on SQLite, decoded once per distinct text)."""
    if not isinstance(value, str):
        return list(json_value(value) or [])
    got = lists.get(value)
    if got is None:
        got = lists[value] = list(json_value(value) or [])
    return list(got)


# --- leases show -------------------------------------------------------------------------------


@dataclass
class LeaseView:
    """A lease as commands print it."""

    id: int
    owner: str
    purpose: str
    state: str
    actor: str
    starts_at: datetime
    ends_at: datetime
    created_at: datetime
    hosts: list[str]
    gpus: int
    gpu_uuids: dict[str, list[str]]
    request: dict[str, Any]
    released_at: datetime | None = None
    notified_at: datetime | None = None
    reason: str | None = None
    #: The lessee's login users (``allocate --user``); None: not recorded.
    users: list[str] | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "owner": self.owner,
            "purpose": self.purpose,
            "state": self.state,
            "actor": self.actor,
            "starts_at": self.starts_at,
            "ends_at": self.ends_at,
            "created_at": self.created_at,
            "hosts": self.hosts,
            "gpus": self.gpus,
            "gpu_uuids": self.gpu_uuids,
            "request": self.request,
            "released_at": self.released_at,
            "notified_at": self.notified_at,
            "reason": self.reason,
            "users": self.users,
        }


_LEASE = (
    "SELECT id, owner, purpose, state, actor, starts_at, ends_at, created_at, request,"
    " released_at, notified_at, reason, users FROM leases WHERE id = {p}"
)
_LEASE_HOSTS = (
    "SELECT host_name, gpus, gpu_uuids FROM lease_hosts WHERE lease_id = {p} ORDER BY host_name, id"
)


def lease(read: Read, lease_id: int) -> LeaseView | None:
    """The lease ``lease_id`` with its hosts (by name) and their GPU UUIDs; None: no such
    lease."""
    found = read.rows(_LEASE, (lease_id,))
    if not found:
        return None
    (lid, owner, purpose, state, actor, starts, ends, created, request, released, notified,
     reason, users) = found[0]  # fmt: skip
    hosts = read.rows(_LEASE_HOSTS, (lease_id,))
    users = json_value(users)
    return LeaseView(
        id=lid,
        owner=owner,
        purpose=purpose,
        state=LeaseState(state).value,
        actor=actor,
        starts_at=_time(starts),
        ends_at=_time(ends),
        created_at=_time(created),
        hosts=[h for h, _, _ in hosts],
        gpus=sum(g for _, g, _ in hosts),
        gpu_uuids={h: list(json_value(u) or []) for h, _, u in hosts},
        request=dict(json_value(request) or {}),
        released_at=utc(released),
        notified_at=utc(notified),
        reason=reason,
        users=list(users) if users is not None else None,
    )


def _time(value: Any) -> datetime:
    got = utc(value)
    assert got is not None  # a NOT NULL column
    return got


# --- hosts show: the remediation ladder ------------------------------------------------------

_LADDER = (
    "SELECT r.id, r.started_at, r.action, r.outcome, r.gpus, r.ticket, r.eta, r.rule, r.detail,"
    " r.actor FROM remediations r JOIN hosts h ON h.id = r.host_id WHERE h.name = {p}"
    " ORDER BY r.started_at, r.id"
)


def remediation_ladder(read: Read, name: str) -> list[dict[str, Any]]:
    """The remediation rungs the host ``name`` has climbed, oldest first (``hosts show``)."""
    return [
        {
            "id": rid,
            "at": _time(at),
            "action": Action(action),
            "outcome": outcome,
            "gpus": list(json_value(gpus) or []),
            "ticket": ticket,
            "eta": utc(eta),
            "rule": rule,
            "detail": detail,
            "actor": actor,
        }
        for rid, at, action, outcome, gpus, ticket, eta, rule, detail, actor in read.rows(
            _LADDER, (name,)
        )
    ]


# --- hosts show --------------------------------------------------------------------------------


@dataclass
class AlarmView:
    """An alarm for ``hosts show`` and the summary."""

    host: str
    kind: str
    severity: str
    opened_at: datetime
    message: str
    acknowledged_by: str | None = None
    closed_at: datetime | None = None
    reason: str | None = None


@dataclass
class HostDetail:
    """Everything ``hosts show`` prints."""

    view: HostView
    facts: HostFacts | None
    expected: dict[str, Any]
    host_key: str | None
    events: list[dict[str, Any]] = field(default_factory=list)
    collections: list[dict[str, Any]] = field(default_factory=list)
    alarms: list[AlarmView] = field(default_factory=list)  # open ones, oldest first
    evidence: list[dict[str, Any]] = field(default_factory=list)  # newest first
    #: The latest validation (decision, baseline, profiles, results, expiry); None: never.
    validation: dict[str, Any] | None = None
    #: Scheduling labels and taints (``summary.host_labels``), holding leases and reservations.
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[str] = field(default_factory=list)
    leases: list[LeaseView] = field(default_factory=list)
    #: issue 10: the remediation ladder the host climbed (oldest first), and a partial host's
    #: usable GPU count (None: every GPU) and unusable GPUs.
    remediations: list[dict[str, Any]] = field(default_factory=list)
    usable_gpus: int | None = None
    unusable_gpus: list[dict[str, Any]] = field(default_factory=list)
    #: issue 24: why the host owes a passing reclaim (None: it owes none).
    reclaim_due: str | None = None


_HOST_DETAIL = (
    _HOST_LIST.replace("SELECT ", "SELECT h.id, h.expected, h.host_key, h.usable_gpus,"
                       " h.unusable_gpus, h.reclaim_due, s.facts, ", 1)
    + " WHERE h.name = {p}"
)
_EVENTS = (
    "SELECT at, actor, kind, message, data FROM events WHERE host_id = {p}"
    " ORDER BY at DESC, id DESC LIMIT {p}"
)
_COLLECTIONS = (
    "SELECT run_id, outcome, reason, duration_s FROM collection_results WHERE host_id = {p}"
    " ORDER BY id DESC LIMIT 5"
)
_EVIDENCE = (
    "SELECT recorded_at, kind, passed, summary, source, actor FROM evidence WHERE host_id = {p}"
    " ORDER BY recorded_at DESC, id DESC LIMIT 5"
)
_VALIDATION = (
    "SELECT at, decision, baseline, profiles, results, expires_at FROM validations"
    " WHERE host_id = {p} ORDER BY at DESC, id DESC LIMIT 1"
)
_ALARMS = (
    "SELECT kind, severity, opened_at, message, acknowledged_by FROM alarms"
    " WHERE host_id = {p} AND closed_at IS NULL ORDER BY opened_at, id"
)
_HOLDING = (
    "SELECT id FROM leases WHERE state IN ({states}) AND id IN"
    " (SELECT lease_id FROM lease_hosts WHERE host_id = {p}) ORDER BY starts_at, id"
)


def host_detail(
    read: Read, name: str, *, events: int = 15
) -> tuple[HostDetail, dict[str, Any] | None] | None:
    """The page of the host ``name`` (exactly that name) without its labels and taints, and
    its latest facts document as stored (None: never collected; the caller validates it into
    :attr:`HostDetail.facts`); None when there is no such host (the store's lookup names it,
    with the nearest known names)."""
    found = read.rows(_HOST_DETAIL, (name,))
    if len(found) != 1:
        return None
    hid, expected, host_key, usable, unusable, reclaim, facts, *row = found[0]
    view = host_view(tuple(row), {})
    holding = sorted(s.value for s in HOLDING)
    lease_ids = read.rows(
        _HOLDING.replace("{states}", ", ".join(["{p}"] * len(holding))), (*holding, hid)
    )
    leases = [lease(read, lid) for (lid,) in lease_ids]
    val = read.rows(_VALIDATION, (hid,))
    detail = HostDetail(
        view=view,
        facts=None,
        expected=dict(json_value(expected) or {}),
        host_key=host_key,
        events=[
            {"at": _time(at), "actor": actor, "kind": EventKind(kind), "message": message,
             "data": json_value(data)}
            for at, actor, kind, message, data in read.rows(_EVENTS, (hid, events))
        ],
        collections=[
            {"run_id": run, "outcome": CollectionOutcome(outcome), "reason": reason,
             "duration_s": round(duration, 3)}
            for run, outcome, reason, duration in read.rows(_COLLECTIONS, (hid,))
        ],
        alarms=[
            AlarmView(host=view.name, kind=kind, severity=severity, opened_at=_time(at),
                      message=message, acknowledged_by=ack)
            for kind, severity, at, message, ack in read.rows(_ALARMS, (hid,))
        ],
        evidence=[
            {"at": _time(at), "kind": EvidenceKind(kind),
             "passed": None if passed is None else bool(passed), "summary": summary,
             "source": source, "actor": actor}
            for at, kind, passed, summary, source, actor in read.rows(_EVIDENCE, (hid,))
        ],
        validation=None if not val else _validation(val[0]),
        leases=[lv for lv in leases if lv is not None],
        remediations=remediation_ladder(read, view.name),
        usable_gpus=usable,
        unusable_gpus=list(json_value(unusable) or []),
        reclaim_due=reclaim,
    )  # fmt: skip
    return detail, json_value(facts)


def _validation(r: tuple[Any, ...]) -> dict[str, Any]:
    at, decision, baseline, profiles, results, expires = r
    return {
        "at": _time(at),
        "decision": str(Decision(decision)),
        "baseline": baseline,
        "profiles": list(json_value(profiles) or []),
        "results": list(json_value(results) or []),
        "expires_at": utc(expires),
    }


def with_facts(detail: HostDetail, facts: dict[str, Any] | None) -> HostDetail:
    """``detail`` with its stored facts document validated (:class:`~gpufleet.domain.facts.
    HostFacts`, imported here: pydantic is the page's, not this module's)."""
    from gpufleet.domain.facts import HostFacts

    detail.facts = None if facts is None else HostFacts.model_validate(facts)
    return detail
