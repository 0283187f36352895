"""Job failures: record them (one, or a JSON-lines / CSV file), report where they concentrate,
and put the evidence next to them: the host's alarms, Xid lines, changes and baseline drift in
the same window. ``--quarantine`` takes the flagged hosts out in one step.

Classification and the flag rule are pure (:mod:`gpufleet.domain.failures`); the rule table
is shipped (``domain/data/failure_rules.yaml``) and overlaid by ``GPUFLEET_FAILURE_RULES``.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from gpufleet.domain.drift import diff_against_baseline
from gpufleet.domain.events import EventKind
from gpufleet.domain.facts import HostFacts
from gpufleet.domain.failures import (
    Failure,
    HostGroup,
    Rule,
    classify,
    group_failures,
    load_rules,
    rule_doc,
)
from gpufleet.domain.health import Health
from gpufleet.domain.lifecycle import TRANSITIONS
from gpufleet.domain.states import Event, HostState
from gpufleet.errors import ConfigError, LocalIOError, NotFound
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.core.lifecycle import transition
from gpufleet.store.repo import baseline_for_host, host_by_name
from gpufleet.store.tables import Alarm, FactSnapshot, FailureRow, Host
from gpufleet.store.tables import Event as EventRow

_FIELDS = ("job", "host", "gpu", "time", "message")


def failure_rules(fleet: Fleet) -> list[Rule]:
    """The shipped rules with the operator's overlay (GPUFLEET_FAILURE_RULES) first."""
    path = fleet.settings.failure_rules_file
    if path is None:
        return load_rules()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise LocalIOError(path=str(path), cause=str(exc.strerror or exc)) from exc
    return load_rules(text, str(path))


def parse_time(text: str, what: str = "--time") -> datetime:
    """An ISO 8601 time with a zone (``2026-03-01T03:12:00Z``); ConfigError otherwise."""
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(f"{what} '{text}': not an ISO 8601 time") from None
    if value.tzinfo is None:
        raise ConfigError(f"{what} '{text}': give a time zone (e.g. Z or +02:00)")
    return value.astimezone(UTC)


@dataclass
class Recorded:
    """One stored failure."""

    job: str
    host: str
    gpu: str | None
    at: datetime
    category: str
    rule: str | None


def store_failure(
    s: Session,
    fleet: Fleet,
    rules: list[Rule],
    row: dict[str, Any],
    source: str,
) -> Recorded:
    job = str(row.get("job") or "").strip()
    if not job or len(job) > 128:
        raise ConfigError("job: give a job id (at most 128 characters)")
    message = str(row.get("message") or "").strip()
    if not message:
        raise ConfigError("message: empty")
    at = (
        row["time"]
        if isinstance(row.get("time"), datetime)
        else parse_time(str(row.get("time") or ""), "time")
    )
    gpu = str(row["gpu"]).strip() if row.get("gpu") not in (None, "") else None
    if gpu is not None and len(gpu) > 64:
        raise ConfigError("gpu: give an index or a UUID")
    host = host_by_name(s, str(row.get("host") or "").strip())
    category, rule = classify(message, rules)
    s.add(
        FailureRow(
            job_id=job,
            host_id=host.id,
            gpu=gpu,
            at=at,
            message=message,
            category=category,
            rule=rule,
            recorded_at=fleet.now(),
            source=source,
            actor=fleet.actor,
        )
    )
    return Recorded(job, host.name, gpu, at, category, rule)


def record_failure(
    fleet: Fleet, *, job: str, host: str, gpu: str | None, time: str, message: str
) -> Recorded:
    """``gpufleet failures record``: store one failure, classified."""
    rules = failure_rules(fleet)
    with fleet.db.session() as s:
        return store_failure(
            s,
            fleet,
            rules,
            {"job": job, "host": host, "gpu": gpu, "time": time, "message": message},
            "cli",
        )


@dataclass
class ImportReport:
    """What an import stored and the lines it refused (``FILE:LINE: why``)."""

    recorded: int
    errors: list[str] = field(default_factory=list)


def _rows(path: Path, text: str) -> list[tuple[int, dict[str, Any] | str]]:
    """(line, row or why it is unreadable) for a JSON-lines or CSV (with a header) file."""
    out: list[tuple[int, dict[str, Any] | str]] = []
    first = next((ln for ln in text.splitlines() if ln.strip()), "")
    if path.suffix.lower() in (".jsonl", ".json", ".ndjson") or first.lstrip().startswith("{"):
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as exc:
                out.append((n, f"not JSON: {exc.msg}"))
                continue
            out.append((n, value if isinstance(value, dict) else "not a JSON object"))
        return out
    reader = csv.DictReader(io.StringIO(text))
    missing = [f for f in _FIELDS if f != "gpu" and f not in (reader.fieldnames or [])]
    if missing:
        return [(1, f"CSV header lacks {', '.join(missing)} (columns: {', '.join(_FIELDS)})")]
    for row in reader:
        n = reader.line_num
        if None in row:
            out.append((n, "more fields than the header"))
            continue
        out.append((n, dict(row)))
    return out


