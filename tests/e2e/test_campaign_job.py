"""A campaign run as a worker job: ``POST /api/v1/campaigns/{name}/run`` answers 202 with the
job's id and the in-process worker of ``serve --with-worker`` (procrastinate's in-memory
connector, embedded SQLite; procrastinate's tables on PostgreSQL) runs the campaign with
the same service function as ``campaign run``: a ``--command`` campaign over the SSH
transport on real sshd lab hosts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, text
from tests.api.conftest import auth, write_tokens
from tests.e2e.test_campaign_ssh import NEW, SWITCH, _driver, _setup, _spec, _states, _switches
from tests.service.test_jobs_api import empty_queue
from tests.sshlab_fixtures import SshLabFactory

from gpufleet.api.app import create_app
from gpufleet.api.auth import TokenStore
from gpufleet.domain.campaign import ActionKind, CampaignStatus, HostStep
from gpufleet.service.background.job_queue import JobQueue
from gpufleet.service.campaigns.campaign import create_campaign, show_campaign
from gpufleet.service.core.fleet import Fleet, utcnow
from gpufleet.service.views.hosts import list_events
from gpufleet.store.tables import CampaignHost

pytestmark = pytest.mark.sshlab

V1 = "/api/v1"


@pytest.fixture
def client(fleet: Fleet, tmp_path: Path) -> Iterator[tuple[TestClient, JobQueue]]:
    fleet.settings.schedule_sweep = ""  # only this test's job
    empty_queue(fleet)  # PostgreSQL: procrastinate's tables in the fleet database
    q = JobQueue(fleet)
    q.start_in_process()
    app = create_app(fleet, TokenStore(write_tokens(tmp_path / "tokens.yaml")), jobs=q)
    with TestClient(app) as c:
        yield c, q
    q.stop_in_process()


def test_campaign_run_is_a_worker_job(
    fleet: Fleet,
    sshlab_factory: SshLabFactory,
    tmp_path: Path,
    client: tuple[TestClient, JobQueue],
) -> None:
    c, q = client
    lab, lf = _setup(fleet, sshlab_factory, tmp_path, 2)
    spec = _spec(tmp_path, "job-1", action_kind=ActionKind.COMMAND,
                 action=f"{SWITCH} new", rollback=None, waves="100%")
    create_campaign(fleet, spec)

    assert c.post(f"{V1}/campaigns/job-1/run", headers=auth("viewer")).status_code == 403
    r = c.post(f"{V1}/campaigns/job-1/run", headers=auth("operator"))
    assert r.status_code == 202, r.text
    body = r.json()
    assert body["campaign"] == "job-1" and body["status"] == "planned"
    assert isinstance(body["job"], int) and body["job"] >= 1

    end = time.monotonic() + 120
    while True:
        got = c.get(f"{V1}/campaigns/job-1", headers=auth("viewer")).json()
        if got["status"] not in ("planned", "running") or time.monotonic() > end:
            break
        time.sleep(0.3)
    assert got["status"] == "completed", got
    assert got["counts"] == {"done": 2}
    assert set(_states(fleet).values()) == {"available"}
    for h in lf.hosts:
        assert _driver(fleet, h.name) == NEW
        assert _switches(lab, h.name) == [f"{SWITCH} new"]  # run once, by the job
    # the job is finished and the campaign cannot run again
    assert all(n == 0 for n in q.depth().values())
    again = c.post(f"{V1}/campaigns/job-1/run", headers=auth("operator"))
    assert again.status_code == 409 and again.json()["error"]["code"] == "invalid_transition"
    events = c.get(f"{V1}/events", params={"kind": "campaign"}, headers=auth("viewer")).json()
    assert any(e["actor"] == "api:operator-bot" and "started" in e["message"] for e in events)


def test_abort_through_the_api_while_a_worker_job_drives_the_campaign(
    fleet: Fleet,
    sshlab_factory: SshLabFactory,
    tmp_path: Path,
    client: tuple[TestClient, JobQueue],
) -> None:
    """The server's own worker thread drives the campaign: an abort from the API in the same
    process sees that runner alive (it does not settle the hosts under it); the runner stops
    after its step and no host is left in maintenance."""
    c, q = client
    lab, lf = _setup(fleet, sshlab_factory, tmp_path, 3)
    spec = _spec(tmp_path, "job-2", action_kind=ActionKind.COMMAND,
                 action=f"sleep 2; {SWITCH} new", rollback=None, waves="100%")
    create_campaign(fleet, spec)
    assert c.post(f"{V1}/campaigns/job-2/run", headers=auth("operator")).status_code == 202

    end = time.monotonic() + 60
    while True:  # the canary's action is running on the worker
        got = c.get(f"{V1}/campaigns/job-2", headers=auth("viewer")).json()
        steps = [h["step"] for w in got["waves"] for h in w["hosts"]]
        if "action-started" in steps or time.monotonic() > end:
            break
        time.sleep(0.1)
    assert got["status"] == "running" and "action-started" in steps, got
    again = c.post(f"{V1}/campaigns/job-2/run", headers=auth("operator"))
    assert again.status_code == 409 and again.json()["error"]["code"] == "conflict"
    r = c.post(f"{V1}/campaigns/job-2/abort", headers=auth("operator"))
    assert r.status_code == 200 and r.json()["status"] == "aborted"

    end = time.monotonic() + 60
    while any(n for n in q.depth().values()) and time.monotonic() < end:
        time.sleep(0.2)
    assert all(n == 0 for n in q.depth().values())
    final = c.get(f"{V1}/campaigns/job-2", headers=auth("viewer")).json()
    assert final["status"] == "aborted"
    assert "maintenance" not in set(_states(fleet).values()), _states(fleet)
    for h in lf.hosts:
        assert len(_switches(lab, h.name)) <= 1, lab.calls(h.name)
    # the canary finished its step (validated on the new driver); the rest were not touched
    canary = final["waves"][0]["hosts"][0]["host"]
    assert _driver(fleet, canary) == NEW
    untouched = [h.name for h in lf.hosts if h.name != canary]
    assert all(_switches(lab, n) == [] for n in untouched)


@pytest.mark.parametrize("fleet", ["postgres"], indirect=True)
def test_a_killed_worker_campaign_job_is_resumed_by_another_worker(
    fleet: Fleet, sshlab_factory: SshLabFactory, tmp_path: Path
) -> None:
    """``kill -9`` of a ``gpufleet worker`` process (and its ansible children) in the middle of
    wave 1; the stalled-job recovery of another worker queues the job again and its second
    attempt takes the campaign over and finishes it: no host's action runs twice, no host is
    left in maintenance. PostgreSQL only: the queue shared between workers lives there (on
    SQLite the queue is in the server's memory and dies with it: ``campaign resume``)."""
    fleet.clock = utcnow  # two processes take part: one clock for both
    empty_queue(fleet)
    lab, lf = _setup(fleet, sshlab_factory, tmp_path, 6)
    create_campaign(fleet, _spec(tmp_path, "jk", waves="50%,100%", max_failures=0))
    job = JobQueue(fleet).defer_campaign("jk", "ci")
    env = {**os.environ, "GPUFLEET_ACTOR": "ci", "GPUFLEET_WORKER_HEARTBEAT": "0.5",
           "GPUFLEET_SCHEDULE_SWEEP": ""}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpufleet.cli.main", "--home", str(fleet.home), "--db",
         fleet.settings.db_url(), "worker", "--queue", "runs"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True,
    )
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:  # wait until wave 1's action has started
            with fleet.db.session() as s:
                started = s.scalars(select(CampaignHost).where(
                    CampaignHost.wave == 1,
                    CampaignHost.step == HostStep.ACTION_STARTED)).all()
            if started:
                break
            assert proc.poll() is None, "the worker ended before wave 1 started"
            time.sleep(0.05)
        else:
            pytest.fail("wave 1 never started")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the worker and its ansible children
        proc.wait()
    killed = show_campaign(fleet, "jk")
    assert killed.status == CampaignStatus.RUNNING
    assert "maintenance" in _states(fleet).values()  # wave 1 held when the worker died

    fleet.settings.worker_stalled_s = 2.0
    fleet.settings.worker_heartbeat_s = 0.5
    fleet.settings.schedule_sweep = ""
    q = JobQueue(fleet)
    q.start_in_process()
    try:
        end = time.monotonic() + 240
        while time.monotonic() < end:
            v = show_campaign(fleet, "jk")
            if v.status != CampaignStatus.RUNNING:
                break
            time.sleep(0.5)
    finally:
        q.stop_in_process()
    assert v.status == CampaignStatus.COMPLETED, v.as_json()
    states = _states(fleet)
    assert set(states.values()) == {"available"}, states
    for h in lf.hosts:
        assert _driver(fleet, h.name) == NEW
        assert len(_switches(lab, h.name)) == 1, (h.name, lab.calls(h.name))
    with fleet.db.session() as s:
        attempts = s.execute(text("SELECT attempts, status FROM procrastinate_jobs "
                                  "WHERE id = :id"), {"id": job}).one()
    assert attempts.status == "succeeded" and attempts.attempts >= 1  # the job, run again
    resumed = [e for e in list_events(fleet, kind="campaign") if "resumed" in e["message"]]
    assert resumed and resumed[0]["actor"] == "ci"
