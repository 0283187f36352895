"""``gpufleet worker``: run background jobs from the shared job queue (PostgreSQL)."""

from __future__ import annotations

import asyncio
import logging

import typer

from gpufleet.cli.common import OPTIONS, boundary, current_settings, err_console, lit, open_fleet
from gpufleet.errors import ConfigError
from gpufleet.logs import configure


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
    from gpufleet.cli.process import sigterm_default

    sigterm_default()  # procrastinate handles SIGTERM: running jobs finish, then exit 0
    asyncio.run(jq.work(concurrency=concurrency, queues=queue or None))
