"""``/api/v1/summary`` and ``/api/v1/labels``: ``gpufleet summary`` and ``gpufleet labels``
over HTTP (the CLI's remote mode reads them)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query

from gpufleet.api.deps import as_viewer
from gpufleet.api.routes import ERRORS
from gpufleet.api.routes.hosts import SELECTOR
from gpufleet.api.schemas_summary import LabelsOut, SummaryOut
from gpufleet.service.fleet import Fleet
from gpufleet.service.summary import fleet_summary, host_labels

router = APIRouter(tags=["hosts"], responses=ERRORS)


@router.get("/summary", summary="Hosts per state, available GPUs per profile/model, drift")
def summary(
    selector: str | None = Query(None, description=SELECTOR),
    fleet: Fleet = Depends(as_viewer),
) -> SummaryOut:
    return SummaryOut.of(fleet_summary(fleet, selector))


@router.get("/labels", summary="Kubernetes labels and taints per host")
def labels(
    selector: str | None = Query(None, description=SELECTOR),
    fleet: Fleet = Depends(as_viewer),
) -> list[LabelsOut]:
    return [LabelsOut.of(r) for r in host_labels(fleet, selector)]
