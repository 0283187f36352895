"""Starting a run: its parameters checked, its hosts selected and split into chunks, one queue
job each (moved out of :mod:`gpufleet.service.background.jobs`, which runs the chunks; see
there)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gpufleet.domain.remediation import Action
from gpufleet.domain.runs import RunKind, RunState, chunked
from gpufleet.domain.states import HostState
from gpufleet.errors import ConfigError, NotFound
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.core.pipeline import check_forks, check_timeout
from gpufleet.service.core.policies import Policies
from gpufleet.service.core.select import select_hosts, selected_names
from gpufleet.service.health.inspect import load_catalogues, load_policy
from gpufleet.service.hosts.evidence import active_test
from gpufleet.service.views.run_views import RunView, show_run
from gpufleet.store.tables import CollectionRun, Host, JobChunk, JobRun


@runtime_checkable
class Deferrer(Protocol):
    """What :func:`start_run` queues chunk jobs on
    (``gpufleet.service.background.job_queue.JobQueue``)."""

    #: The queue lives in the fleet's database: jobs are inserted in the run's transaction
    #: (else they are queued once the run is committed).
    shared: bool

    def check_ready(self) -> None:
        """Raise when this process cannot queue jobs now."""
        ...

    def defer_chunks(self, session: Session | None, chunks: Sequence[tuple[int, int]]) -> list[int]:
        """Queue one job per (run id, chunk), inside ``session``'s transaction when given;
        the job ids."""
        ...



# --- starting a run ------------------------------------------------------------------------


def run_params(kind: RunKind, params: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The checked parameters of a run: an evidence run names its ``test`` (dcgm, nccl,
    gpu-burn) and may give ``level`` (DCGM, 1-4) and ``seconds`` (gpu-burn); a remediate run
    takes ``remediate``'s arguments (:data:`REMEDIATE_PARAMS`, ``action`` required); the
    other kinds take none. :class:`ConfigError` names the field that is wrong."""
    given = {k: v for k, v in (params or {}).items() if v is not None}
    if kind is RunKind.REMEDIATE:
        return _remediation_params(given)
    if kind is not RunKind.EVIDENCE:
        if given:
            raise ConfigError(
                f"a {kind.value} run takes no {', '.join(sorted(given))} (only evidence runs do)"
            )
        return None
    unknown = sorted(set(given) - {"test", "level", "seconds"})
    if unknown:
        raise ConfigError(f"unknown evidence run parameter(s): {', '.join(unknown)}")
    if "test" not in given:
        raise ConfigError("an evidence run needs 'test' (dcgm, nccl or gpu-burn)")
    test = active_test(str(given["test"])).kind
    level, seconds = given.get("level", 1), given.get("seconds", 60)
    if not isinstance(level, int) or isinstance(level, bool) or not 1 <= level <= 4:
        raise ConfigError(f"evidence run 'level' must be 1 to 4, not {level!r}")
    if not isinstance(seconds, int) or isinstance(seconds, bool) or not 1 <= seconds <= 86400:
        raise ConfigError(f"evidence run 'seconds' must be 1 to 86400, not {seconds!r}")
    return {"test": test.value, "level": level, "seconds": seconds}


#: What a remediate run takes (:func:`gpufleet.service.background.remediate_run.
#: start_remediation`: ``remediate``'s arguments).
REMEDIATE_PARAMS = frozenset({
    "action", "service", "gpu", "ticket", "eta", "reason", "override_identity", "no_drain",
    "drain_timeout_s", "timeout_s", "reboot_wait_s",
})


def _remediation_params(given: dict[str, Any]) -> dict[str, Any]:
    if "action" not in given:
        raise ConfigError(
            "a remediate run is started with POST /hosts/{name}/remediate (it needs 'action')"
        )
    unknown = sorted(set(given) - REMEDIATE_PARAMS)
    if unknown:
        raise ConfigError(f"unknown remediate run parameter(s): {', '.join(unknown)}")
    try:
        Action(str(given["action"]))
    except ValueError:
        raise ConfigError(f"unknown remediation action {given['action']!r}") from None
    return given


