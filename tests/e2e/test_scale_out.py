"""Scale-out on PostgreSQL (issue 12 workers): two ``gpufleet serve`` processes and three
``gpufleet worker`` processes on one database, a 1,000-host simulated fleet.

Collections and inspections are started through both servers (server A: the whole fleet
collected and 50 of its hosts inspected; server B: 299 hosts inspected and 50 collected, all at
the same time: overlapping chunks wait for each other's claims) and by schedules (a collection
and an inspection of 99 hosts, once); one worker is killed with
SIGKILL in the middle of a chunk. Then, from the store: every host has exactly one result in
every run (one ``collection_results`` row per host per collect run; one ``job_run_hosts`` row
and one sample per host per inspect run, and no other sample), the killed worker's chunk was
queued again by procrastinate's stalled-worker detection (heartbeats) and finished by another
worker, every chunk job succeeded once (none lost, none left), and no periodic job was
deferred or started twice for one period (the sweep runs every 3 s on all three workers, the
schedules fire once).

Marked ``postgres``; 1,149 collections and 448 inspections by three workers (the work of the
1,300 collections this test ran before inspections were jobs).
"""

from __future__ import annotations

import os
import resource
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
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.enroll import enroll
from gpufleet.store.db import Database

pytestmark = pytest.mark.postgres

