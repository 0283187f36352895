"""``/api/v1/baselines``, ``/pools``, ``/drift``, ``/alarms``, ``/webhooks/dead-letters``,
``/failures``."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query

from gpufleet.api.deps import as_admin, as_operator, as_viewer
from gpufleet.api.routes import ERRORS, RowId
from gpufleet.api.schemas import BaselineOut, DriftOut, InTime, PoolOut
from gpufleet.api.schemas_health import DeadLetterOut
from gpufleet.api.schemas_ops import (
    AckIn,
    AlarmRecordOut,
    FailureIn,
    FailureOut,
    FailureReportOut,
    ResolveIn,
)
from gpufleet.domain.leases import parse_duration
from gpufleet.service.core import alarms, webhooks
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.health import failures
from gpufleet.service.hosts import baselines
from gpufleet.service.views import overview

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


@router.get("/alarms", summary="Alarms (open ones unless all=true), oldest first", tags=["alarms"])
def alarms_list(
    selector: str | None = Query(None, description="Alarms of these hosts."),
    all: bool = Query(False, description="Include closed alarms."),
    fleet: Fleet = Depends(as_viewer),
) -> list[AlarmRecordOut]:
    rows = alarms.list_alarms(fleet, selector, include_closed=all)
    return [AlarmRecordOut.of(a) for a in rows]


@router.get(
    "/webhooks/dead-letters",
    summary="Webhook notifications given up after GPUFLEET_WEBHOOK_MAX_AGE_H, newest first",
    tags=["alarms"],
)
def dead_letters_list(
    limit: int = Query(100, ge=1, le=1000, description="At most this many."),
    fleet: Fleet = Depends(as_viewer),
) -> list[DeadLetterOut]:
    return [DeadLetterOut.of(d) for d in webhooks.dead_letters(fleet, limit)]


@router.get("/alarms/{alarm_id}", summary="One alarm", tags=["alarms"])
def alarms_show(alarm_id: RowId, fleet: Fleet = Depends(as_viewer)) -> AlarmRecordOut:
    return AlarmRecordOut.of(alarms.show_alarm(fleet, alarm_id))


@router.post("/alarms/{alarm_id}/ack", summary="Acknowledge an open alarm", tags=["alarms"])
def alarms_ack(alarm_id: RowId, body: AckIn, fleet: Fleet = Depends(as_operator)) -> AlarmRecordOut:
    return AlarmRecordOut.of(alarms.ack_alarm(fleet, alarm_id, body.reason))


@router.post("/alarms/{alarm_id}/resolve", summary="Close an alarm by hand", tags=["alarms"])
def alarms_resolve(
    alarm_id: RowId, body: ResolveIn, fleet: Fleet = Depends(as_admin)
) -> AlarmRecordOut:
    return AlarmRecordOut.of(alarms.resolve_alarm(fleet, alarm_id, body.reason))


@router.get("/failures", summary="Recorded job failures, newest first", tags=["failures"])
def failures_list(
    host: str | None = None,
    since: InTime | None = None,
    limit: int = Query(500, ge=1, le=5000),
    fleet: Fleet = Depends(as_viewer),
) -> list[FailureOut]:
    rows = overview.list_failures(fleet, host=host, since=since, limit=limit)
    return [
        FailureOut(
            job=f.job,
            host=f.host,
            gpu=f.gpu,
            at=f.at,
            category=f.category,
            rule=f.rule,
            message=f.message,
            source=f.source,
            actor=f.actor,
        )
        for f in rows
    ]


@router.post("/failures", summary="Record one job failure (classified)", tags=["failures"])
def failures_record(body: FailureIn, fleet: Fleet = Depends(as_operator)) -> FailureOut:
    r = failures.record_failure(
        fleet,
        job=body.job,
        host=body.host,
        gpu=body.gpu,
        time=body.time.isoformat(),
        message=body.message,
    )
    return FailureOut(
        job=r.job,
        host=r.host,
        gpu=r.gpu,
        at=r.at,
        category=r.category,
        rule=r.rule,
        message=body.message,
    )


@router.get("/failures/report", summary="Where failures concentrate (read only)", tags=["failures"])
def failures_report(
    since: str = Query("7d", description="Window, e.g. 24h, 7d."),
    fleet: Fleet = Depends(as_viewer),
) -> FailureReportOut:
    rep = failures.failure_report(fleet, parse_duration(since, "since"))
    return FailureReportOut.model_validate(rep.as_json())
