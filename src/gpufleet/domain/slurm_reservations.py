"""Leases enforced in Slurm as reservations (issue 26), and Slurm's other reservations seen.

Pure: reservations come in as values (``scontrol show reservation -o``, parsed by
:func:`parse_reservations`), the wanted ones from the leases, and :func:`plan_reservations`
says what to create, update or delete. gpufleet owns exactly the reservations named
``gpufleet-lease-<id>`` (:func:`reservation_name`); every other reservation is someone else's:
never changed, and a host it covers is held (:func:`foreign_holds`).

A lease's reservation covers its hosts for its window and admits its users (``allocate
--user``, else the owner) and, when the lease names one, its Slurm account (``allocate
--account``: ``Accounts=``; Slurm then admits a job only when both its user and its account
match): another user's job on those nodes stays pending. A lease that has
started is reserved from now (Slurm refuses a start in the past); a future lease from its
start. Flag ``IGNORE_JOBS``: jobs already running on the nodes do not stop the lease being
enforced (Slurm adds ``SPEC_NODES`` itself: the nodes named, never others it picks).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum

from gpufleet.errors import ParseError

#: The name prefix of every reservation gpufleet owns.
RESERVATION_PREFIX = "gpufleet-lease-"
#: The flags gpufleet creates its reservations with.
RESERVATION_FLAGS = "IGNORE_JOBS"
_NULL = "(null)"
_SOURCE = "scontrol show reservation -o"
_FIELD = re.compile(r"(?:^|\s)([A-Za-z]+)=")
_REQUIRED = ("ReservationName", "StartTime", "EndTime", "Nodes", "State")


def reservation_name(lease_id: int) -> str:
    """``gpufleet-lease-<id>``."""
    return f"{RESERVATION_PREFIX}{lease_id}"


def lease_of(name: str) -> int | None:
    """The lease id of a gpufleet reservation name; None for anyone else's reservation."""
    rest = name.removeprefix(RESERVATION_PREFIX)
    return int(rest) if rest != name and rest.isdigit() else None


def expand_hostlist(text: str) -> tuple[str, ...]:
    """Slurm's hostlist (``gpu-[01-03,05],cpu-1``) as names, in order; ``""``/``(null)``:
    none. A bracket that does not close is a ParseError."""
    if not text or text == _NULL:
        return ()
    out: list[str] = []
    for part in _split_top(text):
        m = re.fullmatch(r"([^\[\]]*)\[([^\[\]]+)\]([^\[\]]*)", part)
        if m is None:
            if "[" in part or "]" in part:
                raise ParseError(_SOURCE, f"hostlist {part[:80]!a} cannot be read")
            out.append(part)
            continue
        head, ranges, tail = m.groups()
        for r in ranges.split(","):
            lo, _, hi = r.partition("-")
            if not lo.isdigit() or (hi and not hi.isdigit()):
                raise ParseError(_SOURCE, f"hostlist range {r[:40]!a} cannot be read")
            for n in range(int(lo), int(hi or lo) + 1):
                out.append(f"{head}{str(n).zfill(len(lo))}{tail}")
    return tuple(out)


