"""Runs as the API and the worker read them: a run with its progress and chunks
(:class:`RunView`), its hosts' results, the runs listed, the chunks still to queue and the
queue's depth (moved out of :mod:`gpufleet.service.background.jobs`, which starts and runs them)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from gpufleet.domain.runs import RunKind, RunState
from gpufleet.errors import NotFound
from gpufleet.service.core.fleet import Fleet
from gpufleet.store.tables import (
    CollectionResult,
    Host,
    JobChunk,
    JobRun,
    JobRunHost,
)


@dataclass
class ChunkView:
    """One chunk of a run as the API shows it."""

    seq: int
    state: RunState
    hosts: int
    attempts: int
    worker: str | None
    job_id: int | None
    error: str | None = None


@dataclass
class RunView:
    """A run and its progress: hosts done, outcomes so far (collection outcomes; inspect:
    probe outcomes; evidence: passed / failed / skipped), the verdicts of a validation, the
    findings of an inspection."""

    id: int
    kind: RunKind
    selector: str | None
    state: RunState
    actor: str
    schedule: str | None
    period: int | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    collection_run: int | None
    hosts: int
    hosts_done: int
    chunks: int
    chunks_done: int
    counts: dict[str, int] = field(default_factory=dict)
    verdicts: dict[str, int] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    error: str | None = None
    chunk_list: list[ChunkView] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)
    findings: int = 0
    #: Remediate runs: the remediation's report, or the error that stopped it (finished).
    remediation: dict[str, Any] | None = None


@dataclass
class RunHostView:
    """One host's result in a run."""

    host: str
    outcome: str
    detail: str | None



def run_counts(s: Session, coll_id: int) -> dict[str, int]:
    return {
        str(outcome): int(n)
        for outcome, n in s.execute(
            select(CollectionResult.outcome, func.count(CollectionResult.id))
            .where(CollectionResult.run_id == coll_id)
            .group_by(CollectionResult.outcome)
        )
    }


# --- reading runs ----------------------------------------------------------------------------


def _view(s: Session, run: JobRun, *, with_chunks: bool) -> RunView:
    chunks = list(
        s.scalars(select(JobChunk).where(JobChunk.run_id == run.id).order_by(JobChunk.seq))
    )
    if run.kind.collects:
        counts = run_counts(s, run.collection_run_id) if run.collection_run_id is not None else {}
    else:
        counts = {
            str(outcome): int(n)
            for outcome, n in s.execute(
                select(JobRunHost.outcome, func.count())
                .where(JobRunHost.run_id == run.id)
                .group_by(JobRunHost.outcome)
            )
        }
    verdicts: Counter[str] = Counter()
    skipped: list[str] = []
    findings = 0
    remediation: dict[str, Any] | None = None
    for c in chunks:
        if c.result.get("remediation"):  # JSON text (jobs._remediate_chunk), key order kept
            remediation = json.loads(c.result["remediation"])
        verdicts.update(c.result.get("verdicts") or {})
        skipped += c.result.get("skipped") or []
        findings += int(c.result.get("findings") or 0)
    return RunView(
        id=run.id,
        kind=run.kind,
        selector=run.selector,
        state=run.state,
        actor=run.actor,
        schedule=run.schedule,
        period=run.period,
        created_at=run.created_at,
        started_at=run.started_at,
        finished_at=run.finished_at,
        collection_run=run.collection_run_id,
        hosts=run.hosts,
        hosts_done=sum(counts.values()),
        chunks=run.chunks,
        chunks_done=sum(1 for c in chunks if c.state.finished),
        counts=counts,
        verdicts=dict(verdicts),
        skipped=skipped,
        error=run.error,
        chunk_list=[
            ChunkView(c.seq, c.state, len(c.hosts), c.attempts, c.worker, c.job_id, c.error)
            for c in chunks
        ]
        if with_chunks
        else [],
        params=dict(run.params or {}),
        findings=findings,
        remediation=remediation,
    )


def show_run(fleet: Fleet, run_id: int) -> RunView:
    """One run with its chunks; :class:`NotFound` for an unknown id."""
    with fleet.db.session() as s:
        run = s.get(JobRun, run_id)
        if run is None:
            raise NotFound(f"no run {run_id}")
        return _view(s, run, with_chunks=True)


def run_hosts(fleet: Fleet, run_id: int) -> list[RunHostView]:
    """Each host's result in run ``run_id``, by host name (collect/validate: the collection
    outcome and reason; inspect/evidence: the recorded outcome); :class:`NotFound` for an
    unknown id."""
    with fleet.db.session() as s:
        run = s.get(JobRun, run_id)
        if run is None:
            raise NotFound(f"no run {run_id}")
        rows: Sequence[Any]
        if run.kind.collects:
            rows = s.execute(
                select(Host.name, CollectionResult.outcome, CollectionResult.reason)
                .join(Host, Host.id == CollectionResult.host_id)
                .where(CollectionResult.run_id == run.collection_run_id)
                .order_by(Host.name)
            ).all()
        else:
            rows = s.execute(
                select(Host.name, JobRunHost.outcome, JobRunHost.detail)
                .join(Host, Host.id == JobRunHost.host_id)
                .where(JobRunHost.run_id == run_id)
                .order_by(Host.name)
            ).all()
        return [RunHostView(str(n), str(o), d or None) for n, o, d in rows]


def list_runs(fleet: Fleet, *, limit: int = 50, state: RunState | None = None) -> list[RunView]:
    """The newest runs first (without their chunks)."""
    with fleet.db.session() as s:
        stmt = select(JobRun).order_by(JobRun.id.desc()).limit(limit)
        if state is not None:
            stmt = stmt.where(JobRun.state == state)
        return [_view(s, r, with_chunks=False) for r in s.scalars(stmt)]


def unfinished_chunks(fleet: Fleet) -> list[tuple[int, int]]:
    """(run id, chunk) of every chunk not finished yet, oldest first: what an in-process
    queue (SQLite, lost when the server stopped) queues again at start."""
    with fleet.db.session() as s:
        rows = s.execute(
            select(JobChunk.run_id, JobChunk.seq)
            .where(JobChunk.state.in_([RunState.QUEUED, RunState.RUNNING]))
            .order_by(JobChunk.run_id, JobChunk.seq)
        )
        return [(int(r), int(q)) for r, q in rows]


def queue_depth(fleet: Fleet) -> dict[tuple[str, str], int]:
    """Jobs waiting (``todo``) and running (``doing``) per queue, from the job queue's table
    in the fleet's PostgreSQL database."""
    with fleet.db.session() as s:
        rows = s.execute(
            text(
                "SELECT queue_name, status::text, count(*) FROM procrastinate_jobs "
                "WHERE status IN ('todo', 'doing') GROUP BY queue_name, status"
            )
        )
        return {(str(q), str(st)): int(n) for q, st, n in rows}
