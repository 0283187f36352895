"""The job queue of one process (workers, API servers): where runs and campaigns defer their
jobs, the worker that runs the tasks of :mod:`gpufleet.service.background.tasks`, and the
queue's depth (moved out of that module).

On PostgreSQL the queue is procrastinate's tables in the fleet's database (installed by
``gpufleet db upgrade``): any number of ``gpufleet worker`` processes and API servers on any
number of machines share it. Jobs are fetched with ``FOR UPDATE SKIP LOCKED`` (one worker
per job), a periodic job is deferred once per period fleet-wide (procrastinate's
``procrastinate_periodic_defers`` unique key), and every worker retries the running jobs of a
worker whose heartbeat stopped (killed, machine lost) after ``GPUFLEET_WORKER_STALLED_AFTER``.

On the embedded SQLite default the same tasks run in the server process
(``gpufleet serve --with-worker``) on procrastinate's in-memory connector; the runs and their
chunks are in the database, so unfinished chunks are queued again when the server restarts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
import time
from collections import Counter
from collections.abc import Sequence

from procrastinate import App, PsycopgConnector, SyncPsycopgConnector
from procrastinate.app import WorkerOptions
from procrastinate.testing import InMemoryConnector
from procrastinate.types import JSONDict
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from gpufleet.errors import StoreError
from gpufleet.logs import ids
from gpufleet.service.background import jobs
from gpufleet.service.background.tasks import (
    CAMPAIGN_RUN,
    QUEUES,
    RUN_CHUNK,
    build_app,
    worker_label,
)
from gpufleet.service.core import background_errors as background
from gpufleet.service.core.engine import engine
from gpufleet.service.core.fleet import Fleet
from gpufleet.store.db import QUEUE_TABLE, UPGRADE_HINT

log = logging.getLogger(__name__)
#: The longest wait between two reconnections of a worker that lost the database.
RECONNECT_MAX_S = 30.0
#: Seconds the worker's procrastinate operations wait for a pooled connection.
POOL_TIMEOUT_S = 10.0
#: Job statuses counted as queue depth.
DEPTH_STATUSES = ("todo", "doing")


def _chunk_args(chunks: Sequence[tuple[int, int]]) -> list[JSONDict]:
    return [{"run_id": r, "seq": q} for r, q in chunks]


def libpq_url(url: str) -> str:
    """The libpq connection URI of a SQLAlchemy PostgreSQL URL (driver name dropped)."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


# --- the queue of one process ------------------------------------------------------------------


