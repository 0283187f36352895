"""Runs through the API with a real procrastinate worker in the process (``serve
--with-worker``): the in-memory connector on SQLite, procrastinate's tables on PostgreSQL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text
from tests.api.conftest import auth, write_tokens
from tests.api.test_serve import free_port, wait_until_serving
from tests.service.test_jobs import make_lab
from tests.store.conftest import empty_url as empty_url

from gpufleet.api.app import create_app
from gpufleet.api.auth import TokenStore
from gpufleet.config import load_settings
from gpufleet.service.background.job_queue import JobQueue
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.core.schema import upgrade
from gpufleet.store.db import Database

V1 = "/api/v1"
GPUFLEET = str(Path(sys.executable).parent / "gpufleet")


def empty_queue(fleet: Fleet) -> None:
    """Install the job queue's schema (as `gpufleet db upgrade` does) and empty it."""
    if fleet.db.dialect != "postgresql":
        return
    fleet.db.migrate(queue=True)
    with fleet.db.engine.begin() as c:
        c.execute(
            text(
                "TRUNCATE procrastinate_jobs, procrastinate_periodic_defers, "
                "procrastinate_events, procrastinate_workers RESTART IDENTITY CASCADE"
            )
        )


@pytest.fixture
def worker(fleet: Fleet, tmp_path: Path) -> Iterator[JobQueue]:
    make_lab(fleet, tmp_path, 5, {"gpu-04": ["unreachable"]}, model="h100-8x")
    empty_queue(fleet)
    fleet.settings.run_chunk = 2
    fleet.settings.schedule_sweep = ""  # only the runs of this test
    q = JobQueue(fleet)
    q.start_in_process()
    yield q
    q.stop_in_process()


def wait_finished(c: TestClient, run_id: int, timeout_s: float = 60) -> dict[str, object]:
    end = time.monotonic() + timeout_s
    while True:
        r = c.get(f"{V1}/runs/{run_id}", headers=auth("viewer"))
        assert r.status_code == 200, r.text
        body: dict[str, object] = r.json()
        if body["state"] in ("succeeded", "failed") or time.monotonic() > end:
            return body
        time.sleep(0.2)


def test_a_run_started_through_the_api_runs_on_the_worker(
    fleet: Fleet, worker: JobQueue, tmp_path: Path
) -> None:
    app = create_app(fleet, TokenStore(write_tokens(tmp_path / "tokens.yaml")), jobs=worker)
    with TestClient(app) as c:
        refused = c.post(f"{V1}/runs", json={"kind": "collect"}, headers=auth("viewer"))
        assert refused.status_code == 403
        assert refused.json()["error"]["code"] == "forbidden"
        bad = c.post(f"{V1}/runs", json={"kind": "reboot"}, headers=auth("operator"))
        assert bad.status_code == 422 and "kind" in bad.json()["error"]["message"]
        missing = c.post(
            f"{V1}/runs", json={"kind": "collect", "selector": "nope"}, headers=auth("operator")
        )
        assert missing.status_code == 404

        r = c.post(f"{V1}/runs", json={"kind": "collect"}, headers=auth("operator"))
        assert r.status_code == 202, r.text
        started = r.json()
        assert (started["hosts"], started["chunks"]) == (5, 3)
        assert started["actor"] == "api:operator-bot"
        done = wait_finished(c, started["id"])
        assert done["state"] == "succeeded", done
        assert done["counts"] == {"ok": 4, "unreachable": 1}
        assert done["hosts_done"] == 5 and done["chunks_done"] == 3

        v = c.post(
            f"{V1}/runs",
            json={"kind": "validate", "selector": "gpu-0[12]"},
            headers=auth("operator"),
        )
        assert v.status_code == 422  # character classes are refused, naming the selector
        v = c.post(
            f"{V1}/runs",
            json={"kind": "validate", "selector": "gpu-01,gpu-02"},
            headers=auth("operator"),
        )
        assert v.status_code == 202
        vdone = wait_finished(c, v.json()["id"])
        assert vdone["state"] == "succeeded" and vdone["verdicts"] == {"available": 2}

        listed = c.get(f"{V1}/runs", headers=auth("viewer")).json()
        assert [x["id"] for x in listed] == [v.json()["id"], started["id"]]
        depth = c.get(f"{V1}/jobs", headers=auth("viewer")).json()
        assert {(d["queue"], d["status"]) for d in depth} == {
            ("runs", "todo"),
            ("runs", "doing"),
            ("periodic", "todo"),
            ("periodic", "doing"),
        }
        assert all(d["jobs"] == 0 for d in depth)
        assert c.get(f"{V1}/jobs").status_code == 401
        metrics = c.get("/metrics").text
        assert 'gpufleet_jobs{queue="runs",status="todo"} 0.0' in metrics


