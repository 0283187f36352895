"""Background work as jobs on procrastinate: the tasks, the schedules, and the job queue of one
process (workers, API servers).

On PostgreSQL the queue is procrastinate's tables in the fleet's database (installed by
``gpufleet db upgrade``): any number of ``gpufleet worker`` processes and API servers on any
number of machines share it. Jobs are fetched with ``FOR UPDATE SKIP LOCKED`` (one worker
per job), a periodic job is deferred once per period fleet-wide (procrastinate's
``procrastinate_periodic_defers`` unique key), and every worker retries the running jobs of a
worker whose heartbeat stopped (killed, machine lost) after ``GPUFLEET_WORKER_STALLED_AFTER``.

On the embedded SQLite default the same tasks run in the server process
(``gpufleet serve --with-worker``) on procrastinate's in-memory connector; the runs and their
chunks are in the database, so unfinished chunks are queued again when the server restarts.

Scheduled runs (``GPUFLEET_SCHEDULE_COLLECT``, ``_VALIDATE``, ``_INSPECT``: inspection every N
minutes) start one run per period fleet-wide: the periodic job is deferred once per period
(procrastinate's periodic-defer key) and the run is created once per schedule and period
(``job_runs``' unique index), whatever number of workers deferred it.

Adding background work (campaign steps, ...): write the use case in
its service module, register a task here with :func:`register_task` (a function taking the
:class:`~procrastinate.JobContext` first: :func:`fleet_of` gives the fleet) and, for periodic
work, a :class:`Schedule` with :func:`register_schedule` whose cron comes from a setting.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import os
import signal
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from procrastinate import (
    App,
    BaseRetryStrategy,
    JobContext,
    PsycopgConnector,
    RetryDecision,
    SyncPsycopgConnector,
)
from procrastinate.app import WorkerOptions
from procrastinate.jobs import Job
from procrastinate.testing import InMemoryConnector
from procrastinate.types import JSONDict
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from gpufleet.config import Settings
from gpufleet.domain.runs import RunKind
from gpufleet.errors import GpufleetError, StoreError
from gpufleet.logs import ids
from gpufleet.service.background import jobs
from gpufleet.service.background.sweeper import sweep
from gpufleet.service.campaigns.campaign import run_campaign, show_campaign
from gpufleet.service.core import background_errors as background
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.exports.sync import enabled_targets, sync_round
from gpufleet.store.db import QUEUE_TABLE, UPGRADE_HINT

log = logging.getLogger(__name__)
#: The longest wait between two reconnections of a worker that lost the database.
RECONNECT_MAX_S = 30.0
#: Seconds the worker's procrastinate operations wait for a pooled connection.
POOL_TIMEOUT_S = 10.0

#: Chunks of runs (started from the API or a schedule).
RUNS_QUEUE = "runs"
#: Periodic work (sweeps, syncs, starting scheduled runs).
PERIODIC_QUEUE = "periodic"
QUEUES = (RUNS_QUEUE, PERIODIC_QUEUE)
#: Job statuses counted as queue depth.
DEPTH_STATUSES = ("todo", "doing")

#: Attempts of one chunk job (hosts held elsewhere, a database that is briefly away, a killed
#: worker) before it gives up.
MAX_ATTEMPTS = 30


def worker_label() -> str:
    """``host:pid`` of this process, recorded on the chunks it runs."""
    return f"{socket.gethostname()}:{os.getpid()}"


def fleet_of(context: JobContext) -> Fleet:
    """The fleet of the worker running a job (its additional context)."""
    fleet = context.additional_context["fleet"]
    assert isinstance(fleet, Fleet)
    return fleet


def queue_of(context: JobContext) -> JobQueue:
    q = context.additional_context["queue"]
    assert isinstance(q, JobQueue)
    return q


class ChunkRetry(BaseRetryStrategy):
    """Retry a chunk while its hosts are held elsewhere (1 s, then a second longer each time,
    up to 30 s: about eight minutes in all) or the database is briefly away (doubling, up to
    a minute), up to :data:`MAX_ATTEMPTS`; anything else fails the chunk."""

    def get_retry_decision(self, *, exception: BaseException, job: Job) -> RetryDecision | None:
        if job.attempts >= MAX_ATTEMPTS - 1:
            return None
        if isinstance(exception, jobs.HostsBusy):  # their claims last as long as their work
            return RetryDecision(retry_in={"seconds": min(30, 1 + job.attempts)})
        if isinstance(exception, GpufleetError) and exception.retryable:
            return RetryDecision(retry_in={"seconds": min(60, 2 ** (job.attempts + 1))})
        return None


# --- the tasks -------------------------------------------------------------------------------


def run_chunk_task(context: JobContext, run_id: int, seq: int) -> None:
    """One chunk of a run (:func:`gpufleet.service.background.jobs.run_chunk`)."""
    fleet = fleet_of(context)
    final = context.job.attempts >= MAX_ATTEMPTS - 1
    try:
        jobs.run_chunk(fleet, run_id, seq, worker=worker_label(), final=final)
    except Exception as exc:
        if ChunkRetry().get_retry_decision(exception=exc, job=context.job) is None:
            log.warning("chunk %d of run %s failed: %s", seq, run_id, exc,
                        extra=ids(run=run_id, job=context.job.id))
            jobs.fail_chunk(fleet, run_id, seq, str(exc) or type(exc).__name__)
        raise


def _reported(func: Callable[..., None]) -> Callable[..., None]:
    """A scheduled task whose failure is logged and counted (``scheduler``), then raised for
    procrastinate to record (the job fails; the next period runs again)."""

    @functools.wraps(func)
    def task(context: JobContext, *args: Any, **kwargs: Any) -> None:
        try:
            func(context, *args, **kwargs)
        except Exception as exc:
            background.report(log, background.SCHEDULER, f"task {func.__name__} failed", exc,
                              job=context.job.id)
            raise

    return task


@_reported
def scheduled_run_task(context: JobContext, timestamp: int, kind: str) -> None:
    """Start this period's scheduled run (once per period fleet-wide, see
    :func:`gpufleet.service.background.jobs.start_run`)."""
    fleet = fleet_of(context)
    selector = fleet.settings.schedule_selector or None
    fleet = Fleet(
        db=fleet.db,
        home=fleet.home,
        actor=f"schedule:{kind}",
        clock=fleet.clock,
        settings=fleet.settings,
    )
    run = jobs.start_run(
        fleet, RunKind(kind), selector, queue_of(context), schedule=kind, period=timestamp
    )
    if run is not None:
        log.info("scheduled %s run %s: %s hosts in %s chunk(s)", kind, run.id, run.hosts,
                 run.chunks, extra=ids(run=run.id, job=context.job.id))


@_reported
def sweep_task(context: JobContext, timestamp: int) -> None:
    """Deadlines, validation expiry, reservations and lease expiry
    (:func:`gpufleet.service.background.sweeper.sweep`)."""
    touched = sweep(fleet_of(context))
    if touched:
        log.info("sweep touched %d host(s)", len(touched))


@_reported
def sync_task(context: JobContext, timestamp: int) -> None:
    """One round of the exporter syncs configured in ``GPUFLEET_SYNC_TARGETS``."""
    fleet = fleet_of(context)
    targets = enabled_targets(fleet)
    if targets:
        r = sync_round(fleet, targets)
        if not r.ok:
            background.report(log, background.SCHEDULER, f"sync round had errors: {r}",
                              job=context.job.id)


class CampaignRetry(BaseRetryStrategy):
    """Retry a campaign job whose attempt failed on a passing error (the database away:
    a retryable error, a conflict excepted), doubling the wait up to a minute, 5 attempts.
    A job whose worker died is queued again by the stalled-job recovery, whatever this says."""

    def get_retry_decision(self, *, exception: BaseException, job: Job) -> RetryDecision | None:
        if job.attempts >= 4 or not isinstance(exception, GpufleetError):
            return None
        if not exception.retryable or exception.code == "conflict":
            return None
        return RetryDecision(retry_in={"seconds": min(60, 2 ** (job.attempts + 1))})


def campaign_run_task(context: JobContext, name: str, actor: str) -> None:
    """Run (or resume) campaign ``name`` as ``actor``
    (:func:`gpufleet.service.campaigns.campaign.run_campaign`, what ``campaign run`` calls).

    A later attempt of the same job (its worker died, or the database was away) takes the
    campaign over from the attempt before (the owner names the job) and resumes it the way
    ``campaign resume`` does: finished hosts are not run again, an interrupted host is
    re-checked. It only resumes what it was driving: a campaign paused, halted, finished or
    waiting for approval meanwhile is left as it is."""
    fleet = dataclasses.replace(fleet_of(context), actor=actor)
    job = context.job
    if job.attempts > 0:
        status = show_campaign(fleet, name).status
        if status not in ("running", "planned"):
            log.info("campaign %s: %s; attempt %d of job %s has nothing to do", name, status,
                     job.attempts + 1, job.id, extra=ids(campaign=name, job=job.id))
            return
    where = ids(campaign=name, job=job.id)
    v = run_campaign(fleet, name, lambda m: log.info("campaign %s: %s", name, m, extra=where),
                     job=job.id)
    log.info("campaign %s: %s", name, v.status, extra=where)


@dataclass(frozen=True)
class TaskSpec:
    """A task as registered on every process's queue."""

    name: str
    func: Callable[..., Any]
    queue: str = PERIODIC_QUEUE
    retry: BaseRetryStrategy | bool = False
    queueing_lock: str | None = None


