"""``/api/v1/racks``: the same read model as ``gpufleet racks list/show`` (issue 27)."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from gpufleet.api.deps import as_viewer
from gpufleet.api.routes import ERRORS
from gpufleet.api.schemas_racks import RackOut
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.views.racks import list_racks, show_rack

router = APIRouter(tags=["racks"], responses=ERRORS)


@router.get("/racks", summary="Racks and NVLink domains derived from facts")
def racks_list(fleet: Fleet = Depends(as_viewer)) -> list[RackOut]:
    return [RackOut.of(r, trays=False) for r in list_racks(fleet)]


@router.get("/racks/{rack}", summary="One rack's trays in slot order")
def racks_show(rack: str, fleet: Fleet = Depends(as_viewer)) -> RackOut:
    return RackOut.of(show_rack(fleet, rack), trays=True)
