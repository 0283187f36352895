"""Runs of background work: start one (split into chunks, one queue job each), run a chunk,
read its progress, and the depth of the job queue.

A run (``job_runs``) is a collection, a validation, an inspection sweep or an active test
(evidence) of the hosts a selector matched when it started. Its hosts (by id: a host renamed
meanwhile is still the same host) are split into chunks of ``GPUFLEET_RUN_CHUNK``
(``job_chunks``); each chunk is one job on the queue (:mod:`gpufleet.service.tasks`), so any
number of workers share one run. Every host gets exactly one result in the run: a collect or
validate run owns one ``collection_runs`` row (one ``collection_results`` row per host); an
inspect or evidence run records one ``job_run_hosts`` row per host (its samples or evidence
are stored as ``gpufleet inspect`` / ``evidence run`` store them).

Claimed once: a chunk claims its hosts through the claim -> run -> apply engine
(:mod:`gpufleet.service.pipeline`) under a token of its own (``run<id>-<chunk>-<attempt>``).
A retried chunk (its worker was killed) skips the hosts that already have a result in the
run and takes back the claims its earlier attempts still hold; hosts held by somebody else
(another run, a CLI ``collect``) make the chunk retry later rather than skip them. An
inspection chunk stores its samples at the time its first attempt started, so a sample the
killed attempt stored counts as its result and is never stored twice. (An evidence chunk's
host whose result was stored just before its worker was killed, before the run recorded it,
is tested again.) The straggler rules of an inspection compare a host with the medians of
its chunk.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from sqlalchemy import func, select, text, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gpufleet.collect.transport import Outcome, RawResult
from gpufleet.domain.runs import RunKind, RunState, chunked, claim_prefix, claim_token
from gpufleet.domain.states import HostState
from gpufleet.errors import ConfigError, Conflict, NotFound
from gpufleet.service.collect import claim_into_run, collect_claimed
from gpufleet.service.evidence import HELD_ELSEWHERE, active_test, run_active
from gpufleet.service.fleet import Fleet
from gpufleet.service.inspect import inspect, load_policy
from gpufleet.service.inspect_store import roll_up_and_prune
from gpufleet.service.lifecycle import retrying
from gpufleet.service.pipeline import Claim, check_forks, check_timeout, claim_lease
from gpufleet.service.policies import Policies
from gpufleet.service.select import select_hosts, selected_names
from gpufleet.service.validate import HostVerdict, judge_host, sweep
from gpufleet.store.tables import (
    CollectionResult,
    CollectionRun,
    Host,
    HostSampleRow,
    JobChunk,
    JobRun,
    JobRunHost,
)


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


@dataclass
class RunHostView:
    """One host's result in a run."""

    host: str
    outcome: str
    detail: str | None


# --- starting a run ------------------------------------------------------------------------


