"""A campaign run as a worker job: ``POST /api/v1/campaigns/{name}/run`` answers 202 with the
job's id and the in-process worker of ``serve --with-worker`` (procrastinate's in-memory
connector, embedded SQLite; procrastinate's tables on PostgreSQL) runs the campaign with
the same service function as ``campaign run``: a ``--command`` campaign over the SSH
transport on real sshd lab hosts."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from tests.api.conftest import auth, write_tokens
from tests.e2e.test_campaign_ssh import NEW, SWITCH, _driver, _setup, _spec, _states, _switches
from tests.service.test_jobs_api import empty_queue
from tests.sshlab_fixtures import SshLabFactory

from gpufleet.api.app import create_app
from gpufleet.api.auth import TokenStore
from gpufleet.domain.campaign import ActionKind
from gpufleet.service.campaign import create_campaign
from gpufleet.service.fleet import Fleet
from gpufleet.service.tasks import JobQueue

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
