"""``/api/v1/leases``, ``/allocate``, ``/capacity``."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query

from gpufleet.api.deps import as_operator, as_viewer
from gpufleet.api.routes import ERRORS, RowId
from gpufleet.api.schemas import (
    AllocateIn,
    AllocationOut,
    CapacityCheckOut,
    CapacityOut,
    InTime,
    LeaseOut,
    RefusalOut,
    ReleasedOut,
    ReleaseIn,
    RenewIn,
)
from gpufleet.domain.leases import parse_duration, parse_gpu_memory, parse_percent
from gpufleet.domain.placement import Request
from gpufleet.service.allocation import allocation, capacity, leases
from gpufleet.service.core.fleet import Fleet

router = APIRouter(tags=["leases"], responses=ERRORS)


@router.get("/leases", summary="Leases and reservations (holding ones unless all=true)")
def leases_list(
    selector: str | None = Query(None, description="Leases holding these hosts."),
    owner: str | None = None,
    all: bool = Query(False, description="Include released and cancelled leases."),
    fleet: Fleet = Depends(as_viewer),
) -> list[LeaseOut]:
    rows = leases.list_leases(fleet, selector, owner=owner, include_ended=all)
    return [LeaseOut.of(v) for v in rows]


@router.get("/leases/expiring", summary="Active leases expiring within a window (or expired)")
def leases_expiring(
    selector: str | None = Query(None, description="Leases holding these hosts."),
    within: str = Query("24h", description="Window from now, e.g. 24h."),
    fleet: Fleet = Depends(as_viewer),
) -> list[LeaseOut]:
    rows = leases.expiring(fleet, parse_duration(within, "within"), selector)
    return [LeaseOut.of(v) for v in rows]


@router.get("/leases/{lease_id}", summary="One lease with its hosts and GPU UUIDs")
def leases_show(lease_id: RowId, fleet: Fleet = Depends(as_viewer)) -> LeaseOut:
    return LeaseOut.of(leases.show_lease(fleet, lease_id))


@router.post("/leases", summary="Allocate (or reserve from start) whole hosts")
def leases_allocate(body: AllocateIn, fleet: Fleet = Depends(as_operator)) -> AllocationOut:
    req = Request(
        gpus=body.gpus,
        hosts=body.hosts,
        model=body.model,
        min_gpu_memory_mib=parse_gpu_memory(body.min_gpu_memory) if body.min_gpu_memory else None,
        fabric=body.fabric,
        profile=body.profile,
        cuda=body.cuda,
        nvl_domain=body.nvl_domain,
    )
    got = allocation.allocate(
        fleet,
        req,
        owner=body.owner,
        purpose=body.purpose,
        duration=parse_duration(body.duration, "for") if body.duration else None,
        until=body.until,
        start=body.start,
        selector=body.selector,
        users=body.users,
        account=body.account,
    )
    r = got.refusal
    return AllocationOut(
        granted=got.lease is not None,
        lease=LeaseOut.of(got.lease) if got.lease is not None else None,
        refusal=None
        if r is None or got.lease is not None
        else RefusalOut(
            reason=r.message,
            counts=dict(r.counts),
            held=[dict(h) for h in r.held],
            missing_gpus=r.missing_gpus,
        ),
        warnings=list(got.warnings),
    )


@router.post(
    "/leases/{lease_id}/renew",
    summary="Extend a lease (for: from its current end) or set its end (until; shorten)",
)
def leases_renew(lease_id: RowId, body: RenewIn, fleet: Fleet = Depends(as_operator)) -> LeaseOut:
    v = leases.renew(
        fleet,
        lease_id,
        duration=parse_duration(body.duration, "for") if body.duration else None,
        until=body.until,
        owner=body.owner,
        shorten=body.shorten,
    )
    return LeaseOut.of(v)


@router.post("/leases/{lease_id}/release", summary="End a lease (hosts go to reclaiming)")
def leases_release(
    lease_id: RowId, body: ReleaseIn, fleet: Fleet = Depends(as_operator)
) -> ReleasedOut:
    out = leases.release(fleet, lease_id, body.reason, owner=body.owner)
    return ReleasedOut(
        lease=LeaseOut.of(out.lease),
        reclaiming=list(out.reclaiming),
        reclaim=str(out.reclaim) if out.reclaim is not None else None,
        note=out.note,
        warnings=list(out.warnings),
    )


@router.get(
    "/capacity",
    summary="GPUs free / allocated / reserved / ... by model, pool, profile",
    tags=["capacity"],
)
def capacity_report(
    selector: str | None = None,
    at: InTime | None = Query(None, description="What will be free at this time."),
    fleet: Fleet = Depends(as_viewer),
) -> CapacityOut:
    rep = capacity.capacity(fleet, selector, at)
    return CapacityOut.model_validate(
        {"at": rep.at, "rows": rep.rows, "totals": rep.totals, "back": rep.back,
         "domains": rep.domains, "largest_domain_block": rep.largest_domain_block}
    )


@router.get(
    "/capacity/check", summary="CI gate: are enough GPUs allocatable now?", tags=["capacity"]
)
def capacity_check(
    gpus: int = Query(..., ge=1),
    model: str | None = None,
    profile: str | None = None,
    headroom: str = Query("0%", description="Extra on top, e.g. 10%."),
    selector: str | None = None,
    cuda: str | None = Query(None, description="CUDA MAJOR.MINOR the workload needs."),
    fleet: Fleet = Depends(as_viewer),
) -> CapacityCheckOut:
    r = capacity.check(
        fleet,
        gpus=gpus,
        model=model,
        profile=profile,
        headroom=parse_percent(headroom),
        selector=selector,
        cuda=cuda,
    )
    return CapacityCheckOut.of(r)
