"""The job queue's worker on the process's engine loop (issue 25, item 3): one event loop per
process runs the worker, its jobs' pipeline runs and what they keep open; the jobs' database
work never runs on that loop. On PostgreSQL (``gpufleet worker`` needs it; SQLite's
in-process worker is ``serve --with-worker``'s): in-process, and ``gpufleet worker`` itself,
which runs a queued collect run and stops cleanly on SIGTERM (exit 0)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from gpufleet.domain.runs import RunKind, RunState
from gpufleet.lab.demo import enroll_lab
from gpufleet.service.background import jobs
from gpufleet.service.background.job_queue import JobQueue
from gpufleet.service.core.engine import engine
from gpufleet.service.core.fleet import Fleet, utcnow

GPUFLEET = str(Path(sys.executable).with_name("gpufleet"))


def _on_a_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


@pytest.mark.parametrize("fleet", ["postgres"], indirect=True)
def test_the_worker_runs_its_jobs_on_the_engine_loop(fleet: Fleet, tmp_path: Path) -> None:
    enroll_lab(fleet, tmp_path / "lab", 5, models=["a100-8x"], faults={})
    fleet.settings.run_chunk = 2
    fleet.clock = utcnow
    fleet.db.migrate(queue=True)  # the job queue's schema (`gpufleet db upgrade`)
    jq = JobQueue(fleet)
    run = jobs.start_run(fleet, RunKind.COLLECT, None, jq)
    assert run is not None and run.chunks == 3
    loops: list[asyncio.AbstractEventLoop | None] = []

    def statement(*_args: Any) -> None:
        loops.append(_on_a_loop())

    event.listen(fleet.db.engine, "before_cursor_execute", statement)
    try:  # as `gpufleet worker` runs it: on the engine, until the queue is empty
        engine().run(jq.work(install_signal_handlers=False, wait=False))
    finally:
        event.remove(fleet.db.engine, "before_cursor_execute", statement)
    done = jobs.show_run(fleet, run.id)
    assert done.state is RunState.SUCCEEDED, done
    assert jq._loop is engine().loop  # the worker ran on the process's one loop
    assert loops and not any(loops), "a job's database statement ran on an event loop"


@pytest.mark.parametrize("fleet", ["postgres"], indirect=True)
def test_gpufleet_worker_runs_a_run_and_stops_on_sigterm(
    fleet: Fleet, tmp_path: Path, pg_database_url: str
) -> None:
    enroll_lab(fleet, tmp_path / "lab", 3, models=["a100-8x"], faults={})
    fleet.clock = utcnow
    fleet.db.migrate(queue=True)
    run = jobs.start_run(fleet, RunKind.COLLECT, None, JobQueue(fleet))
    assert run is not None
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    proc = subprocess.Popen(
        [GPUFLEET, "--home", str(tmp_path / "home"), "--db", pg_database_url, "worker"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.extend(proc.stdout or []), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 90
        while jobs.show_run(fleet, run.id).state is not RunState.SUCCEEDED:
            assert proc.poll() is None, "".join(out)
            assert time.monotonic() < deadline, jobs.show_run(fleet, run.id)
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
    reader.join(5)
    assert rc == 0, "".join(out)