class JobQueue:
    """The job queue as this process sees it: where runs defer their chunks, what a worker
    runs, and its depth.

    PostgreSQL: procrastinate's tables in the fleet database; chunk jobs are inserted in the
    transaction that creates the run. SQLite: an in-memory queue in this process, usable
    only while :meth:`start_in_process` runs a worker here.
    """

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.shared = fleet.db.dialect == "postgresql"
        settings = fleet.settings
        if self.shared:
            conninfo = libpq_url(fleet.db.url)
            # Deferring always runs on the caller's SQLAlchemy connection: never opened.
            self.defer_app = build_app(
                SyncPsycopgConnector(conninfo=conninfo), settings, schedules=False
            )
            self.worker_app = self._shared_worker_app()
        else:
            self.memory = InMemoryConnector()
            self.defer_app = self.worker_app = build_app(self.memory, settings, schedules=True)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._main: asyncio.Task[None] | None = None
        self._started = threading.Event()

    def _shared_worker_app(self) -> App:
        """The worker's app on a connection pool of its own (a new one after a reconnect)."""
        conninfo = libpq_url(self.fleet.db.url)
        # a connection waits POOL_TIMEOUT_S at most: a database gone is noticed (and the worker
        # reconnects) within seconds, not psycopg_pool's 30 s twice over
        connector = PsycopgConnector(
            conninfo=conninfo, min_size=1, max_size=4, timeout=POOL_TIMEOUT_S
        )
        return build_app(connector, self.fleet.settings, schedules=True)

    # -- deferring (jobs.Deferrer) --

    def check_ready(self) -> None:
        """:class:`StoreError` when this process cannot queue jobs: the queue's schema is
        missing (PostgreSQL), or no worker runs in this process (SQLite)."""
        if self.shared:
            if self.fleet.db.status().queue != "present":
                raise StoreError(
                    f"the job queue's schema ({QUEUE_TABLE}) is missing in "
                    f"{self.fleet.db.safe_url}: {UPGRADE_HINT}"
                )
        elif not self.running:
            raise StoreError(
                "runs on the embedded SQLite database run inside the server: start it with "
                "`gpufleet serve --with-worker` (or share PostgreSQL with `gpufleet worker`)"
            )

    def defer_chunks(self, session: Session | None, chunks: Sequence[tuple[int, int]]) -> list[int]:
        """One chunk job per (run id, chunk); on PostgreSQL inside ``session``'s transaction."""
        connection = None
        if self.shared and session is not None:
            connection = session.connection().connection.driver_connection
        deferrer = self.defer_app.tasks[RUN_CHUNK].configure(connection=connection)
        return deferrer.batch_defer(*_chunk_args(chunks))

    def defer_campaign(self, name: str, actor: str) -> int:
        """One job running campaign ``name`` as ``actor`` (``campaign run`` on a worker)."""
        task = self.defer_app.tasks[CAMPAIGN_RUN]
        if not self.shared:
            return task.defer(name=name, actor=actor)
        with self.fleet.db.session() as s:
            connection = s.connection().connection.driver_connection
            return task.configure(connection=connection).defer(name=name, actor=actor)

    def requeue_unfinished(self) -> int:
        """Queue again every unfinished chunk (an in-process queue after a restart)."""
        pending = jobs.unfinished_chunks(self.fleet)
        if pending:
            deferrer = self.defer_app.tasks[RUN_CHUNK].configure()
            deferrer.batch_defer(*_chunk_args(pending))
        return len(pending)

    # -- depth --

    def depth(self) -> dict[tuple[str, str], int]:
        """Jobs waiting and running per queue: {(queue, status): n}, every queue and status
        present (0 when empty)."""
        out = {(q, st): 0 for q in QUEUES for st in DEPTH_STATUSES}
        if self.shared:
            if self.fleet.db.status().queue == "present":
                for key, n in jobs.queue_depth(self.fleet).items():
                    out[key] = out.get(key, 0) + n
        else:
            counts = Counter(
                (str(j["queue_name"]), str(j["status"])) for j in list(self.memory.jobs.values())
            )
            for key, n in counts.items():
                if key[1] in DEPTH_STATUSES:
                    out[key] = out.get(key, 0) + n
        return out

    # -- running a worker --

    @property
    def running(self) -> bool:
        return self._started.is_set()

    async def work(
        self,
        *,
        concurrency: int | None = None,
        queues: Sequence[str] | None = None,
        install_signal_handlers: bool = True,
        wait: bool = True,
    ) -> None:
        """Run a worker until stopped (SIGINT/SIGTERM with ``install_signal_handlers``: the
        running jobs finish first). On PostgreSQL it also retries the jobs of dead workers, and
        a worker that loses the database (a restart: procrastinate's listener fails and stops
        it) reconnects with backoff (1 s doubling up to :data:`RECONNECT_MAX_S`), logged and
        counted, and carries on (issue 24)."""
        loop = asyncio.get_running_loop()
        main = asyncio.current_task()
        stopping = False

        def stop() -> None:
            nonlocal stopping
            stopping = True
            if main is not None:
                main.cancel()

        signals = (signal.SIGINT, signal.SIGTERM) if install_signal_handlers else ()
        for sig in signals:
            loop.add_signal_handler(sig, stop)
        delay = 1.0
        try:
            while True:
                began = time.monotonic()
                try:
                    try:
                        await self._work_once(concurrency, queues, wait)
                    except Exception as exc:
                        if not self.shared:
                            raise
                        background.report(log, background.WORKER, "the worker failed", exc)
                    else:
                        if not (wait and self.shared):
                            return
                        background.report(
                            log,
                            background.WORKER,
                            "the worker stopped on its own (database connection lost)",
                        )
                    if time.monotonic() - began > 60:
                        delay = 1.0
                    log.warning("worker reconnecting to the job queue in %g s", delay)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, RECONNECT_MAX_S)
                except asyncio.CancelledError:
                    if stopping:
                        return
                    raise
        finally:
            for sig in signals:
                loop.remove_signal_handler(sig)

    async def _work_once(
        self, concurrency: int | None, queues: Sequence[str] | None, wait: bool
    ) -> None:
        """One worker on a fresh connection pool, until it stops (or loses the database)."""
        settings = self.fleet.settings
        if self.shared:
            self.worker_app = self._shared_worker_app()
        app = self.worker_app
        async with app.open_async():
            self._loop = asyncio.get_running_loop()
            recover = (
                asyncio.create_task(self._recover_stalled(), name="gpufleet-recover")
                if self.shared
                else None
            )
            if not self.shared:
                n = self.requeue_unfinished()
                if n:
                    log.info("queued %d unfinished chunk(s) again", n)
            self._started.set()
            try:
                options: WorkerOptions = {
                    "concurrency": concurrency or settings.worker_concurrency,
                    "name": worker_label(),
                    "wait": wait,
                    "additional_context": {"fleet": self.fleet, "queue": self},
                    "install_signal_handlers": False,  # ours (work): a stop is not a failure
                    "update_heartbeat_interval": settings.worker_heartbeat_s,
                    "stalled_worker_timeout": settings.worker_stalled_s,
                    "fetch_job_polling_interval": 1.0,
                    "abort_job_polling_interval": 5.0,
                }
                if queues:
                    options["queues"] = list(queues)
                await app.run_worker_async(**options)
            finally:
                self._started.clear()
                if recover is not None:
                    recover.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await recover

    async def _recover_stalled(self) -> None:
        """Every few seconds: jobs still 'doing' on a worker whose heartbeat stopped go back
        to the queue (another worker runs them; the first to retry a job wins)."""
        settings = self.fleet.settings
        manager = self.worker_app.job_manager
        interval = max(1.0, min(settings.worker_stalled_s / 3, 30.0))
        while True:
            await asyncio.sleep(interval)
            try:
                stalled = await manager.get_stalled_jobs(
                    seconds_since_heartbeat=settings.worker_stalled_s
                )
            except Exception as exc:  # the database is away: try again next time
                background.report(log, background.WORKER, "cannot look for stalled jobs", exc)
                continue
            for job in stalled:
                try:
                    await manager.retry_job(job)
                except Exception:  # another worker retried it first
                    continue
                log.warning("job %s (%s) of a dead worker queued again", job.id, job.task_name,
                            extra=ids(job=job.id))

    def start_in_process(self, concurrency: int | None = None) -> None:
        """Run a worker in a thread of this process (``serve --with-worker``), on the
        process's one engine loop (issue 25 item 3) as ``gpufleet worker`` does; the thread
        only waits for it."""
        if self._thread is not None:
            return

        def main() -> None:
            async def run() -> None:
                self._main = asyncio.current_task()
                with contextlib.suppress(asyncio.CancelledError):
                    await self.work(concurrency=concurrency, install_signal_handlers=False)

            engine().run(run())

        self._thread = threading.Thread(target=main, name="gpufleet-worker", daemon=True)
        self._thread.start()
        if not self._started.wait(30):
            raise StoreError("the in-process worker did not start within 30 s")

    def stop_in_process(self, timeout_s: float = 60.0) -> None:
        """Stop the in-process worker (running jobs finish first, up to ``timeout_s``)."""
        thread, loop, main = self._thread, self._loop, self._main
        if thread is None:
            return
        if loop is not None and main is not None:
            loop.call_soon_threadsafe(main.cancel)
        thread.join(timeout_s)
        self._thread = None