def test_inspect_and_evidence_runs_through_the_api(
    fleet: Fleet, worker: JobQueue, tmp_path: Path
) -> None:
    """start -> job id -> progress -> result, for an inspection sweep and an active test."""
    app = create_app(fleet, TokenStore(write_tokens(tmp_path / "tokens.yaml")), jobs=worker)
    with TestClient(app) as c:
        r = c.post(f"{V1}/runs", json={"kind": "inspect"}, headers=auth("operator"))
        assert r.status_code == 202, r.text
        started = r.json()
        assert (started["kind"], started["hosts"], started["chunks"]) == ("inspect", 5, 3)
        assert all(ch["job_id"] is not None for ch in started["chunk_list"])
        done = wait_finished(c, started["id"])
        assert done["state"] == "succeeded", done
        assert done["counts"] == {"ok": 4, "unreachable": 1} and done["hosts_done"] == 5
        hosts = c.get(f"{V1}/runs/{started['id']}/hosts", headers=auth("viewer")).json()
        assert [h["host"] for h in hosts] == [f"gpu-0{i}" for i in range(1, 6)]
        assert hosts[3]["outcome"] == "unreachable"

        for body, field in [
            ({"kind": "evidence"}, "test"),
            ({"kind": "evidence", "test": "memtest"}, "test"),
            ({"kind": "evidence", "test": "dcgm", "level": 7}, "level"),
            ({"kind": "collect", "test": "dcgm"}, "test"),
        ]:
            bad = c.post(f"{V1}/runs", json=body, headers=auth("operator"))
            assert bad.status_code == 422, (body, bad.text)
            assert field in bad.json()["error"]["message"], bad.json()
        e = c.post(
            f"{V1}/runs",
            json={
                "kind": "evidence",
                "test": "gpu-burn",
                "seconds": 5,
                "selector": "gpu-01,gpu-02",
            },
            headers=auth("operator"),
        )
        assert e.status_code == 202, e.text
        assert e.json()["params"] == {"test": "gpu-burn", "level": 1, "seconds": 5}
        edone = wait_finished(c, e.json()["id"])
        assert edone["state"] == "succeeded" and edone["counts"] == {"passed": 2}, edone
        ehosts = c.get(f"{V1}/runs/{e.json()['id']}/hosts", headers=auth("viewer")).json()
        assert {h["host"]: h["outcome"] for h in ehosts} == {"gpu-01": "passed", "gpu-02": "passed"}
        assert c.get(f"{V1}/runs/999/hosts", headers=auth("viewer")).status_code == 404


def test_the_queue_needs_db_upgrade_on_postgres_and_the_server_worker_on_sqlite(
    empty_url: str, tmp_path: Path
) -> None:
    Database(empty_url).migrate()  # the gpufleet tables only (what servers check)
    settings = load_settings(home=tmp_path / "home", database_url=empty_url)
    fleet = Fleet.open(settings=settings)
    shared = fleet.db.dialect == "postgresql"
    assert fleet.db.status().queue == ("missing" if shared else "in-process")
    make_lab(fleet, tmp_path, 1)
    app = create_app(fleet, TokenStore(write_tokens(tmp_path / "tokens.yaml")))
    with TestClient(app) as c:
        r = c.post(f"{V1}/runs", json={"kind": "collect"}, headers=auth("operator"))
        assert r.status_code == 503, r.text
        err = r.json()["error"]
        assert err["code"] == "store"
        assert ("gpufleet db upgrade" if shared else "--with-worker") in err["message"]
        assert c.get(f"{V1}/runs", headers=auth("viewer")).json() == []
    before, after = upgrade(settings)
    assert (before.queue, after.queue) == (
        ("missing", "present") if shared else ("in-process", "in-process")
    )
    if shared:  # now a server queues runs for the workers, with none in this process
        with TestClient(create_app(fleet, TokenStore(write_tokens(tmp_path / "tokens.yaml")))) as c:
            r = c.post(f"{V1}/runs", json={"kind": "collect"}, headers=auth("operator"))
            assert r.status_code == 202, r.text
            depth = {
                (d["queue"], d["status"]): d["jobs"]
                for d in c.get(f"{V1}/jobs", headers=auth("viewer")).json()
            }
            assert depth[("runs", "todo")] == 1
    fleet.db.dispose()


def test_serve_with_worker_runs_jobs_on_embedded_sqlite(tmp_path: Path) -> None:
    """The README's path: no database server, `gpufleet serve --with-worker` runs the runs."""
    home = tmp_path / "home"
    fleet = Fleet.open(home=home, url=f"sqlite:///{home / 'gpufleet.db'}", actor="pytest")
    make_lab(fleet, tmp_path, 3)
    fleet.db.dispose()
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    env |= {
        "GPUFLEET_HOME": str(home),
        "GPUFLEET_API_TOKENS_FILE": str(write_tokens(tmp_path / "tokens.yaml")),
        "GPUFLEET_SCHEDULE_SWEEP": "* * * * * */2",
    }
    proc = subprocess.Popen(
        [GPUFLEET, "serve", "--port", str(port), "--with-worker"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}/api/v1"
    try:
        wait_until_serving(proc, f"{base}/health", timeout=120)
        r = httpx.post(f"{base}/runs", json={"kind": "validate"}, headers=auth("operator"))
        assert r.status_code == 202, r.text
        run_id = r.json()["id"]
        deadline = time.monotonic() + 120
        while True:
            body = httpx.get(f"{base}/runs/{run_id}", headers=auth("viewer")).json()
            if body["state"] in ("succeeded", "failed"):
                break
            assert time.monotonic() < deadline, body
            time.sleep(0.2)
        assert body["state"] == "succeeded" and body["verdicts"] == {"available": 3}
        # nothing left queued, and /metrics says so
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics").text
        assert 'gpufleet_jobs{queue="runs",status="todo"} 0.0' in metrics
    finally:
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=60)
    assert "background jobs run in this process" in err