def start_run(
    fleet: Fleet,
    kind: RunKind,
    selector: str | None,
    queue: Deferrer,
    *,
    schedule: str | None = None,
    period: int | None = None,
    params: Mapping[str, Any] | None = None,
) -> RunView | None:
    """Create a run over the hosts ``selector`` matches now and queue its chunks, in one
    transaction (on PostgreSQL the queue's jobs are inserted in it too).

    An explicit selector matching nothing is :class:`NotFound`; so is a fleet without hosts.
    A scheduled run (``schedule`` and ``period`` given) is started once per period fleet-wide
    (a unique index): a second start for the same period, or one while the schedule's previous
    run is still unfinished, returns None. ``params``: see :func:`run_params`.
    """
    settings = fleet.settings
    checked = run_params(kind, params)
    queue.check_ready()
    if kind is RunKind.EVIDENCE:
        check_timeout(settings.evidence_timeout_s, "GPUFLEET_EVIDENCE_TIMEOUT")
        check_forks(settings.evidence_forks, "GPUFLEET_EVIDENCE_FORKS")
    else:
        check_timeout(settings.collect_timeout_s, "GPUFLEET_COLLECT_TIMEOUT")
        check_forks(settings.forks, "GPUFLEET_FORKS")
    if kind is RunKind.VALIDATE:
        Policies(fleet).load()  # a bad profiles file refuses the run before anything is queued
    if kind is RunKind.INSPECT:
        load_policy(fleet)  # so does a bad health-rules overlay
        load_catalogues(fleet)  # and a bad fault-catalogue overlay
    now = fleet.now()
    try:
        with fleet.db.session() as s:
            selected_names(s, selector)  # an explicit selector matching nothing: NotFound
            ids = list(
                s.scalars(
                    select_hosts(selector)
                    .where(Host.state != HostState.RETIRED)
                    .with_only_columns(Host.id)
                )
            )
            if not ids:
                if schedule is not None:
                    return None
                raise NotFound(
                    f"no hosts to {kind.value}" + (f" in '{selector}'" if selector else "")
                )
            if schedule is not None:
                busy = s.scalar(
                    select(func.count(JobRun.id)).where(
                        JobRun.schedule == schedule,
                        JobRun.state.in_([RunState.QUEUED, RunState.RUNNING]),
                    )
                )
                if busy:
                    return None
            coll_id: int | None = None
            if kind.collects:
                coll = CollectionRun(
                    started_at=now,
                    transport="auto",
                    selector=selector,
                    actor=fleet.actor,
                    counts={},
                )
                s.add(coll)
                s.flush()
                coll_id = coll.id
            parts = chunked(ids, settings.run_chunk)
            run = JobRun(
                kind=kind,
                selector=selector,
                state=RunState.QUEUED,
                actor=fleet.actor,
                schedule=schedule,
                period=period,
                created_at=now,
                collection_run_id=coll_id,
                hosts=len(ids),
                chunks=len(parts),
                params=checked,
            )
            s.add(run)
            s.flush()
            chunks = [
                JobChunk(run_id=run.id, seq=i, hosts=part, state=RunState.QUEUED, result={})
                for i, part in enumerate(parts)
            ]
            s.add_all(chunks)
            s.flush()
            run_id = run.id
            if queue.shared:  # the jobs commit (and become visible) with the run
                job_ids = queue.defer_chunks(s, [(run_id, c.seq) for c in chunks])
                for c, job_id in zip(chunks, job_ids, strict=True):
                    c.job_id = job_id
    except IntegrityError:
        if schedule is not None:  # another server or worker started this period's run
            return None
        raise
    if not queue.shared:  # in-process: queued once the run is visible to the worker
        job_ids = queue.defer_chunks(None, [(run_id, i) for i in range(len(parts))])
        with fleet.db.session() as s:
            for c in s.scalars(select(JobChunk).where(JobChunk.run_id == run_id)):
                c.job_id = job_ids[c.seq]
    return show_run(fleet, run_id)
