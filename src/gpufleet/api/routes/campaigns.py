"""``/api/v1/campaigns``: change campaigns (issue 14). Reads for any token; run, resume,
pause and abort for operators (they drive a campaign the way ``/runs`` drives collection);
approve for admins (the production go-ahead, recorded with the token's name). Runs are
worker jobs (202, like ``/runs``); the work is in :mod:`gpufleet.service.campaigns.campaign`."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, Depends, Path

from gpufleet.api.deps import as_admin, as_operator, as_viewer
from gpufleet.api.routes import ERRORS
from gpufleet.api.routes.runs import job_queue
from gpufleet.api.schemas_runs import CampaignJobOut, CampaignOut, CampaignRunIn
from gpufleet.service.background.job_queue import JobQueue
from gpufleet.service.campaigns import campaign
from gpufleet.service.core.fleet import Fleet

router = APIRouter(responses=ERRORS, tags=["campaigns"])

Name = Annotated[str, Path(min_length=1, max_length=200)]


@router.get("/campaigns", summary="Every campaign, newest first")
def campaigns_list(fleet: Fleet = Depends(as_viewer)) -> list[CampaignOut]:
    return [CampaignOut.of(v) for v in campaign.list_campaigns(fleet)]


@router.get("/campaigns/{name}", summary="One campaign: waves, every host's step, counts")
def campaigns_show(name: Name, fleet: Fleet = Depends(as_viewer)) -> CampaignOut:
    return CampaignOut.of(campaign.show_campaign(fleet, name))


def _queued(
    name: str, fleet: Fleet, queue: JobQueue, body: CampaignRunIn | None = None
) -> CampaignJobOut:
    secs = body.drain_timeout_s if body is not None else None
    view, job = campaign.enqueue_run(
        fleet, name, queue, no_drain=body.no_drain if body is not None and (
            body.no_drain or secs) else None,
        drain_timeout=timedelta(seconds=secs) if secs else None)
    return CampaignJobOut(campaign=view.name, job=job, status=view.status)


@router.post(
    "/campaigns/{name}/run",
    status_code=202,
    summary="Run a campaign on the workers (poll GET /campaigns/{name})",
)
def campaigns_run(
    name: Name,
    body: CampaignRunIn | None = None,
    fleet: Fleet = Depends(as_operator),
    queue: JobQueue = Depends(job_queue),
) -> CampaignJobOut:
    return _queued(name, fleet, queue, body)


@router.post(
    "/campaigns/{name}/resume",
    status_code=202,
    summary="Resume a paused, approved or interrupted campaign on the workers",
)
def campaigns_resume(
    name: Name,
    body: CampaignRunIn | None = None,
    fleet: Fleet = Depends(as_operator),
    queue: JobQueue = Depends(job_queue),
) -> CampaignJobOut:
    return _queued(name, fleet, queue, body)


@router.post("/campaigns/{name}/approve", summary="Approve the waves after the canary (admin)")
def campaigns_approve(name: Name, fleet: Fleet = Depends(as_admin)) -> CampaignOut:
    return CampaignOut.of(campaign.approve_campaign(fleet, name))


@router.post("/campaigns/{name}/pause", summary="Pause after the wave in progress")
def campaigns_pause(name: Name, fleet: Fleet = Depends(as_operator)) -> CampaignOut:
    return CampaignOut.of(campaign.pause_campaign(fleet, name))


@router.post("/campaigns/{name}/abort", summary="Stop a campaign for good")
def campaigns_abort(name: Name, fleet: Fleet = Depends(as_operator)) -> CampaignOut:
    return CampaignOut.of(campaign.abort_campaign(fleet, name))
