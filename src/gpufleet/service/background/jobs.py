"""Runs of background work: start one (split into chunks, one queue job each), run a chunk,
read its progress, and the depth of the job queue. Starting lives in
:mod:`gpufleet.service.background.run_start`, reading in :mod:`gpufleet.service.views.run_views`;
both are re-exported here.

A run (``job_runs``) is a collection, a validation, an inspection sweep or an active test
(evidence) of the hosts a selector matched when it started, or the remediation of one host
(:mod:`gpufleet.service.background.remediate_run`: one chunk, its report on the chunk). Its
hosts (by id: a host renamed meanwhile is still the same host) are split into chunks of
``GPUFLEET_RUN_CHUNK`` (``job_chunks``); each chunk is one job on the queue
(:mod:`gpufleet.service.background.tasks`), so any number of workers share one run. Every
host gets exactly one result in the run: a collect or validate run owns one
``collection_runs`` row (one ``collection_results`` row per host); an inspect, evidence or
remediate run records one ``job_run_hosts`` row per host (its samples or evidence are stored
as ``gpufleet inspect`` / ``evidence run`` store them).

Claimed once: a chunk claims its hosts through the claim -> run -> apply engine
(:mod:`gpufleet.service.core.pipeline`) under a token of its own (``run<id>-<chunk>-<attempt>``).
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
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from gpufleet.collect.transport import Outcome, RawResult
from gpufleet.domain.runs import RunKind, RunState, claim_prefix, claim_token
from gpufleet.domain.states import HostState
from gpufleet.errors import Conflict, NotFound
from gpufleet.service.background.remediate_run import run_remediation
from gpufleet.service.background.run_start import Deferrer as Deferrer
from gpufleet.service.background.run_start import run_params as run_params
from gpufleet.service.background.run_start import start_run as start_run
from gpufleet.service.background.sweeper import sweep
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.core.lifecycle import retrying
from gpufleet.service.core.pipeline import Claim, claim_lease
from gpufleet.service.core.policies import Policies
from gpufleet.service.health.inspect import inspect
from gpufleet.service.health.inspect_store import roll_up_and_prune
from gpufleet.service.hosts.collect import claim_into_run, collect_claimed
from gpufleet.service.hosts.evidence import HELD_ELSEWHERE, run_active
from gpufleet.service.hosts.validate import HostVerdict, judge_host
from gpufleet.service.views.run_views import RunView as RunView
from gpufleet.service.views.run_views import list_runs as list_runs
from gpufleet.service.views.run_views import queue_depth as queue_depth
from gpufleet.service.views.run_views import run_counts
from gpufleet.service.views.run_views import run_hosts as run_hosts
from gpufleet.service.views.run_views import show_run as show_run
from gpufleet.service.views.run_views import unfinished_chunks as unfinished_chunks
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
    if c.kind is RunKind.REMEDIATE:
        _remediate_chunk(fleet, c)
        return
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


def _remediate_chunk(fleet: Fleet, c: _Chunk) -> None:
    """The one host of a remediate run (:mod:`gpufleet.service.background.remediate_run`):
    its outcome recorded, the report kept on the chunk; a remediation that did not end ok
    fails the run with its reason."""
    hid = c.ids[0]
    name = c.names.get(hid)
    if name is None:
        _finish_chunk(fleet, c.run_id, c.seq, RunState.FAILED, {},
                      error="the host was removed before its remediation ran")
        return
    got = run_remediation(fleet, name, c.params, attempt=c.attempt, run_id=c.run_id)
    _record(fleet, c, {hid: (got.outcome, got.detail or None)})
    state = RunState.SUCCEEDED if got.error is None else RunState.FAILED
    # as JSON text: the report keeps its keys' order (PostgreSQL's jsonb would reorder them),
    # so remote mode prints it as the local command does
    report = json.dumps(got.report, default=str)
    _finish_chunk(fleet, c.run_id, c.seq, state, {"remediation": report}, error=got.error)


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
            if run.kind is RunKind.REMEDIATE and error:  # one chunk: its reason
                run.error = error
        if run.collection_run_id is not None:
            coll = s.get(CollectionRun, run.collection_run_id)
            if coll is not None:
                coll.finished_at = now
                coll.counts = run_counts(s, coll.id)
                from gpufleet.service.hosts.racks import check_racks  # issue 27

                check_racks(s, fleet)
