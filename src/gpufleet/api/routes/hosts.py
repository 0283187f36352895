"""``/api/v1/hosts``, ``/events``, ``/summary``, ``/labels``, ``/maintenance``, ``/retire``,
``/unquarantine``: hosts and what is done to them by hand."""

from __future__ import annotations

import base64
import binascii
from datetime import timedelta

from fastapi import APIRouter, Depends, Query, Response

from gpufleet.api.deps import as_admin, as_viewer
from gpufleet.api.routes import ERRORS
from gpufleet.api.schemas import EventOut, HostDetailOut, HostOut, HostPage, InTime
from gpufleet.api.schemas_health import RetireIn, UnquarantineIn
from gpufleet.api.schemas_ops import HostOutcomeOut, MaintenanceOffIn, MaintenanceOnIn
from gpufleet.api.schemas_summary import LabelsOut, SummaryOut
from gpufleet.domain.events import EventKind
from gpufleet.errors import ConfigError
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts import operations
from gpufleet.service.views.hosts import list_events, list_hosts, show_host
from gpufleet.service.views.summary import fleet_summary, host_labels

router = APIRouter(tags=["hosts"], responses=ERRORS)

SELECTOR = "NAME-GLOB, group:G, pool:P, state:S, model:M, rack:R; comma = union."


def encode_cursor(name: str) -> str:
    """The opaque cursor after host ``name``."""
    return base64.urlsafe_b64encode(name.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> str:
    """The host name a cursor stands for; ConfigError (422) naming ``cursor`` otherwise."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        name = base64.b64decode(padded, altchars=b"-_", validate=True).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        name = ""
    if not name:
        raise ConfigError(f"cursor '{cursor[:40]}': not a cursor this API returned")
    return name


@router.get("/hosts", summary="List hosts (the CLI's selectors), a page at a time")
def hosts_list(
    selector: str | None = Query(None, description=SELECTOR),
    group: str | None = None,
    model: str | None = Query(None, description="GPU model substring, e.g. H100."),
    state: str | None = None,
    pool: str | None = None,
    limit: int = Query(100, ge=1, le=1000),
    cursor: str | None = Query(None, description="next_cursor of the previous page."),
    fleet: Fleet = Depends(as_viewer),
) -> HostPage:
    after = decode_cursor(cursor) if cursor else None
    rows = list_hosts(
        fleet,
        selector,
        group=group,
        model=model,
        state=state,
        pool=pool,
        after=after,
        limit=limit + 1,
    )
    page = rows[:limit]
    more = len(rows) > limit
    return HostPage(
        items=[HostOut.of(v) for v in page],
        limit=limit,
        next_cursor=encode_cursor(page[-1].name) if more and page else None,
    )


@router.get("/hosts/{name}", summary="One host: facts summary, GPUs, NICs, labels, ...")
def hosts_show(name: str, fleet: Fleet = Depends(as_viewer)) -> HostDetailOut:
    return HostDetailOut.of(show_host(fleet, name))


@router.get("/events", summary="The audit log, newest first", tags=["events"])
def events_list(
    host: str | None = None,
    kind: EventKind | None = Query(None, description="transition, alarm, change-detected ..."),
    since: InTime | None = Query(None, description="At or after this time (UTC unless zoned)."),
    until: InTime | None = Query(None, description="Before this time (UTC unless zoned)."),
    limit: int = Query(50, ge=1, le=1000),
    fleet: Fleet = Depends(as_viewer),
) -> list[EventOut]:
    rows = list_events(fleet, host, kind=kind, limit=limit, since=since, until=until)
    return [EventOut.of(e) for e in rows]


def _wait(seconds: float | None) -> timedelta | None:
    """The Slurm drain's wait for running jobs from a body's seconds (None: the default)."""
    return timedelta(seconds=seconds) if seconds else None


@router.post("/maintenance/on", summary="Put hosts in maintenance", tags=["maintenance"])
def maintenance_on(body: MaintenanceOnIn, fleet: Fleet = Depends(as_admin)) -> list[HostOutcomeOut]:
    outcomes = operations.each_change(
        fleet,
        body.selector,
        lambda n: operations.maintenance_on(
            fleet, n, body.reason, body.until, body.eta, no_drain=body.no_drain,
            drain_timeout=_wait(body.drain_timeout_s),
        ),
        verb="maintenance on",
        reason=body.reason,
        confirm_all=body.confirm_all,
    )
    return [HostOutcomeOut.of(o) for o in outcomes]


@router.post(
    "/maintenance/off", summary="End maintenance (hosts go to validating)", tags=["maintenance"]
)
def maintenance_off(
    body: MaintenanceOffIn, fleet: Fleet = Depends(as_admin)
) -> list[HostOutcomeOut]:
    outcomes = operations.each_change(
        fleet,
        body.selector,
        lambda n: operations.maintenance_off(fleet, n, body.reason),
        verb="maintenance off",
        reason=body.reason,
        confirm_all=body.confirm_all,
    )
    return [HostOutcomeOut.of(o) for o in outcomes]


@router.post("/retire", summary="Retire hosts for good (admin)", tags=["maintenance"])
def retire(body: RetireIn, fleet: Fleet = Depends(as_admin)) -> list[HostOutcomeOut]:
    outcomes = operations.each_change(
        fleet,
        body.selector,
        lambda n: operations.retire(
            fleet, n, body.reason, no_drain=body.no_drain,
            drain_timeout=_wait(body.drain_timeout_s),
        ),
        verb="retire",
        reason=body.reason,
        confirm_all=body.confirm_all,
    )
    return [HostOutcomeOut.of(o) for o in outcomes]


@router.post(
    "/unquarantine",
    summary="Send quarantined hosts back to validating (admin)",
    tags=["maintenance"],
)
def unquarantine(body: UnquarantineIn, fleet: Fleet = Depends(as_admin)) -> list[HostOutcomeOut]:
    outcomes = operations.each_change(
        fleet,
        body.selector,
        lambda n: operations.unquarantine(fleet, n, body.reason, force=body.force),
        verb="unquarantine",
        reason=body.reason,
        confirm_all=body.confirm_all,
    )
    return [HostOutcomeOut.of(o) for o in outcomes]


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
