"""``/api/v1/summary`` and ``/api/v1/labels``: ``gpufleet summary`` and ``gpufleet labels``
over HTTP (the CLI's remote mode reads them)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query, Response

from gpufleet.api.deps import as_viewer
from gpufleet.api.routes import ERRORS
from gpufleet.api.routes.hosts import SELECTOR
from gpufleet.api.schemas_summary import LabelsOut, SummaryOut
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.views.summary import fleet_summary, host_labels

router = APIRouter(tags=["hosts"], responses=ERRORS)


@router.get("/summary", summary="Hosts per state, available GPUs per profile/model, drift")
def summary(
    selector: str | None = Query(None, description=SELECTOR),
    fleet: Fleet = Depends(as_viewer),
) -> SummaryOut:
    return SummaryOut.of(fleet_summary(fleet, selector))


@router.get(
    "/labels", summary="Kubernetes labels and taints per host", response_model=list[LabelsOut]
)
def labels(
    selector: str | None = Query(None, description=SELECTOR),
    fleet: Fleet = Depends(as_viewer),
) -> Response:
    # the JSON of list[LabelsOut] written straight from the service's rows (issue 8)
    return Response(LabelsOut.json_of(host_labels(fleet, selector)), media_type="application/json")
