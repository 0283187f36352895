"""Background work as jobs on procrastinate: the tasks and the schedules every process
registers (workers, API servers); the job queue of one process that runs them is
:class:`gpufleet.service.background.job_queue.JobQueue`.

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

import dataclasses
import functools
import logging
import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from procrastinate import App, BaseRetryStrategy, JobContext, RetryDecision
from procrastinate.jobs import Job

from gpufleet.config import Settings
from gpufleet.domain.runs import RunKind
from gpufleet.errors import GpufleetError
from gpufleet.logs import ids
from gpufleet.service.background import jobs
from gpufleet.service.background.sweeper import sweep
from gpufleet.service.campaigns.campaign import run_campaign, show_campaign
from gpufleet.service.core import background_errors as background
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.exports.sync import enabled_targets, sync_round

log = logging.getLogger(__name__)

#: Chunks of runs (started from the API or a schedule).
RUNS_QUEUE = "runs"
#: Periodic work (sweeps, syncs, starting scheduled runs).
PERIODIC_QUEUE = "periodic"
QUEUES = (RUNS_QUEUE, PERIODIC_QUEUE)

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


def queue_of(context: JobContext) -> jobs.Deferrer:
    """Where a job queues further jobs (the worker's
    :class:`~gpufleet.service.background.job_queue.JobQueue`)."""
    q = context.additional_context["queue"]
    assert isinstance(q, jobs.Deferrer)
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