def _split_top(text: str) -> list[str]:
    """Split at commas outside brackets."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p for p in parts if p]


def _names(value: str) -> tuple[str, ...]:
    return () if not value or value == _NULL else tuple(sorted(value.split(",")))


def slurm_time(value: str, where: str) -> datetime:
    """A Slurm time (``2026-12-05T14:01:56``, local time without a zone) as UTC."""
    try:
        return datetime.fromisoformat(value).astimezone(UTC)
    except ValueError:
        raise ParseError(_SOURCE, f"{where}: time {value[:40]!a} cannot be read") from None


@dataclass(frozen=True)
class Reservation:
    """One reservation as Slurm reports it."""

    name: str
    start: datetime
    end: datetime
    nodes: tuple[str, ...]
    users: tuple[str, ...] = ()
    accounts: tuple[str, ...] = ()
    state: str = ""  # ACTIVE, INACTIVE
    flags: tuple[str, ...] = ()

    @property
    def lease_id(self) -> int | None:
        return lease_of(self.name)

    def as_json(self) -> dict[str, object]:
        return {"name": self.name, "start": self.start.isoformat(), "end": self.end.isoformat(),
                "nodes": list(self.nodes), "users": list(self.users),
                "accounts": list(self.accounts), "state": self.state}


def parse_reservations(text: str) -> list[Reservation]:
    """Reservations of ``scontrol show reservation -o`` (one per line, ``Key=value``
    separated by blanks; "No reservations in the system" when there are none). A line
    without a required field is a ParseError naming the line."""
    out: list[Reservation] = []
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if len(lines) == 1 and lines[0].strip() == "No reservations in the system":
        return out
    for n, line in enumerate(lines, 1):
        keys = list(_FIELD.finditer(line))
        fields: dict[str, str] = {}
        for i, m in enumerate(keys):
            end = keys[i + 1].start() if i + 1 < len(keys) else len(line)
            fields[m.group(1)] = line[m.end():end].strip()
        missing = [k for k in _REQUIRED if k not in fields]
        if missing:
            raise ParseError(_SOURCE, f"no {', '.join(missing)}: not a reservation line",
                             line=n)
        where = f"reservation {fields['ReservationName'][:64]!a}"
        out.append(Reservation(
            name=fields["ReservationName"],
            start=slurm_time(fields["StartTime"], where),
            end=slurm_time(fields["EndTime"], where),
            nodes=expand_hostlist(fields["Nodes"]),
            users=_names(fields.get("Users", "")),
            accounts=_names(fields.get("Accounts", "")),
            state=fields["State"],
            flags=_names(fields.get("Flags", "")),
        ))
    return out


@dataclass(frozen=True)
class WantedReservation:
    """What a lease needs in Slurm."""

    lease_id: int
    nodes: tuple[str, ...]
    users: tuple[str, ...]
    start: datetime
    end: datetime
    accounts: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return reservation_name(self.lease_id)


class ResAction(StrEnum):
    """What a sync does to one gpufleet reservation."""

    CREATE = "create"
    UPDATE = "update"
    DELETE = "delete"


@dataclass(frozen=True)
class ResChange:
    """One change to one reservation: the fields to set (``EndTime``, ``Nodes``...) and why."""

    action: ResAction
    name: str
    lease_id: int | None
    why: str
    nodes: tuple[str, ...] = ()
    fields: Mapping[str, str] = field(default_factory=dict)

    def as_json(self) -> dict[str, object]:
        return {"action": self.action.value, "reservation": self.name, "lease": self.lease_id,
                "why": self.why, "nodes": list(self.nodes), "set": dict(self.fields)}


#: Slurm keeps times to the second: closer than this is the same time.
_SLACK_S = 1.5


def _local(t: datetime) -> str:
    """A time as scontrol takes it (local, no zone)."""
    return t.astimezone().strftime("%Y-%m-%dT%H:%M:%S")


def plan_reservations(
    wanted: Iterable[WantedReservation], existing: Iterable[Reservation], now: datetime
) -> list[ResChange]:
    """Create the wanted reservations Slurm lacks, update those that differ (nodes, users,
    accounts, end, a future start), delete gpufleet's reservations no lease wants (released,
    expired, cancelled). A reservation that ended already is only deleted (never recreated)."""
    have = {r.name: r for r in existing if r.lease_id is not None}
    out: list[ResChange] = []
    want = {w.name: w for w in wanted if w.end > now and w.nodes}
    for name, w in sorted(want.items()):
        start = "now" if w.start <= now else _local(w.start)
        r = have.get(name)
        if r is None or r.end <= now:
            fields = {"StartTime": start, "EndTime": _local(w.end),
                      "Nodes": ",".join(w.nodes), "Users": ",".join(w.users),
                      "Flags": RESERVATION_FLAGS}
            if w.accounts:
                fields["Accounts"] = ",".join(w.accounts)
            out.append(ResChange(ResAction.CREATE, name, w.lease_id,
                                 f"lease {w.lease_id} has no reservation", w.nodes, fields))
            continue
        diff: dict[str, str] = {}
        whys: list[str] = []
        if set(r.nodes) != set(w.nodes):
            diff["Nodes"] = ",".join(w.nodes)
            whys.append(f"nodes {','.join(r.nodes)} -> {','.join(w.nodes)}")
        if set(r.users) != set(w.users):
            diff["Users"] = ",".join(w.users)
            whys.append(f"users {','.join(r.users) or '-'} -> {','.join(w.users)}")
        if set(r.accounts) != set(w.accounts):
            if w.accounts:
                diff["Accounts"] = ",".join(w.accounts)
            else:  # scontrol takes no empty list: the accounts set by hand are taken off
                diff["Accounts-"] = ",".join(r.accounts)
            whys.append(f"accounts {','.join(r.accounts) or '-'} -> "
                        f"{','.join(w.accounts) or '-'}")
        if abs((r.end - w.end).total_seconds()) > _SLACK_S:
            diff["EndTime"] = _local(w.end)
            whys.append(f"end {r.end.isoformat()} -> {w.end.isoformat()}")
        if w.start > now and abs((r.start - w.start).total_seconds()) > _SLACK_S:
            diff["StartTime"] = _local(w.start)
            whys.append(f"start {r.start.isoformat()} -> {w.start.isoformat()}")
        if diff:
            out.append(ResChange(ResAction.UPDATE, name, w.lease_id, "; ".join(whys),
                                 w.nodes, diff))
    for name, r in sorted(have.items()):
        if name not in want:
            out.append(ResChange(ResAction.DELETE, name, r.lease_id,
                                 f"lease {r.lease_id} no longer holds its hosts", r.nodes))
    return out


def foreign_holds(
    existing: Iterable[Reservation], hosts: Sequence[str], now: datetime
) -> dict[str, str]:
    """Host -> why, for the ``hosts`` covered by someone else's reservation that has not
    ended (active now or in the future: placement treats the host as held)."""
    out: dict[str, str] = {}
    known = set(hosts)
    for r in sorted(existing, key=lambda r: r.name):
        if r.lease_id is not None or r.end <= now:
            continue
        who = ",".join(r.users) or ",".join(r.accounts) or "-"
        why = (f"Slurm reservation {r.name} ({who}, {r.start.isoformat()} to "
               f"{r.end.isoformat()}, {r.state.lower()})")
        for node in r.nodes:
            if node in known:
                out[node] = f"{out[node]}; {why}" if node in out else why
    return out
