"""Scale-out on PostgreSQL (issue 12 workers): two ``gpufleet serve`` processes and three
``gpufleet worker`` processes on one database, a 1,000-host simulated fleet.

Collections are started through both servers (the whole fleet through one, 200 of its hosts
through the other, at the same time: the overlapping chunks wait for each other's claims) and
by a schedule (99 hosts); one worker is killed with SIGKILL in the middle of a chunk. Then:
every host has exactly one result in every run, the killed worker's chunk was retried by
another worker and finished, every chunk job succeeded (none lost), and no periodic job was
deferred or run twice for one period (the sweep runs every 3 s on all three workers).

Slow (1,300 host collections by three workers, two to four minutes on 2 busy cores): marked
``postgres`` and run in full.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, text
from tests.api.conftest import auth, write_tokens
from tests.conftest import PG_ADMIN_URL

from gpufleet.inventory import load_inventory
from gpufleet.lab.fleet import create_fleet, write_inventory
from gpufleet.service.enroll import enroll
from gpufleet.service.fleet import Fleet
from gpufleet.store.db import Database

pytestmark = pytest.mark.postgres

GPUFLEET = str(Path(sys.executable).parent / "gpufleet")
HOSTS = 1000
CHUNK = 50


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def database() -> Iterator[str]:
    name = f"gpufleet_so_{uuid.uuid4().hex[:10]}"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}"'))
    yield PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + name
    with admin.connect() as c:
        c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def once_at(at: datetime) -> str:
    """A cron expression (seconds last) that fires at ``at`` (UTC) and not again today."""
    return f"{at.minute} {at.hour} * * * {at.second}"


def wait(what: str, check: object, timeout_s: float, procs: list[subprocess.Popen[str]]) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        for p in procs:
            if p.poll() is not None and p.returncode not in (-signal.SIGKILL,):
                log = Path(str(getattr(p, "log_path", ""))).read_text()[-3000:]
                pytest.fail(f"{p.args!r} exited {p.returncode} while waiting for {what}: {log}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_two_servers_three_workers_a_thousand_hosts(database: str, tmp_path: Path) -> None:
    started_at = time.monotonic()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    env |= {
        "GPUFLEET_DATABASE_URL": database,
        "GPUFLEET_HOME": str(tmp_path / "home"),
        "GPUFLEET_API_TOKENS_FILE": str(write_tokens(tmp_path / "tokens.yaml")),
        "GPUFLEET_RUN_CHUNK": str(CHUNK),
        "GPUFLEET_WORKER_HEARTBEAT": "2",
        "GPUFLEET_WORKER_STALLED_AFTER": "10",
        "GPUFLEET_SCHEDULE_SELECTOR": "gpu-00*",
        "GPUFLEET_SCHEDULE_SWEEP": "* * * * * */3",
        "GPUFLEET_SCHEDULE_SYNC": "",
    }
    subprocess.run([GPUFLEET, "db", "upgrade"], env=env, check=True, capture_output=True)
    status = subprocess.run(
        [GPUFLEET, "db", "status"], env=env, capture_output=True, text=True, check=True
    )
    assert "job queue: present" in status.stdout

    lab = tmp_path / "lab"
    lab.mkdir()
    fl = create_fleet(HOSTS, models=["h100-8x", "a100-8x"], faults={})
    fl.save(lab)
    write_inventory(fl, lab / "inventory.ini", transport="sim", lab_dir=lab)
    fleet = Fleet.open(home=tmp_path / "home", url=database, actor="pytest")
    enroll(fleet, load_inventory(lab / "inventory.ini"))
    db = Database(database)

    # the scheduled collection fires once, while the API's runs are being worked on (the
    # processes take a while to start on busy cores)
    schedule_at = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=45)
    env["GPUFLEET_SCHEDULE_COLLECT"] = once_at(schedule_at)
    procs: list[subprocess.Popen[str]] = []
    kinds: list[str] = []
    ports = [free_port(), free_port()]

    def spawn(*args: str) -> subprocess.Popen[str]:
        log = open(tmp_path / f"{args[0]}-{len(procs)}.log", "w")  # noqa: SIM115
        p = subprocess.Popen([GPUFLEET, *args], env=env, stdout=log, stderr=log, text=True)
        p.log_path = log.name  # type: ignore[attr-defined]
        procs.append(p)
        kinds.append(args[0])
        return p

    try:
        for port in ports:
            spawn("serve", "--port", str(port))
        workers = [spawn("worker") for _ in range(3)]
        label = {p.pid: f"{socket.gethostname()}:{p.pid}" for p in workers}

        def up() -> bool:
            try:
                return all(
                    httpx.get(f"http://127.0.0.1:{p}/api/v1/health", timeout=2).status_code == 200
                    for p in ports
                )
            except httpx.TransportError:
                return False

        wait("the servers", up, 300, procs)
        run_ids = {}
        for port, selector, hosts in zip(
            ports, [None, "gpu-01*,gpu-02*"], [HOSTS, 200], strict=True
        ):
            r = httpx.post(
                f"http://127.0.0.1:{port}/api/v1/runs",
                json={"kind": "collect", "selector": selector},
                headers=auth("operator"),
                timeout=60,
            )
            assert r.status_code == 202, r.text
            assert (r.json()["hosts"], r.json()["chunks"]) == (hosts, hosts // CHUNK)
            run_ids[r.json()["id"]] = hosts

        # SIGKILL one worker in the middle of a chunk it is running (just started: most of
        # its hosts not collected yet)
        victim = workers[0]
        killed: list[tuple[int, int]] = []

        def mid_chunk() -> bool:
            with db.engine.connect() as c:
                row = c.execute(
                    text(
                        "SELECT ch.run_id, ch.seq, "
                        "(SELECT count(*) FROM collection_results cr JOIN hosts h "
                        " ON h.id = cr.host_id JOIN job_runs jr ON jr.id = ch.run_id "
                        " WHERE cr.run_id = jr.collection_run_id "
                        " AND h.name IN (SELECT json_array_elements_text(ch.hosts::json))) "
                        "FROM job_chunks ch WHERE ch.state = 'running' AND ch.worker = :w"
                    ),
                    {"w": label[victim.pid]},
                ).first()
            if row is None or row[2] >= CHUNK // 3:
                return False
            victim.send_signal(signal.SIGKILL)
            killed.append((int(row[0]), int(row[1])))
            return True

        wait("a chunk on the first worker", mid_chunk, 300, procs)
        victim.wait(10)

        def all_done() -> bool:
            with db.engine.connect() as c:
                states = c.execute(text("SELECT schedule, state FROM job_runs")).all()
            scheduled = [s for sch, s in states if sch == "collect"]
            return len(scheduled) == 1 and all(s in ("succeeded", "failed") for _, s in states)

        try:
            wait("every run to finish (the scheduled one too)", all_done, 1200, procs)
        except AssertionError:
            with db.engine.connect() as c:
                print(c.execute(text("SELECT id, state, schedule, hosts FROM job_runs")).all())
                print(
                    c.execute(
                        text(
                            "SELECT run_id, seq, state, attempts, worker FROM job_chunks "
                            "WHERE state != 'succeeded'"
                        )
                    ).all()
                )
            raise
        collected_s = time.monotonic() - started_at

        with db.engine.connect() as c:
            runs = c.execute(
                text("SELECT id, state, schedule, period, collection_run_id FROM job_runs")
            ).all()
            assert len(runs) == 3
            assert {r.state for r in runs} == {"succeeded"}
            assert sorted(r.id for r in runs if r.schedule is None) == sorted(run_ids)
            expected = {r.id: run_ids.get(r.id, 99) for r in runs}
            for run in runs:  # every host exactly once per run
                per_host = c.execute(
                    text(
                        "SELECT host_id, count(*) FROM collection_results WHERE run_id = :r "
                        "GROUP BY host_id"
                    ),
                    {"r": run.collection_run_id},
                ).all()
                assert len(per_host) == expected[run.id], f"run {run.id}: {len(per_host)} hosts"
                assert {n for _, n in per_host} == {1}, f"run {run.id}: a host twice"
                outcomes = c.execute(
                    text("SELECT DISTINCT outcome FROM collection_results WHERE run_id = :r"),
                    {"r": run.collection_run_id},
                ).all()
                assert outcomes == [("ok",)]
            # the killed worker's chunk: retried by another worker, finished
            run_id, seq = killed[0]
            chunk = c.execute(
                text("SELECT state, attempts, worker FROM job_chunks WHERE run_id=:r AND seq=:s"),
                {"r": run_id, "s": seq},
            ).one()
            assert chunk.state == "succeeded" and chunk.attempts >= 2
            assert chunk.worker != label[victim.pid]
            # no job lost: every chunk job succeeded, once per chunk
            jobs = c.execute(
                text(
                    "SELECT status, count(*) FROM procrastinate_jobs "
                    "WHERE task_name = 'gpufleet.run_chunk' GROUP BY status"
                )
            ).all()
            assert dict(jobs) == {"succeeded": HOSTS // CHUNK + 4 + 2}
            # periodic jobs: one per task and period, however many workers deferred them
            twice = c.execute(
                text(
                    "SELECT task_name, args->>'timestamp', count(*) FROM procrastinate_jobs "
                    "WHERE args ? 'timestamp' GROUP BY 1, 2 HAVING count(*) > 1"
                )
            ).all()
            assert twice == []
            sweeps = c.execute(
                text("SELECT count(*) FROM procrastinate_jobs WHERE task_name = 'gpufleet.sweep'")
            ).scalar_one()
            assert sweeps >= 3  # several periods went by, each swept once
            started_twice = c.execute(
                text(
                    "SELECT j.id FROM procrastinate_jobs j JOIN procrastinate_events e "
                    "ON e.job_id = j.id WHERE e.type = 'started' AND j.args ? 'timestamp' "
                    "GROUP BY j.id HAVING count(*) > 1"
                )
            ).all()
            assert started_twice == []
            # the scheduled run belongs to the one period the schedule named
            sched = next(r for r in runs if r.schedule == "collect")
            assert sched.period == int(schedule_at.replace(microsecond=0).timestamp())
        print(
            f"\nscale-out: {HOSTS}-host fleet, 1,299 collections, 2 servers, 3 workers: "
            f"{collected_s:.0f} s"
        )
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
        fleet.db.dispose()
        db.dispose()
    # workers finish their jobs and exit 0 on SIGTERM; uvicorn re-raises the signal it handled
    for i, p in enumerate(procs):
        if p is victim:
            continue
        ok = (0,) if kinds[i] == "worker" else (0, -signal.SIGTERM)
        log = (tmp_path / f"{kinds[i]}-{i}.log").read_text()[-2000:]
        assert p.returncode in ok, (kinds[i], p.returncode, log)