@dataclass(frozen=True)
class Schedule:
    """A periodic job: ``task`` deferred at every tick of ``cron(settings)`` (empty: off),
    with ``kwargs``; ``periodic_id`` names it (one job per id and tick, fleet-wide)."""

    periodic_id: str
    task: str
    cron: Callable[[Settings], str]
    kwargs: Mapping[str, Any] = field(default_factory=dict)


#: Every task, by name (the registration point: :func:`register_task`).
TASKS: dict[str, TaskSpec] = {}
#: Every schedule (:func:`register_schedule`).
SCHEDULES: list[Schedule] = []


def register_task(spec: TaskSpec) -> None:
    """Make ``spec`` known to every queue built from now on (workers and servers)."""
    TASKS[spec.name] = spec


def register_schedule(schedule: Schedule) -> None:
    """Add a periodic job (its task must be registered)."""
    if schedule.task not in TASKS:
        raise ValueError(f"schedule {schedule.periodic_id}: unknown task {schedule.task!r}")
    SCHEDULES.append(schedule)


RUN_CHUNK = "gpufleet.run_chunk"
register_task(TaskSpec(RUN_CHUNK, run_chunk_task, RUNS_QUEUE, ChunkRetry()))
register_task(TaskSpec("gpufleet.scheduled_run", scheduled_run_task))
CAMPAIGN_RUN = "gpufleet.campaign_run"
register_task(TaskSpec(CAMPAIGN_RUN, campaign_run_task, RUNS_QUEUE, CampaignRetry()))
register_task(TaskSpec("gpufleet.sweep", sweep_task, queueing_lock="gpufleet.sweep"))
register_task(TaskSpec("gpufleet.sync", sync_task, queueing_lock="gpufleet.sync"))
register_schedule(Schedule("sweep", "gpufleet.sweep", lambda s: s.schedule_sweep))
register_schedule(
    Schedule("sync", "gpufleet.sync", lambda s: s.schedule_sync if s.sync_targets else "")
)
register_schedule(
    Schedule(
        "collect",
        "gpufleet.scheduled_run",
        lambda s: s.schedule_collect,
        {"kind": RunKind.COLLECT.value},
    )
)
register_schedule(
    Schedule(
        "validate",
        "gpufleet.scheduled_run",
        lambda s: s.schedule_validate,
        {"kind": RunKind.VALIDATE.value},
    )
)
register_schedule(
    Schedule(
        "inspect",
        "gpufleet.scheduled_run",
        lambda s: s.schedule_inspect,
        {"kind": RunKind.INSPECT.value},
    )
)


def build_app(connector: Any, settings: Settings, *, schedules: bool) -> App:
    """A procrastinate app with every registered task (and, for a worker, the schedules)."""
    app = App(connector=connector)
    for spec in TASKS.values():
        app.task(
            name=spec.name,
            queue=spec.queue,
            pass_context=True,
            retry=spec.retry,
            queueing_lock=spec.queueing_lock,
        )(spec.func)
    if schedules:
        for sch in SCHEDULES:
            cron = sch.cron(settings)
            if cron:
                app.periodic_registry.register_task(
                    task=app.tasks[sch.task],
                    cron=cron,
                    periodic_id=sch.periodic_id,
                    configure_kwargs={"task_kwargs": dict(sch.kwargs)},
                )
    return app


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
        """Run a worker in a thread of this process (``serve --with-worker``)."""
        if self._thread is not None:
            return

        def main() -> None:
            async def run() -> None:
                self._main = asyncio.current_task()
                with contextlib.suppress(asyncio.CancelledError):
                    await self.work(concurrency=concurrency, install_signal_handlers=False)

            asyncio.run(run())

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