def run_params(kind: RunKind, params: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The checked parameters of a run: an evidence run names its ``test`` (dcgm, nccl,
    gpu-burn) and may give ``level`` (DCGM, 1-4) and ``seconds`` (gpu-burn); the other kinds
    take none. :class:`ConfigError` names the field that is wrong."""
    given = {k: v for k, v in (params or {}).items() if v is not None}
    if kind is not RunKind.EVIDENCE:
        if given:
            raise ConfigError(
                f"a {kind.value} run takes no {', '.join(sorted(given))} (only evidence runs do)"
            )
        return None
    unknown = sorted(set(given) - {"test", "level", "seconds"})
    if unknown:
        raise ConfigError(f"unknown evidence run parameter(s): {', '.join(unknown)}")
    if "test" not in given:
        raise ConfigError("an evidence run needs 'test' (dcgm, nccl or gpu-burn)")
    test = active_test(str(given["test"])).kind
    level, seconds = given.get("level", 1), given.get("seconds", 60)
    if not isinstance(level, int) or isinstance(level, bool) or not 1 <= level <= 4:
        raise ConfigError(f"evidence run 'level' must be 1 to 4, not {level!r}")
    if not isinstance(seconds, int) or isinstance(seconds, bool) or not 1 <= seconds <= 86400:
        raise ConfigError(f"evidence run 'seconds' must be 1 to 86400, not {seconds!r}")
    return {"test": test.value, "level": level, "seconds": seconds}


def start_run(
    fleet: Fleet,
    kind: RunKind,
    selector: str | None,
    queue: Deferrer,
    *,
    schedule: str | None = None,
    period: int | None = None,
    params: Mapping[str, Any] | None = None,
) -> RunView | None:
    """Create a run over the hosts ``selector`` matches now and queue its chunks, in one
    transaction (on PostgreSQL the queue's jobs are inserted in it too).

    An explicit selector matching nothing is :class:`NotFound`; so is a fleet without hosts.
    A scheduled run (``schedule`` and ``period`` given) is started once per period fleet-wide
    (a unique index): a second start for the same period, or one while the schedule's previous
    run is still unfinished, returns None. ``params``: see :func:`run_params`.
    """
    settings = fleet.settings
    checked = run_params(kind, params)
    queue.check_ready()
    if kind is RunKind.EVIDENCE:
        check_timeout(settings.evidence_timeout_s, "GPUFLEET_EVIDENCE_TIMEOUT")
        check_forks(settings.evidence_forks, "GPUFLEET_EVIDENCE_FORKS")
    else:
        check_timeout(settings.collect_timeout_s, "GPUFLEET_COLLECT_TIMEOUT")
        check_forks(settings.forks, "GPUFLEET_FORKS")
    if kind is RunKind.VALIDATE:
        Policies(fleet).load()  # a bad profiles file refuses the run before anything is queued
    if kind is RunKind.INSPECT:
        load_policy(fleet)  # so does a bad health-rules overlay
    now = fleet.now()
    try:
        with fleet.db.session() as s:
            selected_names(s, selector)  # an explicit selector matching nothing: NotFound
            ids = list(
                s.scalars(
                    select_hosts(selector)
                    .where(Host.state != HostState.RETIRED)
                    .with_only_columns(Host.id)
                )
            )
            if not ids:
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
            coll_id: int | None = None
            if kind.collects:
                coll = CollectionRun(
                    started_at=now,
                    transport="auto",
                    selector=selector,
                    actor=fleet.actor,
                    counts={},
                )
                s.add(coll)
                s.flush()
                coll_id = coll.id
            parts = chunked(ids, settings.run_chunk)
            run = JobRun(
                kind=kind,
                selector=selector,
                state=RunState.QUEUED,
                actor=fleet.actor,
                schedule=schedule,
                period=period,
                created_at=now,
                collection_run_id=coll_id,
                hosts=len(ids),
                chunks=len(parts),
                params=checked,
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


def _collected(s: Session, coll_id: int | None, ids: Sequence[int]) -> dict[int, RawResult]:
    """The outcome each of hosts ``ids`` already has in the run's collection (one per host)."""
    if coll_id is None or not ids:
        return {}
    rows = s.execute(
        select(Host.id, Host.name, CollectionResult.outcome, CollectionResult.reason)
        .join(Host, Host.id == CollectionResult.host_id)
        .where(CollectionResult.run_id == coll_id, Host.id.in_(list(ids)))
    )
    return {
        hid: RawResult(name, Outcome(outcome), reason or "") for hid, name, outcome, reason in rows
    }


def _recorded(s: Session, run_id: int, ids: Sequence[int]) -> set[int]:
    """The hosts of ``ids`` that have their ``job_run_hosts`` row in the run."""
    if not ids:
        return set()
    return set(
        s.scalars(
            select(JobRunHost.host_id).where(
                JobRunHost.run_id == run_id, JobRunHost.host_id.in_(list(ids))
            )
        )
    )


@dataclass
class _Chunk:
    """What one attempt of a chunk works on (read under the chunk's row lock)."""

    run_id: int
    seq: int
    attempt: int
    kind: RunKind
    coll_id: int | None
    params: dict[str, Any]
    at: datetime  # when the chunk's first attempt started
    ids: list[int]
    names: dict[int, str]  # the hosts' names now (removed hosts absent)
    states: dict[int, HostState]

    @property
    def token(self) -> str:
        return claim_token(self.run_id, self.seq, self.attempt)

    @property
    def take_over(self) -> str:
        return claim_prefix(self.run_id, self.seq)

    def selector(self, ids: Sequence[int]) -> str:
        return ",".join(self.names[i] for i in ids if i in self.names)


def run_chunk(fleet: Fleet, run_id: int, seq: int, *, worker: str, final: bool) -> None:
    """Run one chunk of a run (a queue job): collect (inspect, test) its hosts that have no
    result in the run yet, under claims only this chunk's attempts share; a validation then
    judges every host of the chunk. Raises :class:`HostsBusy` (the queue retries the job)
    while hosts are held by somebody else, unless this is the ``final`` attempt: those are
    then reported as skipped."""
    with fleet.db.session() as s:
        run = _lock_run(s, run_id)
        chunk = _lock_chunk(s, run_id, seq)
        if run is None or chunk is None or chunk.state.finished:
            return  # the run was removed, or an earlier attempt finished it
        now = fleet.now()
        chunk.attempts += 1
        chunk.state = RunState.RUNNING
        chunk.worker = worker
        if chunk.started_at is None:
            chunk.started_at = now
        if run.state is RunState.QUEUED:
            run.state = RunState.RUNNING
            run.started_at = now
        ids = [int(h) for h in chunk.hosts]
        hosts = s.execute(select(Host.id, Host.name, Host.state).where(Host.id.in_(ids))).all()
        c = _Chunk(
            run_id=run_id,
            seq=seq,
            attempt=chunk.attempts,
            kind=run.kind,
            coll_id=run.collection_run_id,
            params=dict(run.params or {}),
            at=chunk.started_at,
            ids=ids,
            names={hid: name for hid, name, _st in hosts},
            states={hid: HostState(st) for hid, _n, st in hosts},
        )
        actor = run.actor
    fleet = dataclasses.replace(fleet, actor=actor)
    if c.kind.collects:
        busy, result = _collect_chunk(fleet, c, final=final)
    elif c.kind is RunKind.INSPECT:
        busy, result = _inspect_chunk(fleet, c, final=final)
    else:
        busy, result = _evidence_chunk(fleet, c, final=final)
    _finish_chunk(fleet, run_id, seq, RunState.SUCCEEDED, {"skipped": busy, **result})


def _lost(c: _Chunk, done: set[int], busy: Sequence[str], skip: Sequence[HostState]) -> list[str]:
    """Hosts of the chunk with no result that were neither held elsewhere nor removed nor in
    a state the work skips: renamed between reading the chunk and claiming (the retry reads
    their new names)."""
    return [
        c.names[i]
        for i in c.ids
        if i in c.names and i not in done and c.states[i] not in skip and c.names[i] not in busy
    ]


def _collect_chunk(fleet: Fleet, c: _Chunk, *, final: bool) -> tuple[list[str], dict[str, Any]]:
    settings = fleet.settings
    policies = Policies(fleet).load()
    if c.kind is RunKind.VALIDATE and c.seq == 0 and c.attempt == 1:
        sweep(fleet)  # deadlines and expiries first, as `gpufleet validate` does
    with fleet.db.session() as s:
        done = _collected(s, c.coll_id, c.ids)
    remaining = [i for i in c.ids if i not in done and i in c.names]
    busy: list[str] = []
    if remaining and c.coll_id is not None:
        timeout_s, forks = settings.collect_timeout_s, settings.forks

        def lease(n: int) -> timedelta:
            return claim_lease(n, forks, timeout_s, settings.connect_timeout_s)

        try:
            got = claim_into_run(
                fleet, c.coll_id, c.selector(remaining), lease, token=c.token, take_over=c.take_over
            )
        except NotFound:  # every remaining host was removed meanwhile
            got = None
        if got is not None:
            got = _drop_collected(fleet, c.coll_id, got)
            collect_claimed(
                fleet, c.coll_id, got, forks=forks, timeout_s=timeout_s, policies=policies
            )
            busy = list(got.busy)
    with fleet.db.session() as s:
        raw = _collected(s, c.coll_id, c.ids)
    lost = _lost(c, set(raw), busy, (HostState.RETIRED,))
    if (busy or lost) and not final:
        raise HostsBusy(busy + lost)
    verdicts: Counter[str] = Counter()
    if c.kind is RunKind.VALIDATE:
        for hid in c.ids:
            try:
                v = _judge(fleet, hid, policies, raw.get(hid))
            except Conflict:  # changed under us five times in a row: left as it is
                verdicts["skipped"] += 1
                continue
            if v is not None:
                verdicts[v.decision or "skipped"] += 1
    return busy + lost, {"verdicts": verdicts}


def _record(fleet: Fleet, c: _Chunk, rows: Mapping[int, tuple[str, str | None]]) -> None:
    """One ``job_run_hosts`` row per host of ``rows`` (host id -> outcome, detail) that has
    none yet in the run."""
    if not rows:
        return
    with fleet.db.session() as s:
        have = _recorded(s, c.run_id, list(rows))
        now = fleet.now()
        s.add_all(
            JobRunHost(run_id=c.run_id, host_id=hid, outcome=outcome, detail=detail, at=now)
            for hid, (outcome, detail) in rows.items()
            if hid not in have
        )


def _inspect_chunk(fleet: Fleet, c: _Chunk, *, final: bool) -> tuple[list[str], dict[str, Any]]:
    settings = fleet.settings
    if c.seq == 0 and c.attempt == 1:
        roll_up_and_prune(fleet)  # raw samples past the retention, as `inspect --every` does
    with fleet.db.session() as s:
        done = _recorded(s, c.run_id, c.ids)
        # samples an earlier (killed) attempt stored at this chunk's time are its results
        stored = set(
            s.scalars(
                select(HostSampleRow.host_id).where(
                    HostSampleRow.host_id.in_([i for i in c.ids if i not in done]),
                    HostSampleRow.at == c.at,
                )
            )
        )
    _record(fleet, c, {i: ("ok", "stored by an earlier attempt") for i in stored})
    done |= stored
    remaining = [i for i in c.ids if i not in done and i in c.names]
    busy: list[str] = []
    findings = 0
    if remaining:
        try:
            report = inspect(
                fleet,
                c.selector(remaining),
                forks=settings.forks,
                timeout_s=settings.collect_timeout_s,
                at=c.at,
                token=c.token,
                take_over=c.take_over,
            )
        except NotFound:  # every remaining host was removed meanwhile
            report = None
        if report is not None:
            by_name = {name: hid for hid, name in c.names.items()}
            with fleet.db.session() as s:
                kept = set(
                    s.scalars(
                        select(HostSampleRow.host_id).where(
                            HostSampleRow.host_id.in_(remaining), HostSampleRow.at == c.at
                        )
                    )
                )
            rows: dict[int, tuple[str, str | None]] = {}
            for h in report.hosts:
                hid = by_name.get(h.host)
                if hid is None:
                    continue
                outcome = h.outcome
                if outcome == Outcome.OK.value and hid not in kept:
                    continue  # the claim ran out before it was stored: inspected again
                findings += len(h.findings)
                detail = "; ".join(
                    [f"{len(h.findings)} finding(s)"] * bool(h.findings)
                    + h.actions
                    + ([h.reason] if h.reason else [])
                )
                rows[hid] = (outcome, detail or None)
            _record(fleet, c, rows)
            done |= set(rows)
            busy = list(report.busy)
    lost = _lost(c, done, busy, (HostState.RETIRED,))
    if (busy or lost) and not final:
        raise HostsBusy(busy + lost)
    return busy + lost, {"findings": findings}


def _evidence_chunk(fleet: Fleet, c: _Chunk, *, final: bool) -> tuple[list[str], dict[str, Any]]:
    skip = (HostState.RETIRED, HostState.ALLOCATED)
    with fleet.db.session() as s:
        done = _recorded(s, c.run_id, c.ids)
    remaining = [i for i in c.ids if i not in done and i in c.names]
    busy: list[str] = []
    if remaining:
        try:
            results = run_active(
                fleet,
                c.selector(remaining),
                str(c.params["test"]),
                level=int(c.params.get("level", 1)),
                seconds=int(c.params.get("seconds", 60)),
                token=c.token,
                take_over=c.take_over,
            )
        except NotFound:  # every remaining host was removed, retired or allocated meanwhile
            results = []
        by_name = {name: hid for hid, name in c.names.items()}
        rows: dict[int, tuple[str, str | None]] = {}
        for r in results:
            hid = by_name.get(r.host)
            if hid is None:
                continue
            if r.summary == HELD_ELSEWHERE:
                busy.append(r.host)
                continue
            rows[hid] = ("passed" if r.ok else "failed", r.summary)
        _record(fleet, c, rows)
        done |= set(rows)
    with fleet.db.session() as s:  # allocated or retired since the run started: not tested
        states = {
            int(hid): HostState(st)
            for hid, st in s.execute(select(Host.id, Host.state).where(Host.id.in_(remaining)))
        }
    skipped = {
        i: ("skipped", f"{states[i].value}: not tested")
        for i in remaining
        if i not in done and i in states and states[i] in skip
    }
    _record(fleet, c, skipped)
    done |= set(skipped)
    lost = _lost(c, done, busy, skip)
    if (busy or lost) and not final:
        raise HostsBusy(busy + lost)
    return busy + lost, {}


def _drop_collected(fleet: Fleet, coll_id: int, got: Claim) -> Claim:
    """Release the claimed hosts that got their result in the run meanwhile (an earlier
    attempt, wrongly thought dead, stored it just before this attempt's claim took the host:
    from the claim on, that attempt's results are discarded), so none is collected twice."""
    with fleet.db.session() as s:
        done = set(_collected(s, coll_id, [c.host_id for c in got.hosts]))
        if not done:
            return got
        s.execute(
            update(Host)
            .where(Host.claim_token == got.token, Host.id.in_(sorted(done)))
            .values(claim_token=None, claimed_until=None)
            .execution_options(synchronize_session=False)
        )
    return dataclasses.replace(got, hosts=[c for c in got.hosts if c.host_id not in done])


@retrying
def _judge(
    fleet: Fleet, host_id: int, policies: Policies, collected: RawResult | None
) -> HostVerdict | None:
    """Judge one host in its own transaction (as ``gpufleet validate`` does); a lost race
    (:class:`Conflict`) re-reads and judges again."""
    with fleet.db.session() as s:
        host = s.get(Host, host_id, with_for_update=True)
        if host is None:  # removed meanwhile
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
    if run.kind.collects:
        counts = _counts(s, run.collection_run_id) if run.collection_run_id is not None else {}
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
    for c in chunks:
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
