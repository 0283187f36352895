"""Runs of background work: start one (split into chunks, one queue job each), run a chunk,
read its progress, and the depth of the job queue.

A run (``job_runs``) is a collection or a validation of the hosts a selector matched when it
started. Its hosts are split into chunks of ``GPUFLEET_RUN_CHUNK`` (``job_chunks``); each
chunk is one job on the queue (:mod:`gpufleet.service.tasks`), so any number of workers share
one run. The run owns one ``collection_runs`` row: every host gets exactly one
``collection_results`` row in it.

Claimed once: a chunk claims its hosts through the claim -> run -> apply engine
(:mod:`gpufleet.service.pipeline`) under a token of its own (``run<id>-<chunk>-<attempt>``).
A retried chunk (its worker was killed) skips the hosts that already have a result in the
run and takes back the claims its earlier attempts still hold; hosts held by somebody else
(another run, a CLI ``collect``) make the chunk retry later rather than skip them.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from sqlalchemy import func, select, text, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gpufleet.collect.transport import Outcome, RawResult
from gpufleet.domain.runs import RunKind, RunState, chunked, claim_prefix, claim_token
from gpufleet.domain.states import HostState
from gpufleet.errors import Conflict, NotFound
from gpufleet.service.collect import claim_into_run, collect_claimed
from gpufleet.service.fleet import Fleet
from gpufleet.service.lifecycle import retrying
from gpufleet.service.pipeline import Claim, check_forks, check_timeout, claim_lease
from gpufleet.service.policies import Policies
from gpufleet.service.select import select_hosts, selected_names
from gpufleet.service.validate import HostVerdict, judge_host, sweep
from gpufleet.store.repo import host_by_name
from gpufleet.store.tables import CollectionResult, CollectionRun, Host, JobChunk, JobRun


class HostsBusy(Exception):
    """Some hosts of a chunk are claimed by somebody else right now: retry the chunk later
    (the hosts it already collected are not collected again)."""

    def __init__(self, hosts: Sequence[str]) -> None:
        super().__init__(f"{len(hosts)} host(s) held by another worker: {', '.join(hosts[:5])}")
        self.hosts = list(hosts)


class Deferrer(Protocol):
    """What :func:`start_run` queues chunk jobs on (``gpufleet.service.tasks.JobQueue``)."""

    #: The queue lives in the fleet's database: jobs are inserted in the run's transaction
    #: (else they are queued once the run is committed).
    shared: bool

    def check_ready(self) -> None:
        """Raise when this process cannot queue jobs now."""
        ...

    def defer_chunks(self, session: Session | None, chunks: Sequence[tuple[int, int]]) -> list[int]:
        """Queue one job per (run id, chunk), inside ``session``'s transaction when given;
        the job ids."""
        ...


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
    """A run and its progress: hosts done, outcomes so far, the verdicts of a validation."""

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


# --- starting a run ------------------------------------------------------------------------


def start_run(
    fleet: Fleet,
    kind: RunKind,
    selector: str | None,
    queue: Deferrer,
    *,
    schedule: str | None = None,
    period: int | None = None,
) -> RunView | None:
    """Create a run over the hosts ``selector`` matches now and queue its chunks, in one
    transaction (on PostgreSQL the queue's jobs are inserted in it too).

    An explicit selector matching nothing is :class:`NotFound`; so is a fleet without hosts.
    A scheduled run (``schedule`` and ``period`` given) is started once per period fleet-wide
    (a unique index): a second start for the same period, or one while the schedule's previous
    run is still unfinished, returns None.
    """
    settings = fleet.settings
    queue.check_ready()
    check_timeout(settings.collect_timeout_s, "GPUFLEET_COLLECT_TIMEOUT")
    check_forks(settings.forks, "GPUFLEET_FORKS")
    if kind is RunKind.VALIDATE:
        Policies(fleet).load()  # a bad profiles file refuses the run before anything is queued
    now = fleet.now()
    try:
        with fleet.db.session() as s:
            selected_names(s, selector)  # an explicit selector matching nothing: NotFound
            names = list(
                s.scalars(
                    select_hosts(selector)
                    .where(Host.state != HostState.RETIRED)
                    .with_only_columns(Host.name)
                )
            )
            if not names:
                if schedule is not None:
                    return None
                raise NotFound(
                    f"no hosts to {kind.value}" + (f" in '{selector}'" if selector else "")
                )
            if schedule is not None:
                busy = s.scalar(
                    select(func.count(JobRun.id)).where(
                        JobRun.schedule == schedule,
                        JobRun.state.in_([RunState.QUEUED, RunState.RUNNING]),
                    )
                )
                if busy:
                    return None
            coll = CollectionRun(
                started_at=now,
                transport="auto",
                selector=selector,
                actor=fleet.actor,
                counts={},
            )
            s.add(coll)
            s.flush()
            parts = chunked(names, settings.run_chunk)
            run = JobRun(
                kind=kind,
                selector=selector,
                state=RunState.QUEUED,
                actor=fleet.actor,
                schedule=schedule,
                period=period,
                created_at=now,
                collection_run_id=coll.id,
                hosts=len(names),
                chunks=len(parts),
            )
            s.add(run)
            s.flush()
            chunks = [
                JobChunk(run_id=run.id, seq=i, hosts=part, state=RunState.QUEUED, result={})
                for i, part in enumerate(parts)
            ]
            s.add_all(chunks)
            s.flush()
            run_id = run.id
            if queue.shared:  # the jobs commit (and become visible) with the run
                job_ids = queue.defer_chunks(s, [(run_id, c.seq) for c in chunks])
                for c, job_id in zip(chunks, job_ids, strict=True):
                    c.job_id = job_id
    except IntegrityError:
        if schedule is not None:  # another server or worker started this period's run
            return None
        raise
    if not queue.shared:  # in-process: queued once the run is visible to the worker
        job_ids = queue.defer_chunks(None, [(run_id, i) for i in range(len(parts))])
        with fleet.db.session() as s:
            for c in s.scalars(select(JobChunk).where(JobChunk.run_id == run_id)):
                c.job_id = job_ids[c.seq]
    return show_run(fleet, run_id)


# --- running one chunk -----------------------------------------------------------------------


def _lock_run(s: Session, run_id: int) -> JobRun | None:
    return s.get(JobRun, run_id, with_for_update=True)


def _lock_chunk(s: Session, run_id: int, seq: int) -> JobChunk | None:
    return s.scalars(
        select(JobChunk).where(JobChunk.run_id == run_id, JobChunk.seq == seq).with_for_update()
    ).one_or_none()


def _collected(s: Session, coll_id: int | None, names: Sequence[str]) -> dict[str, RawResult]:
    """The outcome each of ``names`` already has in the run's collection (one per host)."""
    if coll_id is None or not names:
        return {}
    rows = s.execute(
        select(Host.name, CollectionResult.outcome, CollectionResult.reason)
        .join(Host, Host.id == CollectionResult.host_id)
        .where(CollectionResult.run_id == coll_id, Host.name.in_(list(names)))
    )
    return {name: RawResult(name, Outcome(outcome), reason or "") for name, outcome, reason in rows}


def run_chunk(fleet: Fleet, run_id: int, seq: int, *, worker: str, final: bool) -> None:
    """Run one chunk of a run (a queue job): collect its hosts that have no result in the run
    yet, under claims only this chunk's attempts share; a validation then judges every host of
    the chunk. Raises :class:`HostsBusy` (the queue retries the job) while hosts are held by
    somebody else, unless this is the ``final`` attempt: those are then reported as skipped."""
    with fleet.db.session() as s:
        run = _lock_run(s, run_id)
        chunk = _lock_chunk(s, run_id, seq)
        if run is None or chunk is None or chunk.state.finished:
            return  # the run was removed, or an earlier attempt finished it
        now = fleet.now()
        chunk.attempts += 1
        chunk.state = RunState.RUNNING
        chunk.worker = worker
        chunk.started_at = now
        if run.state is RunState.QUEUED:
            run.state = RunState.RUNNING
            run.started_at = now
        attempt, kind, coll_id, actor = chunk.attempts, run.kind, run.collection_run_id, run.actor
        names = list(chunk.hosts)
        done = _collected(s, coll_id, names)
    fleet = dataclasses.replace(fleet, actor=actor)
    settings = fleet.settings
    policies = Policies(fleet).load()
    if kind is RunKind.VALIDATE and seq == 0 and attempt == 1:
        sweep(fleet)  # deadlines and expiries first, as `gpufleet validate` does
    remaining = [n for n in names if n not in done]
    busy: list[str] = []
    if remaining and coll_id is not None:
        timeout_s, forks = settings.collect_timeout_s, settings.forks

        def lease(n: int) -> timedelta:
            return claim_lease(n, forks, timeout_s, settings.connect_timeout_s)

        try:
            got = claim_into_run(
                fleet,
                coll_id,
                ",".join(remaining),
                lease,
                token=claim_token(run_id, seq, attempt),
                take_over=claim_prefix(run_id, seq),
            )
        except NotFound:  # every remaining host was removed meanwhile
            got = None
        if got is not None:
            got = _drop_collected(fleet, coll_id, got)
            collect_claimed(
                fleet, coll_id, got, forks=forks, timeout_s=timeout_s, policies=policies
            )
            busy = list(got.busy)
    if busy and not final:
        raise HostsBusy(busy)
    verdicts: Counter[str] = Counter()
    if kind is RunKind.VALIDATE:
        with fleet.db.session() as s:
            raw = _collected(s, coll_id, names)
        for name in names:
            try:
                v = _judge(fleet, name, policies, raw.get(name))
            except Conflict:  # changed under us five times in a row: left as it is
                verdicts["skipped"] += 1
                continue
            if v is not None:
                verdicts[v.decision or "skipped"] += 1
    _finish_chunk(fleet, run_id, seq, RunState.SUCCEEDED, {"skipped": busy, "verdicts": verdicts})


def _drop_collected(fleet: Fleet, coll_id: int, got: Claim) -> Claim:
    """Release the claimed hosts that got their result in the run meanwhile (an earlier
    attempt, wrongly thought dead, stored it just before this attempt's claim took the host:
    from the claim on, that attempt's results are discarded), so none is collected twice."""
    with fleet.db.session() as s:
        done = set(_collected(s, coll_id, [c.target.name for c in got.hosts]))
        if not done:
            return got
        s.execute(
            update(Host)
            .where(Host.claim_token == got.token, Host.name.in_(sorted(done)))
            .values(claim_token=None, claimed_until=None)
            .execution_options(synchronize_session=False)
        )
    return dataclasses.replace(got, hosts=[c for c in got.hosts if c.target.name not in done])


@retrying
def _judge(
    fleet: Fleet, name: str, policies: Policies, collected: RawResult | None
) -> HostVerdict | None:
    """Judge one host in its own transaction (as ``gpufleet validate`` does); a lost race
    (:class:`Conflict`) re-reads and judges again."""
    with fleet.db.session() as s:
        try:
            host = host_by_name(s, name, for_update=True)
        except NotFound:  # removed meanwhile
            return None
        return judge_host(fleet, s, host, policies, collected, must_be_collected=True)


def fail_chunk(fleet: Fleet, run_id: int, seq: int, error: str) -> None:
    """The chunk gave up (no retry left, or an error no retry fixes): the run fails once its
    other chunks are done."""
    _finish_chunk(fleet, run_id, seq, RunState.FAILED, {}, error=error)


def _finish_chunk(
    fleet: Fleet,
    run_id: int,
    seq: int,
    state: RunState,
    result: dict[str, Any],
    *,
    error: str | None = None,
) -> None:
    with fleet.db.session() as s:
        run = _lock_run(s, run_id)
        chunk = _lock_chunk(s, run_id, seq)
        if run is None or chunk is None or chunk.state.finished:
            return
        now = fleet.now()
        chunk.state = state
        chunk.finished_at = now
        chunk.result = {k: (dict(v) if isinstance(v, Counter) else v) for k, v in result.items()}
        chunk.error = error
        s.flush()
        open_chunks = s.scalar(
            select(func.count(JobChunk.id)).where(
                JobChunk.run_id == run_id,
                JobChunk.state.in_([RunState.QUEUED, RunState.RUNNING]),
            )
        )
        if open_chunks:
            return
        failed = s.scalar(
            select(func.count(JobChunk.id)).where(
                JobChunk.run_id == run_id, JobChunk.state == RunState.FAILED
            )
        )
        run.state = RunState.FAILED if failed else RunState.SUCCEEDED
        run.finished_at = now
        if failed:
            run.error = f"{failed} of {run.chunks} chunk(s) failed"
        if run.collection_run_id is not None:
            coll = s.get(CollectionRun, run.collection_run_id)
            if coll is not None:
                coll.finished_at = now
                coll.counts = _counts(s, coll.id)


def _counts(s: Session, coll_id: int) -> dict[str, int]:
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
    counts = _counts(s, run.collection_run_id) if run.collection_run_id is not None else {}
    verdicts: Counter[str] = Counter()
    skipped: list[str] = []
    for c in chunks:
        verdicts.update(c.result.get("verdicts") or {})
        skipped += c.result.get("skipped") or []
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
    )


def show_run(fleet: Fleet, run_id: int) -> RunView:
    """One run with its chunks; :class:`NotFound` for an unknown id."""
    with fleet.db.session() as s:
        run = s.get(JobRun, run_id)
        if run is None:
            raise NotFound(f"no run {run_id}")
        return _view(s, run, with_chunks=True)


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
