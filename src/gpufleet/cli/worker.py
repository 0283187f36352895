"""``gpufleet worker``: run background jobs from the shared job queue (PostgreSQL)."""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from collections.abc import Coroutine
from types import FrameType
from typing import Any

import typer

from gpufleet.cli.common import OPTIONS, boundary, current_settings, err_console, lit, open_fleet
from gpufleet.errors import ConfigError
from gpufleet.logs import configure
from gpufleet.service.core.engine import engine


@boundary
def worker_cmd(
    concurrency: int | None = typer.Option(
        None,
        "--concurrency",
        min=1,
        max=64,
        help="Jobs run at once (default GPUFLEET_WORKER_CONCURRENCY, 1).",
    ),
    queue: list[str] = typer.Option(
        [],
        "--queue",
        "-q",
        help="Only jobs of this queue: runs (chunks of collect/validate runs) or periodic "
        "(sweeps, syncs, scheduled runs); repeatable. Default: every queue.",
    ),
    verbose: bool = typer.Option(
        False,
        "--verbose",
        "-v",
        help="Also the job queue's own log lines from INFO up (procrastinate: every job).",
    ),
) -> None:
    """Run jobs from the job queue in the fleet's PostgreSQL database until stopped: chunks
    of collect/validate runs (POST /api/v1/runs, the schedules), the deadline and lease
    sweep, the exporter syncs. Start any number, on any machines sharing the database; a
    worker killed mid-job has its jobs retried by another after GPUFLEET_WORKER_STALLED_AFTER
    seconds. SIGTERM / Ctrl-C: running jobs finish, then exit 0. On the embedded SQLite
    database use `gpufleet serve --with-worker` instead."""
    from gpufleet.service.background.job_queue import JobQueue
    from gpufleet.service.background.tasks import QUEUES

    unknown = sorted(set(queue) - set(QUEUES))
    if unknown:
        raise ConfigError(f"--queue {unknown[0]!r}: unknown queue (use {', '.join(QUEUES)})")
    fleet = open_fleet()
    if fleet.db.dialect != "postgresql":
        raise ConfigError(
            f"gpufleet worker needs a shared PostgreSQL database (GPUFLEET_DATABASE_URL); "
            f"{lit(fleet.db.safe_url)} is embedded SQLite: run `gpufleet serve --with-worker`"
        )
    from gpufleet.service.core.webhooks import resume

    resume(fleet, always=True)  # this process sends the outbox as long as it runs
    jq = JobQueue(fleet)
    jq.check_ready()  # the queue's schema is installed (`gpufleet db upgrade`)
    configure(current_settings(), debug=OPTIONS.debug, default=logging.INFO, verbose=verbose)
    err_console.print(
        f"gpufleet worker on {lit(fleet.db.safe_url)} "
        f"(queues: {', '.join(queue) or 'all'}, concurrency "
        f"{concurrency or fleet.settings.worker_concurrency})",
        soft_wrap=True,
    )
    _work_on_the_engine(jq.work(concurrency=concurrency, queues=queue or None,
                                install_signal_handlers=False))


def _work_on_the_engine(work: Coroutine[Any, Any, None]) -> None:
    """Run the worker on the process's engine loop (issue 25, item 3: one loop per process;
    the jobs' runs go to that loop, their blocking work to its threads) until SIGINT or
    SIGTERM, which this entry point owns: the worker stops fetching, its running jobs
    finish, then it returns (exit 0)."""
    eng = engine()
    stopping = threading.Event()
    task: list[asyncio.Task[None]] = []

    async def main() -> None:
        current = asyncio.current_task()
        assert current is not None
        task.append(current)
        if not stopping.is_set():
            await work
        else:
            work.close()

    def stop(_signum: int, _frame: FrameType | None) -> None:
        stopping.set()
        eng.loop.call_soon_threadsafe(lambda: task[0].cancel() if task else None)

    before = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        eng.run(main())
    except asyncio.CancelledError:
        if not stopping.is_set():
            raise
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
