"""The remediate run (issue 25 item 2) on SQLite and PostgreSQL, its chunk run as a worker
runs it, on the simulated lab: checked before it is queued, run once with its report kept;
a remediation that does not end ok fails the run with the reason; an attempt after a dead
worker fails closed (nothing runs again: the reboot may have happened) and is counted."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select
from tests.service.test_jobs import Recorder, make_lab

from gpufleet.domain.remediation import Action
from gpufleet.domain.runs import RunKind, RunState
from gpufleet.errors import ConfigError, NotFound, UsageError
from gpufleet.service.background import jobs
from gpufleet.service.background.remediate_run import start_remediation
from gpufleet.service.core import background_errors as background
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.views.hosts import list_events
from gpufleet.store.tables import JobChunk


def _work(fleet: Fleet, run_id: int) -> jobs.RunView:
    """The run's one chunk, as the worker's job runs it."""
    jobs.run_chunk(fleet, run_id, 0, worker="test:1", final=False)
    return jobs.show_run(fleet, run_id)


def test_remediate_runs_are_checked_before_they_are_queued(fleet: Fleet, tmp_path: Path) -> None:
    make_lab(fleet, tmp_path, 2)
    q = Recorder()
    with pytest.raises(ConfigError, match=r"POST /hosts/\{name\}/remediate"):
        jobs.start_run(fleet, RunKind.REMEDIATE, "gpu-01", q)  # POST runs cannot start one
    with pytest.raises(ConfigError, match="unknown remediate run parameter"):
        jobs.start_run(fleet, RunKind.REMEDIATE, "gpu-01", q, params={"action": "reboot",
                                                                      "test": "dcgm"})
    with pytest.raises(ConfigError, match="unknown remediation action"):
        jobs.start_run(fleet, RunKind.REMEDIATE, "gpu-01", q, params={"action": "pray"})
    with pytest.raises(NotFound, match="gpu-99"):
        start_remediation(fleet, "gpu-99", Action.REBOOT, q)
    with pytest.raises(UsageError, match="needs --ticket"):
        start_remediation(fleet, "gpu-01", Action.SERVICE_REQUEST, q)
    with pytest.raises(UsageError, match="belong to --action service-request"):
        start_remediation(fleet, "gpu-01", Action.REBOOT, q, ticket="RMA-1")
    assert q.deferred == []


def test_a_remediate_run_runs_once_and_fails_closed(fleet: Fleet, tmp_path: Path) -> None:
    make_lab(fleet, tmp_path, 3, {"gpu-02": ["unreachable"]})
    q = Recorder()
    run = start_remediation(fleet, "gpu-01", Action.SERVICE_REQUEST, q, ticket="RMA-7",
                            reason="fan")
    assert (run.kind, run.state, run.hosts, run.chunks) == (
        RunKind.REMEDIATE, RunState.QUEUED, 1, 1)
    assert q.deferred == [(run.id, 0)]
    done = _work(fleet, run.id)
    assert done.state is RunState.SUCCEEDED and done.error is None
    rep = done.remediation
    assert rep is not None and list(rep)[:5] == ["host", "action", "ok", "steps", "state"]
    assert (rep["host"], rep["ok"], rep["state"]) == ("gpu-01", True, "maintenance")
    [h] = jobs.run_hosts(fleet, run.id)
    assert (h.host, h.outcome) == ("gpu-01", "ok") and "service-request ok" in str(h.detail)
    assert len(list_events(fleet, "gpu-01", kind="remediation")) == 1
    _work(fleet, run.id)  # a finished run's job delivered again: nothing runs twice
    assert len(list_events(fleet, "gpu-01", kind="remediation")) == 1

    # the host does not answer and has no BMC: the reboot fails, so does the run
    run = start_remediation(fleet, "gpu-02", Action.REBOOT, q)
    done = _work(fleet, run.id)
    assert done.state is RunState.FAILED, done
    assert str(done.error).startswith("gpu-02: reboot failed: unreachable"), done.error
    assert done.remediation is not None and done.remediation["ok"] is False
    [h] = jobs.run_hosts(fleet, run.id)
    assert h.outcome == "failed"

    # the worker died during the remediation: the next attempt runs nothing, fails the run
    run = start_remediation(fleet, "gpu-03", Action.REBOOT, q)
    with fleet.db.session() as s:
        chunk = s.scalars(select(JobChunk).where(JobChunk.run_id == run.id)).one()
        chunk.attempts, chunk.state = 1, RunState.RUNNING
    failures = background.counts()[background.WORKER]
    done = _work(fleet, run.id)
    assert done.state is RunState.FAILED and "may have partly run" in str(done.error), done
    assert done.remediation is not None and "error" in done.remediation
    assert background.counts()[background.WORKER] == failures + 1
    assert list_events(fleet, "gpu-03", kind="remediation") == []
