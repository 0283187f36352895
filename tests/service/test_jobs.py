"""Runs as queue jobs (issue 12 workers): chunks (of host ids), exactly-once per run, retries
that take back their own claims, hosts held elsewhere, schedules once per period; collect,
validate, inspect and evidence runs; on SQLite and PostgreSQL.

The chunk function is called here as a worker calls it; the in-process worker (procrastinate
on its in-memory connector) and the API run in ``test_jobs_api.py``; several worker processes
on PostgreSQL in ``tests/e2e/test_scale_out.py``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from procrastinate.jobs import Job
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpufleet.domain.runs import RunKind, RunState, claim_token
from gpufleet.errors import ConfigError, NotFound, StoreUnavailable
from gpufleet.lab.demo import enroll_lab
from gpufleet.lab.fleet import LabFleet
from gpufleet.service.background import jobs
from gpufleet.service.background.tasks import MAX_ATTEMPTS, ChunkRetry
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.core.pipeline import Claim, claim_hosts
from gpufleet.service.core.policies import Policies
from gpufleet.service.hosts.collect import claim_into_run, collect_claimed
from gpufleet.store.tables import CollectionResult, EvidenceRow, Host, HostSampleRow, JobChunk


class Recorder:
    """A queue that only records what would run (the test runs the chunks itself)."""

    def __init__(self, shared: bool = True) -> None:
        self.shared = shared
        self.deferred: list[tuple[int, int]] = []

    def check_ready(self) -> None:
        pass

    def defer_chunks(self, session: Session | None, chunks: Sequence[tuple[int, int]]) -> list[int]:
        start = len(self.deferred)
        self.deferred += chunks
        return list(range(start + 1, start + 1 + len(chunks)))


def make_lab(
    fleet: Fleet,
    tmp_path: Path,
    n: int,
    faults: dict[str, list[str]] | None = None,
    model: str = "a100-8x",
) -> None:
    enroll_lab(fleet, tmp_path / "lab", n, models=[model], faults=faults or {})


def results_per_host(fleet: Fleet, coll_id: int) -> Counter[str]:
    with fleet.db.session() as s:
        rows = s.execute(
            select(Host.name, func.count(CollectionResult.id))
            .join(Host, Host.id == CollectionResult.host_id)
            .where(CollectionResult.run_id == coll_id)
            .group_by(Host.name)
        )
        return Counter({name: int(n) for name, n in rows})


def test_run_is_split_into_chunks_and_collects_every_host_once(
    fleet: Fleet, tmp_path: Path
) -> None:
    make_lab(fleet, tmp_path, 7, {"gpu-03": ["unreachable"]})
    fleet.settings.run_chunk = 3
    q = Recorder()
    run = jobs.start_run(fleet, RunKind.COLLECT, None, q)
    assert run is not None
    assert (run.state, run.hosts, run.chunks) == (RunState.QUEUED, 7, 3)
    assert q.deferred == [(run.id, 0), (run.id, 1), (run.id, 2)]
    assert [c.job_id for c in run.chunk_list] == [1, 2, 3]
    for run_id, seq in q.deferred:
        jobs.run_chunk(fleet, run_id, seq, worker="w1", final=False)
        # a duplicate delivery of a finished chunk does nothing
        jobs.run_chunk(fleet, run_id, seq, worker="w2", final=False)
    done = jobs.show_run(fleet, run.id)
    assert done.state is RunState.SUCCEEDED and done.finished_at is not None
    assert done.counts == {"ok": 6, "unreachable": 1}
    assert (done.hosts_done, done.chunks_done) == (7, 3)
    assert {c.worker for c in done.chunk_list} == {"w1"}
    assert done.collection_run is not None
    per_host = results_per_host(fleet, done.collection_run)
    assert len(per_host) == 7 and set(per_host.values()) == {1}
    assert [r.id for r in jobs.list_runs(fleet)] == [run.id]


def test_validate_run_judges_every_host(fleet: Fleet, tmp_path: Path) -> None:
    make_lab(fleet, tmp_path, 4, {"gpu-02": ["ecc-uncorrectable"]})
    fleet.settings.run_chunk = 2
    q = Recorder()
    run = jobs.start_run(fleet, RunKind.VALIDATE, "gpu-0*", q)
    assert run is not None
    for run_id, seq in q.deferred:
        jobs.run_chunk(fleet, run_id, seq, worker="w1", final=False)
    done = jobs.show_run(fleet, run.id)
    assert done.state is RunState.SUCCEEDED
    assert done.verdicts == {"available": 3, "quarantine": 1}


def test_a_retried_chunk_takes_back_its_claims_and_skips_what_is_done(
    fleet: Fleet, tmp_path: Path
) -> None:
    """A worker killed mid-chunk left one host collected and the others claimed under its
    token: the retry collects only the others, each exactly once in the run."""
    make_lab(fleet, tmp_path, 4)
    fleet.settings.run_chunk = 4
    q = Recorder()
    run = jobs.start_run(fleet, RunKind.COLLECT, None, q)
    assert run is not None and run.collection_run is not None
    coll = run.collection_run
    # the killed first attempt: started, claimed every host, stored one result, then died
    with fleet.db.session() as s:
        chunk = s.scalars(select(JobChunk).where(JobChunk.run_id == run.id)).one()
        chunk.attempts, chunk.state = 1, RunState.RUNNING
    names = ["gpu-01", "gpu-02", "gpu-03", "gpu-04"]
    got = claim_into_run(
        fleet,
        coll,
        ",".join(names),
        lambda _n: timedelta(hours=1),
        token=claim_token(run.id, 0, 1),
        take_over="nobody-",
    )
    assert sorted(c.target.name for c in got.hosts) == names
    first = Claim(got.run_id, got.token, [got.hosts[0]], [])
    collect_claimed(fleet, coll, first, forks=1, timeout_s=10, policies=Policies(fleet).load())
    assert results_per_host(fleet, coll) == Counter({"gpu-01": 1})
    # a plain claim (another run, a CLI collect) cannot take the three still held
    other = claim_hosts(fleet, ",".join(names), None, lambda _n: timedelta(minutes=5))
    assert sorted(other.busy) == ["gpu-02", "gpu-03", "gpu-04"]
    with fleet.db.session() as s:  # let the plain claim go again
        for h in s.scalars(select(Host).where(Host.claim_token == other.token)):
            h.claim_token = h.claimed_until = None

    jobs.run_chunk(fleet, run.id, 0, worker="w2", final=False)
    done = jobs.show_run(fleet, run.id)
    assert done.state is RunState.SUCCEEDED
    assert (done.chunk_list[0].attempts, done.chunk_list[0].worker) == (2, "w2")
    per_host = results_per_host(fleet, coll)
    assert per_host == Counter({n: 1 for n in names})
    with fleet.db.session() as s:  # nothing left claimed
        assert s.scalar(select(func.count(Host.id)).where(Host.claim_token.is_not(None))) == 0


def test_hosts_held_elsewhere_make_the_chunk_retry_then_are_reported(
    fleet: Fleet, tmp_path: Path
) -> None:
    make_lab(fleet, tmp_path, 3)
    q = Recorder()
    run = jobs.start_run(fleet, RunKind.COLLECT, None, q)
    assert run is not None and run.collection_run is not None
    held = claim_hosts(fleet, "gpu-02", None, lambda _n: timedelta(hours=1))
    assert [c.target.name for c in held.hosts] == ["gpu-02"]
    with pytest.raises(jobs.HostsBusy, match="gpu-02"):
        jobs.run_chunk(fleet, run.id, 0, worker="w1", final=False)
    assert results_per_host(fleet, run.collection_run) == Counter({"gpu-01": 1, "gpu-03": 1})
    assert jobs.show_run(fleet, run.id).state is RunState.RUNNING
    # the last attempt gives up on the held host and says so
    jobs.run_chunk(fleet, run.id, 0, worker="w1", final=True)
    done = jobs.show_run(fleet, run.id)
    assert done.state is RunState.SUCCEEDED and done.skipped == ["gpu-02"]
    assert results_per_host(fleet, run.collection_run) == Counter({"gpu-01": 1, "gpu-03": 1})


def test_failed_chunk_fails_the_run_once_the_others_finish(fleet: Fleet, tmp_path: Path) -> None:
    make_lab(fleet, tmp_path, 2)
    fleet.settings.run_chunk = 1
    q = Recorder()
    run = jobs.start_run(fleet, RunKind.COLLECT, None, q)
    assert run is not None
    jobs.fail_chunk(fleet, run.id, 0, "database gone for good")
    assert jobs.show_run(fleet, run.id).state is RunState.QUEUED
    jobs.run_chunk(fleet, run.id, 1, worker="w1", final=False)
    done = jobs.show_run(fleet, run.id)
    assert done.state is RunState.FAILED
    assert done.error == "1 of 2 chunk(s) failed"
    assert done.chunk_list[0].error == "database gone for good"


def test_a_schedule_starts_one_run_per_period(fleet: Fleet, tmp_path: Path) -> None:
    make_lab(fleet, tmp_path, 2)
    q = Recorder()
    first = jobs.start_run(fleet, RunKind.COLLECT, None, q, schedule="collect", period=600)
    assert first is not None and (first.schedule, first.period) == ("collect", 600)
    # the same period again (another worker's deferral): nothing
    assert jobs.start_run(fleet, RunKind.COLLECT, None, q, schedule="collect", period=600) is None
    # the next period while the previous run is unfinished: skipped, not piled up
    assert jobs.start_run(fleet, RunKind.COLLECT, None, q, schedule="collect", period=660) is None
    for run_id, seq in q.deferred:
        jobs.run_chunk(fleet, run_id, seq, worker="w1", final=False)
    nxt = jobs.start_run(fleet, RunKind.COLLECT, None, q, schedule="collect", period=720)
    assert nxt is not None and nxt.id != first.id
    # an API start is never deduplicated
    assert jobs.start_run(fleet, RunKind.COLLECT, None, q) is not None


def test_selectors_that_match_nothing_are_refused(fleet: Fleet, tmp_path: Path) -> None:
    q = Recorder()
    with pytest.raises(NotFound, match="no hosts to collect"):
        jobs.start_run(fleet, RunKind.COLLECT, None, q)
    make_lab(fleet, tmp_path, 1)
    with pytest.raises(NotFound, match="nope"):
        jobs.start_run(fleet, RunKind.VALIDATE, "nope", q)
    with pytest.raises(NotFound, match="no run 999"):
        jobs.show_run(fleet, 999)
    assert q.deferred == []


def test_chunk_retry_policy() -> None:
    """Held hosts: retry soon, a little later each time; a database briefly away: back off;
    a mistake no retry fixes, or the last attempt: fail the chunk."""
    retry = ChunkRetry()

    def wait_s(exc: BaseException, attempts: int) -> float | None:
        job = Job(
            id=1, queue="runs", lock=None, queueing_lock=None, task_name="t", attempts=attempts
        )
        before = datetime.now(UTC)
        decision = retry.get_retry_decision(exception=exc, job=job)
        if decision is None:
            return None
        assert decision.retry_at is not None
        return round((decision.retry_at - before).total_seconds())

    busy = jobs.HostsBusy(["gpu-01"])
    assert [wait_s(busy, n) for n in (0, 1, 5, 28, 29)] == [1, 2, 6, 29, None]
    assert wait_s(busy, MAX_ATTEMPTS - 1) is None
    assert [wait_s(StoreUnavailable("db restarting"), n) for n in (0, 2, 9)] == [2, 8, 60]
    assert wait_s(ConfigError("bad profiles file"), 0) is None


def samples_per_host(fleet: Fleet) -> Counter[str]:
    with fleet.db.session() as s:
        rows = s.execute(
            select(Host.name, func.count())
            .join(HostSampleRow, HostSampleRow.host_id == Host.id)
            .group_by(Host.name)
        )
        return Counter({name: int(n) for name, n in rows})


def run_host_rows(fleet: Fleet, run_id: int) -> dict[str, str]:
    return {h.host: h.outcome for h in jobs.run_hosts(fleet, run_id)}


def test_chunks_carry_host_ids_and_a_renamed_host_is_still_collected(
    fleet: Fleet, tmp_path: Path
) -> None:
    make_lab(fleet, tmp_path, 3)
    fleet.settings.run_chunk = 3
    q = Recorder()
    run = jobs.start_run(fleet, RunKind.COLLECT, None, q)
    assert run is not None and run.collection_run is not None
    with fleet.db.session() as s:
        ids = {h.name: h.id for h in s.scalars(select(Host))}
        chunk = s.scalars(select(JobChunk).where(JobChunk.run_id == run.id)).one()
        assert chunk.hosts == [ids["gpu-01"], ids["gpu-02"], ids["gpu-03"]]
        # renamed after the run started: same host, same address
        s.get(Host, ids["gpu-02"]).name = "gpu-02-renamed"  # type: ignore[union-attr]
    jobs.run_chunk(fleet, run.id, 0, worker="w1", final=False)
    assert results_per_host(fleet, run.collection_run) == Counter(
        {"gpu-01": 1, "gpu-02-renamed": 1, "gpu-03": 1}
    )
    # (the sim lab knows the host by its old name: the new one does not answer there)
    assert run_host_rows(fleet, run.id) == {
        "gpu-01": "ok",
        "gpu-02-renamed": "unreachable",
        "gpu-03": "ok",
    }


def test_inspect_run_inspects_every_host_once_and_records_findings(
    fleet: Fleet, tmp_path: Path
) -> None:
    make_lab(fleet, tmp_path, 5, {"gpu-05": ["unreachable"]}, model="h100-8x")
    fleet.settings.run_chunk = 2
    q = Recorder()

    def inspect_run() -> jobs.RunView:
        q.deferred.clear()
        run = jobs.start_run(fleet, RunKind.INSPECT, None, q)
        assert run is not None
        assert (run.kind, run.hosts, run.chunks, run.collection_run) == (
            RunKind.INSPECT,
            5,
            3,
            None,
        )
        for run_id, seq in q.deferred:
            jobs.run_chunk(fleet, run_id, seq, worker="w1", final=False)
            jobs.run_chunk(fleet, run_id, seq, worker="w2", final=False)  # a duplicate: nothing
        return jobs.show_run(fleet, run.id)

    first = inspect_run()
    assert first.state is RunState.SUCCEEDED
    assert first.counts == {"ok": 4, "unreachable": 1}
    assert (first.hosts_done, first.chunks_done, first.findings) == (5, 3, 0)
    assert samples_per_host(fleet) == Counter({f"gpu-0{i}": 1 for i in range(1, 5)})
    # uncorrectable ECC errors appear on gpu-02: the next inspection finds them and acts
    fl = LabFleet.load(tmp_path / "lab")
    fl.model_copy(
        update={
            "hosts": [
                h.model_copy(update={"faults": ["ecc-uncorrectable"]}) if h.name == "gpu-02" else h
                for h in fl.hosts
            ]
        }
    ).save(tmp_path / "lab")
    fleet.clock.advance(minutes=5)  # type: ignore[attr-defined]
    second = inspect_run()
    assert second.counts == {"ok": 4, "unreachable": 1} and second.findings >= 1
    assert samples_per_host(fleet) == Counter({f"gpu-0{i}": 2 for i in range(1, 5)})
    hosts = {h.host: h for h in jobs.run_hosts(fleet, second.id)}
    assert "finding" in (hosts["gpu-02"].detail or "")
    assert "finding" not in (hosts["gpu-01"].detail or "")
    with fleet.db.session() as s:
        assert s.scalars(select(Host.state).where(Host.name == "gpu-02")).one().value == (
            "quarantined"
        )


def test_a_retried_inspect_chunk_keeps_what_the_killed_attempt_stored(
    fleet: Fleet, tmp_path: Path
) -> None:
    """The killed first attempt stored the samples of two hosts (at the chunk's start time)
    and died before the run recorded them; the retry counts those, inspects the third, and no
    host gets a second sample."""
    make_lab(fleet, tmp_path, 3)
    fleet.settings.run_chunk = 3
    q = Recorder()
    run = jobs.start_run(fleet, RunKind.INSPECT, None, q)
    assert run is not None
    at = fleet.now()
    with fleet.db.session() as s:
        chunk = s.scalars(select(JobChunk).where(JobChunk.run_id == run.id)).one()
        chunk.attempts, chunk.state, chunk.started_at = 1, RunState.RUNNING, at
    from gpufleet.service.health.inspect import inspect

    inspect(fleet, "gpu-01,gpu-02", at=at, token=claim_token(run.id, 0, 1))
    # and it still holds gpu-03 (claimed, never probed)
    held = claim_hosts(
        fleet, "gpu-03", None, lambda _n: timedelta(hours=1), token=claim_token(run.id, 0, 1)
    )
    assert [c.target.name for c in held.hosts] == ["gpu-03"]
    fleet.clock.advance(minutes=1)  # type: ignore[attr-defined]
    jobs.run_chunk(fleet, run.id, 0, worker="w2", final=False)
    done = jobs.show_run(fleet, run.id)
    assert done.state is RunState.SUCCEEDED and done.chunk_list[0].attempts == 2
    assert samples_per_host(fleet) == Counter({"gpu-01": 1, "gpu-02": 1, "gpu-03": 1})
    hosts = {h.host: h for h in jobs.run_hosts(fleet, run.id)}
    assert {n: h.outcome for n, h in hosts.items()} == {n: "ok" for n in hosts}
    assert hosts["gpu-01"].detail == "stored by an earlier attempt"
    assert len(hosts) == 3
    with fleet.db.session() as s:  # every sample at the chunk's first start; nothing claimed
        assert set(s.scalars(select(HostSampleRow.at))) == {at}
        assert s.scalar(select(func.count(Host.id)).where(Host.claim_token.is_not(None))) == 0


def test_evidence_run_tests_every_host_once_and_skips_allocated(
    fleet: Fleet, tmp_path: Path
) -> None:
    make_lab(fleet, tmp_path, 3)
    fleet.settings.run_chunk = 2
    q = Recorder()
    run = jobs.start_run(
        fleet, RunKind.EVIDENCE, None, q, params={"test": "dcgm", "level": 3, "seconds": None}
    )
    assert run is not None and run.params == {"test": "dcgm", "level": 3, "seconds": 60}
    with fleet.db.session() as s:  # allocated after the run started: not tested
        from gpufleet.domain.states import HostState

        s.get(Host, 3).state = HostState.ALLOCATED  # type: ignore[union-attr]
    for run_id, seq in q.deferred:
        jobs.run_chunk(fleet, run_id, seq, worker="w1", final=False)
    done = jobs.show_run(fleet, run.id)
    assert done.state is RunState.SUCCEEDED
    assert done.counts == {"passed": 2, "skipped": 1}
    assert run_host_rows(fleet, run.id) == {
        "gpu-01": "passed",
        "gpu-02": "passed",
        "gpu-03": "skipped",
    }
    with fleet.db.session() as s:
        rows = s.execute(select(EvidenceRow.host_id, EvidenceRow.kind)).all()
    assert sorted((h, str(k)) for h, k in rows) == [(1, "dcgm"), (2, "dcgm")]


def test_run_parameters_are_checked(fleet: Fleet, tmp_path: Path) -> None:
    make_lab(fleet, tmp_path, 1)
    q = Recorder()
    with pytest.raises(ConfigError, match="needs 'test'"):
        jobs.start_run(fleet, RunKind.EVIDENCE, None, q)
    with pytest.raises(ConfigError, match="unknown active test"):
        jobs.start_run(fleet, RunKind.EVIDENCE, None, q, params={"test": "memtest"})
    with pytest.raises(ConfigError, match="'level' must be 1 to 4"):
        jobs.start_run(fleet, RunKind.EVIDENCE, None, q, params={"test": "dcgm", "level": 9})
    with pytest.raises(ConfigError, match="a collect run takes no test"):
        jobs.start_run(fleet, RunKind.COLLECT, None, q, params={"test": "dcgm"})
    assert q.deferred == []


def test_a_schedule_starts_one_inspection_per_period(fleet: Fleet, tmp_path: Path) -> None:
    make_lab(fleet, tmp_path, 2)
    q = Recorder()
    first = jobs.start_run(fleet, RunKind.INSPECT, None, q, schedule="inspect", period=300)
    assert first is not None
    assert jobs.start_run(fleet, RunKind.INSPECT, None, q, schedule="inspect", period=300) is None
    # another schedule's run is not held up by it
    assert jobs.start_run(fleet, RunKind.COLLECT, None, q, schedule="collect", period=300)
