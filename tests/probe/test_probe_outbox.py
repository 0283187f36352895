"""Probes of issue 24, item 11 (the outbox helper's bullets), through the real ``gpufleet`` CLI
in fresh processes, each asserting the exit code, the message and that nothing is lost:

* ``webhook-retried-past-4-failures``: a notification whose first 4 deliveries failed (HTTP
  500) is delivered by the next process; 84be469 gave it up after ``GPUFLEET_WEBHOOK_RETRIES``
  (3) retries and never sent it;
* ``webhook-dead-letter``: one failing past ``GPUFLEET_WEBHOOK_MAX_AGE_H`` is dead-lettered,
  kept with its payload, and ``gpufleet alarms`` shows it (84be469: no such thing);
* ``worker-survives-postgres-restart``: a real ``gpufleet worker`` on a throwaway PostgreSQL
  cluster (its own port on 127.0.0.1, initdb/pg_ctl in a temporary directory, run as the
  ``postgres`` user when we are root) is still alive after that server restarts under it and
  runs a job queued after the restart, and the job a dead worker left ``doing``; SIGTERM then
  stops it with exit 0. On 84be469 the worker exited 1 ("Side task ... failed ..., stopping
  worker").
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from glob import glob
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from gpufleet.domain.events import AlarmKind, AlarmSeverity
from gpufleet.inventory import load_inventory
from gpufleet.lab.fleet import create_fleet, write_inventory
from gpufleet.service.background.job_queue import JobQueue
from gpufleet.service.core.alarms import raise_alarm
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.enroll import enroll
from gpufleet.store.db import Database
from gpufleet.store.repo import host_by_name
from tests.conftest import PG_ADMIN_URL
from tests.probe.harness import (
    Ctx,
    Probe,
    World,
    base_env,
    check_invariants,
    gpufleet_cmd,
    run_probe,
    store_image,
)
from tests.service.test_webhooks import Receiver

GPUFLEET = str(Path(sys.executable).with_name("gpufleet"))


# ------------------------------------------------------------------------------ the world


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def world(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[World]:
    """Two simulated hosts, enrolled; no webhook configured (each probe brings its own)."""
    root = tmp_path_factory.mktemp(f"probe-outbox-{request.param}")
    name = None
    if request.param == "sqlite":
        url = f"sqlite:///{root / 'home' / 'gpufleet.db'}"
    else:
        name = f"gpufleet_probe_{uuid.uuid4().hex[:10]}"
        admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
        with admin.connect() as c:
            c.execute(text(f'CREATE DATABASE "{name}"'))
        admin.dispose()
        url = PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + name
        db = Database(url)
        db.migrate()
        db.dispose()
    w = World(request.param, root, root / "home", url, root / "lab")
    fl = create_fleet(2, models=["a100-8x"], faults={})
    fl.save(w.lab_dir)
    write_inventory(fl, w.lab_dir / "inventory.ini", transport="sim", lab_dir=w.lab_dir)
    fleet = Fleet.open(home=w.home, url=url, actor="probe-setup")
    enroll(fleet, load_inventory(w.lab_dir / "inventory.ini"))
    fleet.db.dispose()
    yield w
    if name is not None:
        admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
        with admin.connect() as c:
            c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.server.shutdown()
    r.server.server_close()


def _alarm(ctx: Ctx, message: str) -> int:
    """Setup: an open alarm on gpu-01 (no webhook configured: nothing queued yet)."""
    f = Fleet.open(home=ctx.world.home, url=ctx.world.url, actor="probe-setup")
    try:
        with f.db.session() as s:
            h = host_by_name(s, "gpu-01")
            a = raise_alarm(s, f, h, AlarmKind.OTHER, AlarmSeverity.WARNING, message)
            s.flush()
            return int(a.id)
    finally:
        f.db.dispose()


def _deliveries(world: World) -> list[dict[str, object]]:
    db = Database(world.url)
    try:
        with db.engine.connect() as c:
            rows = c.execute(
                text(
                    "SELECT id, kind, attempts, delivered, next_at, error, payload "
                    "FROM webhook_deliveries ORDER BY id"
                )
            ).all()
    finally:
        db.dispose()
    out = []
    for r in rows:
        payload = json.loads(r[6]) if isinstance(r[6], str) else r[6]
        out.append(
            {"id": r[0], "kind": r[1], "attempts": r[2], "delivered": bool(r[3]),
             "next_at": r[4], "error": r[5], "payload": payload}
        )
    return out


def _ctx(world: World, tmp_path: Path, receiver: Receiver, **env: str) -> Ctx:
    e = base_env(world.root / "os-home") | {"GPUFLEET_WEBHOOK_URL": receiver.url} | env
    return Ctx(world, tmp_path, e, list(world.global_args))


def _truncate_outbox(world: World) -> None:
    db = Database(world.url)
    try:
        with db.engine.begin() as c:
            c.execute(text("DELETE FROM webhook_deliveries"))
    finally:
        db.dispose()


# ------------------------------------------------------------------------------ the probes


def test_probe_webhook_retried_past_4_failures(
    world: World, tmp_path: Path, receiver: Receiver
) -> None:
    _truncate_outbox(world)
    ctx = _ctx(world, tmp_path, receiver, GPUFLEET_WEBHOOK_RETRIES="3")
    alarm = _alarm(ctx, "fan 3 stopped")
    receiver.statuses = [500, 500, 500, 500]  # the first 4 deliveries fail
    probe = Probe(
        "webhook-retried-past-4-failures", "11", "faults it survives",
        ("alarms", "resolve", str(alarm), "--reason", "fan replaced"), 0, r"resolved by",
    )
    before = store_image(world)
    r = run_probe(probe, ctx)
    check_invariants(probe, ctx, r, before)
    (row,) = _deliveries(world)
    assert (row["kind"], row["attempts"], row["delivered"]) == ("alarm-closed", 4, False), row
    assert row["next_at"] is not None, "given up after 4 failures"  # 84be469: None
    time.sleep(4.5)  # the 5th attempt is due 4 s after the 4th (0.5 s doubling)
    nxt = Probe("next-process", "11", "faults it survives", ("alarms", "list"), 0, r"alarms")
    r2 = run_probe(nxt, ctx)
    check_invariants(nxt, ctx, r2, before)
    (row,) = _deliveries(world)
    assert (row["attempts"], row["delivered"]) == (5, True), row
    assert [st for st, _ in receiver.answered] == [500, 500, 500, 500, 200]
    ids = {h["X-Gpufleet-Delivery"] for h, _ in receiver.got}
    assert ids == {str(row["id"])}  # one notification, five tries, the receiver's dedup key
    assert receiver.payloads()[-1]["data"]["reason"].endswith("fan replaced")  # type: ignore[index]


def test_probe_webhook_dead_letter(world: World, tmp_path: Path, receiver: Receiver) -> None:
    _truncate_outbox(world)
    # 0.0001 h = 0.36 s: the second failed attempt (0.5 s after the first) is past it
    ctx = _ctx(world, tmp_path, receiver, GPUFLEET_WEBHOOK_MAX_AGE_H="0.0001")
    alarm = _alarm(ctx, "PSU 1 lost input")
    receiver.statuses = [503] * 10
    setup = Probe(
        "resolve", "11", "faults it survives",
        ("alarms", "resolve", str(alarm), "--reason", "PSU reseated"), 0, r"resolved by",
    )
    before = store_image(world)
    check_invariants(setup, ctx, run_probe(setup, ctx), before)
    (row,) = _deliveries(world)
    assert (row["delivered"], row["next_at"], row["error"]) == (False, None, "HTTP 503"), row
    tried = len(receiver.got)
    assert tried == row["attempts"] and tried >= 2
    probe = Probe(
        "webhook-dead-letter", "11", "faults it survives", ("alarms", "list"), 0,
        r"1 webhook notification\(s\) dead-lettered .*gpufleet alarms dead-letters",
    )
    r = run_probe(probe, ctx)
    check_invariants(probe, ctx, r, before)
    listing = Probe(
        "dead-letters", "11", "faults it survives", ("alarms", "dead-letters", "--json"), 0,
        r"alarm-closed",
    )
    r = run_probe(listing, ctx)
    check_invariants(listing, ctx, r, before)
    (letter,) = json.loads(r.stdout)
    assert (letter["id"], letter["kind"], letter["host"]) == (row["id"], "alarm-closed", "gpu-01")
    assert letter["error"] == "HTTP 503"
    assert len(receiver.got) == tried  # a dead letter is never sent again
    (kept,) = _deliveries(world)  # nothing lost: the notification is kept whole
    assert kept["payload"] == row["payload"] and "PSU reseated" in json.dumps(kept["payload"])


# ------------------------------------------------------- a throwaway PostgreSQL under a worker


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cluster:
    """A private PostgreSQL cluster on 127.0.0.1:``port`` in a temporary directory (never the
    shared server on 5432), run as ``postgres`` when we are root (initdb refuses root)."""

    def __init__(self) -> None:
        bins = sorted(glob("/usr/lib/postgresql/*/bin/pg_ctl"))
        assert bins, "no PostgreSQL server binaries in /usr/lib/postgresql/*/bin"
        self.bin = Path(bins[-1]).parent
        self.dir = Path(tempfile.mkdtemp(prefix="gpufleet-pg-"))
        self.dir.chmod(0o755)
        self.data = self.dir / "data"
        self.port = _free_port()
        self.as_postgres = os.geteuid() == 0
        if self.as_postgres:
            shutil.chown(self.dir, "postgres", "postgres")
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *args: str) -> None:
        cmd = [str(self.bin / tool), *args]
        if self.as_postgres:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=self.dir)
        assert p.returncode == 0, f"{tool}: {p.stdout}{p.stderr}"

    def start(self) -> None:
        opts = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
        log = str(self.dir / "log")
        self._run("pg_ctl", "-D", str(self.data), "-o", opts, "-l", log, "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def close(self) -> None:
        with contextlib.suppress(AssertionError):
            self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    c = Cluster()
    try:
        c.start()
        yield c
    finally:
        c.close()


def _job_status(url: str, job_id: int) -> str | None:
    db = Database(url)
    try:
        with db.engine.connect() as c:
            st = c.execute(
                text("SELECT status FROM procrastinate_jobs WHERE id = :i"), {"i": job_id}
            ).scalar()
    except Exception:  # the server is restarting
        return None
    finally:
        db.dispose()
    return None if st is None else str(st)


def _defer_sweep(url: str, home: Path) -> int:
    f = Fleet.open(home=home, url=url, actor="probe-setup")
    try:
        jq = JobQueue(f)
        with f.db.session() as s:
            conn = s.connection().connection.driver_connection
            return int(jq.defer_app.tasks["gpufleet.sweep"].configure(connection=conn).defer(
                timestamp=int(time.time())))
    finally:
        f.db.dispose()


def _left_running(url: str) -> int:
    """A sweep job left ``doing`` by a worker that is gone (its row pruned: no worker id)."""
    db = Database(url)
    try:
        with db.engine.begin() as c:
            return int(c.execute(text(
                "INSERT INTO procrastinate_jobs (queue_name, task_name, args, status) "
                "VALUES ('periodic', 'gpufleet.sweep', '{\"timestamp\": 1}', 'doing') "
                "RETURNING id")).scalar_one())
    finally:
        db.dispose()


def _wait_for(what: str, cond: object, proc: subprocess.Popen[str], log: Path, s: float) -> None:
    assert callable(cond)
    end = time.monotonic() + s
    while not cond():
        code = proc.poll()
        assert code is None, f"the worker exited {code} ({what}): {log.read_text()}"
        assert time.monotonic() < end, f"timed out: {what}: {log.read_text()[-3000:]}"
        time.sleep(0.2)


@pytest.mark.postgres
def test_probe_worker_survives_postgres_restart(cluster: Cluster, tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = base_env(tmp_path / "os-home") | {
        "GPUFLEET_WORKER_HEARTBEAT": "1",
        "GPUFLEET_WORKER_STALLED_AFTER": "5",
        "GPUFLEET_SCHEDULE_SWEEP": "",
        "GPUFLEET_SCHEDULE_SYNC": "",
    }
    args = ["--home", str(home), "--db", cluster.url]
    up = subprocess.run(gpufleet_cmd(args, ["db", "upgrade"]), env=env, capture_output=True,
                        text=True, timeout=180)
    assert up.returncode == 0, up.stderr
    log = tmp_path / "worker.log"
    with log.open("w") as out:
        worker = subprocess.Popen(gpufleet_cmd(args, ["worker"]), env=env, stdout=out,
                                  stderr=subprocess.STDOUT, text=True)
    try:
        first = _defer_sweep(cluster.url, home)
        _wait_for("a job before the restart",
                  lambda: _job_status(cluster.url, first) == "succeeded", worker, log, 60)
        # a restart that takes a few seconds: every connection is cut and refused meanwhile
        cluster.stop()
        noticed = lambda: "reconnecting" in log.read_text()  # noqa: E731
        _wait_for("the worker noticing", noticed, worker, log, 120)
        time.sleep(2)
        cluster.start()
        stuck = _left_running(cluster.url)  # a job a worker that died meanwhile had started
        second = _defer_sweep(cluster.url, home)
        _wait_for("a job after the restart",
                  lambda: _job_status(cluster.url, second) == "succeeded", worker, log, 90)
        _wait_for("the dead worker's job run again",
                  lambda: _job_status(cluster.url, stuck) == "succeeded", worker, log, 60)
        assert worker.poll() is None
        worker.terminate()
        assert worker.wait(60) == 0, log.read_text()
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    text_ = log.read_text()
    assert "worker: the worker stopped on its own" in text_ or "worker: the worker failed" in text_
    assert "worker reconnecting to the job queue in 1 s" in text_
    assert "Connection refused" in text_  # the cause is named, not only "Database error"