def import_failures(fleet: Fleet, path: Path) -> ImportReport:
    """``gpufleet failures import FILE``: every good line is stored; a bad one is reported as
    ``FILE:LINE: why`` and spoils nothing else."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise LocalIOError(path=str(path), cause=str(exc.strerror or exc)) from exc
    return import_failures_text(fleet, path, text)


def import_failures_text(fleet: Fleet, path: Path, text: str) -> ImportReport:
    """The rows of ``text`` (read from ``path``, or sent to ``POST /api/v1/failures/import``
    under a name whose suffix picks the format) stored as :func:`import_failures` does."""
    rules = failure_rules(fleet)
    report = ImportReport(0)
    with fleet.db.session() as s:
        for n, row in _rows(path, text):
            where = f"{path}:{n}"
            if isinstance(row, str):
                report.errors.append(f"{where}: {row}")
                continue
            try:
                with s.begin_nested():
                    store_failure(s, fleet, rules, row, where)
            except (ConfigError, NotFound) as exc:
                report.errors.append(f"{where}: {exc}")
                continue
            report.recorded += 1
    return report


# --------------------------------------------------------------------------- the report


def _ago(at: datetime, now: datetime) -> str:
    days = (now.date() - at.astimezone(UTC).date()).days
    return "today" if days <= 0 else "yesterday" if days == 1 else f"{days} days ago"


def _host_evidence(s: Session, host: Host, start: datetime, now: datetime) -> list[str]:
    """What else happened to ``host`` in the window: alarms, Xids, changes, drift, fabric."""
    out: list[str] = []
    for a in s.scalars(
        select(Alarm).where(
            Alarm.host_id == host.id, or_(Alarm.closed_at.is_(None), Alarm.opened_at >= start)
        )
    ):
        out.append(f"alarm {a.kind.value}: {a.message}")
    snap = s.get(FactSnapshot, host.latest_snapshot_id) if host.latest_snapshot_id else None
    facts = HostFacts.model_validate(snap.facts) if snap is not None else None
    if facts is not None:
        seen: set[int] = set()
        for x in facts.xids or []:
            if x.time is not None and start <= x.time <= now and x.code not in seen:
                seen.add(x.code)
                out.append(f"Xid {x.code} at {x.time.astimezone(UTC):%H:%M}")
        for p in facts.ib_ports or []:
            if p.state is not None and p.state != "Active":
                out.append(f"fabric port {p.ca}/{p.port} {p.state} ({p.physical_state or '?'})")
        baseline = baseline_for_host(s, host)
        if baseline is not None:
            out += [
                f"{d.field} {d.actual or 'unset'} off baseline {baseline.name} ({d.expected})"
                for d in diff_against_baseline(facts, baseline)
            ]
    for ev in s.scalars(
        select(EventRow)
        .where(
            EventRow.host_id == host.id,
            EventRow.kind.in_([EventKind.CHANGE_DETECTED, EventKind.CHANGE_DECLARED]),
            EventRow.at >= start,
        )
        .order_by(EventRow.at)
    ):
        out.append(f"{ev.kind.value} {_ago(ev.at, now)}: {ev.message}")
    return out


@dataclass
class FailureReport:
    """Groups by host (most failures first), the flagged hosts and what was done."""

    since: datetime
    until: datetime
    fleet_hosts: int
    groups: list[HostGroup]
    quarantined: list[str] = field(default_factory=list)
    not_quarantined: list[str] = field(default_factory=list)

    @property
    def flagged(self) -> list[str]:
        return [g.host for g in self.groups if g.flagged]

    def as_json(self) -> dict[str, Any]:
        return {
            "since": self.since.isoformat(),
            "until": self.until.isoformat(),
            "fleet_hosts": self.fleet_hosts,
            "rule": rule_doc(),
            "flagged": self.flagged,
            "quarantined": self.quarantined,
            "not_quarantined": self.not_quarantined,
            "hosts": [
                {
                    "host": g.host,
                    "failures": len(g.failures),
                    "jobs": g.jobs,
                    "gpus": g.by_gpu,
                    "categories": g.categories,
                    "flagged": g.flagged,
                    "evidence": g.evidence,
                    "summary": g.line(),
                }
                for g in self.groups
            ],
        }


def failure_report(
    fleet: Fleet, since: timedelta, *, quarantine: bool = False, label: str | None = None
) -> FailureReport:
    """``gpufleet failures report --since``: see the module docstring. With ``quarantine``,
    each flagged host is quarantined (``hardware_fault``; the reason names the report)."""
    now = fleet.now()
    start = now - since
    with fleet.db.session() as s:
        fleet_hosts = len(list(s.scalars(select(Host.id).where(Host.state != HostState.RETIRED))))
        rows = s.execute(
            select(FailureRow, Host.name)
            .join(Host, Host.id == FailureRow.host_id)
            .where(FailureRow.at >= start, FailureRow.at <= now)
        ).all()
        failures = [Failure(r.job_id, name, r.gpu, r.at, r.category, r.message) for r, name in rows]
        hosts = {
            h.name: h
            for h in s.scalars(select(Host).where(Host.name.in_({f.host for f in failures})))
        }
        evidence = {name: _host_evidence(s, h, start, now) for name, h in hosts.items()}
    report = FailureReport(start, now, fleet_hosts, group_failures(failures, fleet_hosts, evidence))
    if quarantine:
        what = label or f"failures report since {start:%Y-%m-%d %H:%M}Z"
        for g in report.groups:
            if not g.flagged:
                continue
            with fleet.db.session() as s:
                host = host_by_name(s, g.host, for_update=True)
                state = HostState(host.state)
                if (
                    state is HostState.QUARANTINED
                    or (state, Event.HARDWARE_FAULT) not in (TRANSITIONS)
                    or TRANSITIONS[(state, Event.HARDWARE_FAULT)] is not HostState.QUARANTINED
                ):
                    report.not_quarantined.append(f"{g.host}: left in {state.value}")
                    continue
                reason = f"{what}: {g.line()}"
                transition(
                    s,
                    fleet,
                    host,
                    Event.HARDWARE_FAULT,
                    reason,
                    data={"source": "failures report", "failures": len(g.failures), "jobs": g.jobs},
                    health=Health.CRITICAL,
                    fault_reason=reason,
                )
                report.quarantined.append(g.host)
    return report
