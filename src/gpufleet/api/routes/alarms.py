"""``/api/v1/alarms`` and ``/webhooks/dead-letters``."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query

from gpufleet.api.deps import as_admin, as_operator, as_viewer
from gpufleet.api.routes import ERRORS, RowId
from gpufleet.api.schemas_health import DeadLetterOut
from gpufleet.api.schemas_ops import AckIn, AlarmRecordOut, ResolveIn
from gpufleet.service.core import alarms, webhooks
from gpufleet.service.core.fleet import Fleet

router = APIRouter(responses=ERRORS)


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
