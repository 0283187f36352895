"""``/api/v1/baselines``, ``/pools``, ``/drift``: baselines and the pools that use them."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from gpufleet.api.deps import as_admin, as_viewer
from gpufleet.api.routes import ERRORS
from gpufleet.api.schemas import BaselineOut, DriftOut, PoolOut
from gpufleet.api.schemas_health import BaselineFromHostIn, PoolBaselineIn
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts import baselines

router = APIRouter(responses=ERRORS)


@router.get("/baselines", summary="Baselines and the pools that point at each", tags=["baselines"])
def baselines_list(fleet: Fleet = Depends(as_viewer)) -> list[BaselineOut]:
    return [BaselineOut.of(b, pools) for b, pools in baselines.list_baselines(fleet)]


@router.get("/baselines/{name}", summary="One baseline", tags=["baselines"])
def baselines_show(name: str, fleet: Fleet = Depends(as_viewer)) -> BaselineOut:
    b = baselines.get_baseline(fleet, name)
    pools = next((p for x, p in baselines.list_baselines(fleet) if x.name == b.name), [])
    return BaselineOut.of(b, pools)


@router.get("/pools", summary="Pools with their baseline and size", tags=["baselines"])
def pools_list(fleet: Fleet = Depends(as_viewer)) -> list[PoolOut]:
    return [
        PoolOut(name=p.name, baseline=p.baseline, hosts=p.hosts)
        for p in baselines.list_pools(fleet)
    ]


@router.get("/drift", summary="Hosts compared with their pool's baseline", tags=["baselines"])
def drift_report(selector: str | None = None, fleet: Fleet = Depends(as_viewer)) -> DriftOut:
    return DriftOut.of(baselines.drift(fleet, selector))


@router.post(
    "/baselines",
    summary="Save a baseline from a known-good host's latest facts (admin)",
    tags=["baselines"],
)
def baselines_create(body: BaselineFromHostIn, fleet: Fleet = Depends(as_admin)) -> BaselineOut:
    baselines.check_pools(fleet, body.pools, create=body.create)  # a typo creates nothing
    b = baselines.baseline_from_host(fleet, body.host, body.name, body.purpose)
    saved = baselines.save_baseline(fleet, b, replace=body.replace)
    for p in body.pools:
        baselines.set_pool_baseline(fleet, p, saved.name, create=body.create)
    return BaselineOut.of(saved, list(body.pools))


@router.put("/pools/{name}", summary="Point a pool at a baseline (admin)", tags=["baselines"])
def pools_set(name: str, body: PoolBaselineIn, fleet: Fleet = Depends(as_admin)) -> PoolOut:
    baselines.set_pool_baseline(fleet, name, body.baseline, create=body.create)
    p = next((x for x in baselines.list_pools(fleet) if x.name == name), None)
    if p is None:  # a pool created here that no host names yet
        return PoolOut(name=name, baseline=body.baseline, hosts=0)
    return PoolOut(name=p.name, baseline=p.baseline, hosts=p.hosts)
