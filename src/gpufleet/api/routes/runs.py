"""``/api/v1/runs`` (collect, validate, inspect and evidence runs as background jobs) and
``/api/v1/jobs`` (queue depth)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, FastAPI, Query, Request

from gpufleet.api.deps import as_operator, as_viewer
from gpufleet.api.routes import ERRORS, RowId
from gpufleet.api.schemas_runs import QueueDepthOut, RunHostOut, RunIn, RunOut
from gpufleet.domain.runs import RunState
from gpufleet.service.background import jobs
from gpufleet.service.background.job_queue import JobQueue
from gpufleet.service.core.fleet import Fleet

router = APIRouter(responses=ERRORS)


def job_queue_of(app: FastAPI) -> JobQueue:
    """The server's job queue (the in-process one of ``serve --with-worker``, else the
    fleet's shared queue, built on first use)."""
    q = getattr(app.state, "jobs", None)
    if q is None:
        q = JobQueue(app.state.ctx.fleet)
        app.state.jobs = q
    assert isinstance(q, JobQueue)
    return q


def job_queue(request: Request) -> JobQueue:
    return job_queue_of(request.app)


@router.post(
    "/runs",
    status_code=202,
    summary="Start a collect, validate, inspect or evidence run (workers run it; poll "
    "GET /runs/{id})",
    tags=["runs"],
)
def runs_start(
    body: RunIn,
    fleet: Fleet = Depends(as_operator),
    queue: JobQueue = Depends(job_queue),
) -> RunOut:
    run = jobs.start_run(fleet, body.kind, body.selector, queue, params=body.params())
    assert run is not None  # only a scheduled start returns None
    return RunOut.of(run)


@router.get("/runs", summary="Runs, newest first", tags=["runs"])
def runs_list(
    state: RunState | None = None,
    limit: int = Query(50, ge=1, le=1000),
    fleet: Fleet = Depends(as_viewer),
) -> list[RunOut]:
    return [RunOut.of(r) for r in jobs.list_runs(fleet, limit=limit, state=state)]


@router.get("/runs/{run_id}", summary="One run: progress, outcomes, its chunks", tags=["runs"])
def runs_show(run_id: RowId, fleet: Fleet = Depends(as_viewer)) -> RunOut:
    return RunOut.of(jobs.show_run(fleet, run_id))


@router.get("/runs/{run_id}/hosts", summary="Each host's result in a run", tags=["runs"])
def runs_hosts(run_id: RowId, fleet: Fleet = Depends(as_viewer)) -> list[RunHostOut]:
    return [
        RunHostOut(host=h.host, outcome=h.outcome, detail=h.detail)
        for h in jobs.run_hosts(fleet, run_id)
    ]


@router.get("/jobs", summary="Queue depth: jobs waiting and running per queue", tags=["runs"])
def jobs_depth(
    fleet: Fleet = Depends(as_viewer), queue: JobQueue = Depends(job_queue)
) -> list[QueueDepthOut]:
    return [
        QueueDepthOut(queue=q, status=st, jobs=n) for (q, st), n in sorted(queue.depth().items())
    ]