GPUFLEET = str(Path(sys.executable).parent / "gpufleet")
HOSTS = 1000
CHUNK = 50
SCHEDULE_IN_S = 40
#: (server, kind, selector, hosts) of the runs started through the API
STARTS = [
    (0, "collect", None, HOSTS),
    (1, "inspect", "gpu-00*,gpu-01*,gpu-02*", 299),
    (0, "inspect", "gpu-010*,gpu-011*,gpu-012*,gpu-013*,gpu-014*", 50),
    (1, "collect", "gpu-015*,gpu-016*,gpu-017*,gpu-018*,gpu-019*", 50),
]
SCHEDULED = 99  # gpu-0001 .. gpu-0099


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
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
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
    fl = create_fleet(HOSTS, models=["h100-8x"], faults={})
    fl.save(lab)
    write_inventory(fl, lab / "inventory.ini", transport="sim", lab_dir=lab)
    fleet = Fleet.open(home=tmp_path / "home", url=database, actor="pytest")
    enroll(fleet, load_inventory(lab / "inventory.ini"))
    db = Database(database)

    # the scheduled collection and inspection fire once, while the API's runs are being worked
    # on (the processes take a while to start on busy cores)
    schedule_at = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=SCHEDULE_IN_S)
    env["GPUFLEET_SCHEDULE_COLLECT"] = once_at(schedule_at)
    env["GPUFLEET_SCHEDULE_INSPECT"] = once_at(schedule_at)
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
        run_ids: dict[int, tuple[str, int]] = {}
        for server, kind, selector, hosts in STARTS:
            r = httpx.post(
                f"http://127.0.0.1:{ports[server]}/api/v1/runs",
                json={"kind": kind, "selector": selector},
                headers=auth("operator"),
                timeout=60,
            )
            assert r.status_code == 202, r.text
            body = r.json()
            assert (body["kind"], body["hosts"]) == (kind, hosts)
            assert body["chunks"] == -(-hosts // CHUNK)
            assert all(c["job_id"] is not None for c in body["chunk_list"])
            run_ids[body["id"]] = (kind, hosts)

        # SIGKILL one worker in the middle of a chunk it is running (just started: most of
        # its hosts without a result yet)
        victim = workers[0]
        killed: list[tuple[int, int]] = []

        def mid_chunk() -> bool:
            with db.engine.connect() as c:
                row = c.execute(
                    text(
                        "SELECT ch.run_id, ch.seq, "
                        "(SELECT count(*) FROM collection_results cr JOIN job_runs jr "
                        "  ON jr.id = ch.run_id WHERE cr.run_id = jr.collection_run_id "
                        "  AND cr.host_id IN "
                        "  (SELECT json_array_elements_text(ch.hosts::json)::int)) "
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
            scheduled = sorted(sch for sch, _ in states if sch is not None)
            return scheduled == ["collect", "inspect"] and all(
                s in ("succeeded", "failed") for _, s in states
            )

        try:
            wait("every run to finish (the scheduled ones too)", all_done, 1200, procs)
        except AssertionError:
            with db.engine.connect() as c:
                print(
                    c.execute(text("SELECT id, kind, state, schedule, hosts FROM job_runs")).all()
                )
                print(
                    c.execute(
                        text(
                            "SELECT run_id, seq, state, attempts, worker FROM job_chunks "
                            "WHERE state != 'succeeded'"
                        )
                    ).all()
                )
            raise
        done_s = time.monotonic() - started_at

        with db.engine.connect() as c:
            runs = c.execute(
                text(
                    "SELECT id, kind, state, schedule, period, hosts, chunks, collection_run_id "
                    "FROM job_runs ORDER BY id"
                )
            ).all()
            assert len(runs) == len(STARTS) + 2
            assert {r.state for r in runs} == {"succeeded"}
            assert sorted(r.id for r in runs if r.schedule is None) == sorted(run_ids)
            expected = {r.id: run_ids.get(r.id, (r.schedule, SCHEDULED)) for r in runs}
            assert {(r.kind, r.hosts) for r in runs} == set(expected.values())
            for run in runs:  # every host exactly once per run
                hosts = expected[run.id][1]
                if run.kind == "collect":
                    per_host = c.execute(
                        text(
                            "SELECT host_id, count(*), min(outcome) FROM collection_results "
                            "WHERE run_id = :r GROUP BY host_id"
                        ),
                        {"r": run.collection_run_id},
                    ).all()
                else:
                    per_host = c.execute(
                        text(
                            "SELECT rh.host_id, count(s.at), min(rh.outcome) "
                            "FROM job_run_hosts rh JOIN job_chunks ch ON ch.run_id = rh.run_id "
                            " AND rh.host_id IN "
                            " (SELECT json_array_elements_text(ch.hosts::json)::int) "
                            "LEFT JOIN host_samples s ON s.host_id = rh.host_id "
                            " AND s.at = ch.started_at "
                            "WHERE rh.run_id = :r GROUP BY rh.host_id"
                        ),
                        {"r": run.id},
                    ).all()
                assert len(per_host) == hosts, f"run {run.id} ({run.kind}): {len(per_host)} hosts"
                assert {n for _, n, _ in per_host} == {1}, f"run {run.id}: a host twice (or none)"
                assert {o for _, _, o in per_host} == {"ok"}, f"run {run.id}"
            # no other collection result or sample anywhere: nothing done twice
            inspected = sum(expected[r.id][1] for r in runs if r.kind == "inspect")
            collected = sum(expected[r.id][1] for r in runs if r.kind == "collect")
            assert c.execute(text("SELECT count(*) FROM host_samples")).scalar_one() == inspected
            assert (
                c.execute(text("SELECT count(*) FROM collection_results")).scalar_one() == collected
            )
            # the killed worker's chunk: queued again, finished by another worker
            run_id, seq = killed[0]
            chunk = c.execute(
                text("SELECT state, attempts, worker FROM job_chunks WHERE run_id=:r AND seq=:s"),
                {"r": run_id, "s": seq},
            ).one()
            assert chunk.state == "succeeded" and chunk.attempts >= 2
            assert chunk.worker != label[victim.pid]
            # no job lost: every chunk job succeeded, one job per chunk; nothing left queued
            jobs = c.execute(
                text(
                    "SELECT status, count(*), count(DISTINCT (args->>'run_id', args->>'seq')) "
                    "FROM procrastinate_jobs WHERE task_name = 'gpufleet.run_chunk' "
                    "GROUP BY status"
                )
            ).all()
            chunks = sum(r.chunks for r in runs)
            assert [tuple(j) for j in jobs] == [("succeeded", chunks, chunks)]
            left = c.execute(
                text(
                    "SELECT task_name, status FROM procrastinate_jobs "
                    "WHERE status IN ('failed', 'cancelled', 'aborted')"
                )
            ).all()
            assert left == []
            # the killed chunk's job: started twice (the killed attempt and the retry)
            restarted = c.execute(
                text(
                    "SELECT count(*) FROM procrastinate_events e JOIN job_chunks ch "
                    "ON ch.job_id = e.job_id WHERE e.type = 'started' "
                    "AND ch.run_id = :r AND ch.seq = :s"
                ),
                {"r": run_id, "s": seq},
            ).scalar_one()
            assert restarted >= 2
            # periodic jobs: one per task, schedule and period, however many workers deferred
            twice = c.execute(
                text(
                    "SELECT task_name, args->>'timestamp', args->>'kind', count(*) "
                    "FROM procrastinate_jobs WHERE args ? 'timestamp' "
                    "GROUP BY 1, 2, 3 HAVING count(*) > 1"
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
            # the scheduled runs belong to the one period the schedules named
            period = int(schedule_at.timestamp())
            assert {(r.schedule, r.period) for r in runs if r.schedule} == {
                ("collect", period),
                ("inspect", period),
            }
        summary = (
            f"scale-out: {HOSTS}-host fleet, {collected} collections and {inspected} "
            f"inspections, 2 servers, 3 workers (one killed): {done_s:.0f} s"
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
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = cpu.ru_utime + cpu.ru_stime - cpu_before.ru_utime - cpu_before.ru_stime
    print(f"\n{summary}; {cpu_s:.0f} CPU s in the server and worker processes")
    # workers finish their jobs and exit 0 on SIGTERM; uvicorn re-raises the signal it handled
    for i, p in enumerate(procs):
        if p is victim:
            continue
        ok = (0,) if kinds[i] == "worker" else (0, -signal.SIGTERM)
        log = (tmp_path / f"{kinds[i]}-{i}.log").read_text()[-2000:]
        assert p.returncode in ok, (kinds[i], p.returncode, log)
