"""``/api/v1/inspect``, ``/evidence``, ``/hosts/{name}/remediate``, ``/parts``, ``/bmc``,
``/failures``: thin routers over the same service functions as ``gpufleet inspect``,
``evidence``, ``remediate``, ``parts``, ``bmc`` and ``failures``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, Query

from gpufleet.api.deps import as_admin, as_operator, as_viewer
from gpufleet.api.routes import ERRORS
from gpufleet.api.routes.runs import job_queue
from gpufleet.api.schemas import InTime
from gpufleet.api.schemas_health import (
    BmcActionOut,
    BmcStatusOut,
    EvidenceRunIn,
    FailureImportIn,
    FailureImportOut,
    InspectIn,
    InspectReportOut,
    PartHistoryOut,
    PartOut,
    PowerIn,
    ReasonIn,
    RemediateIn,
    SelAckOut,
)
from gpufleet.api.schemas_ops import FailureIn, FailureOut, FailureReportOut
from gpufleet.api.schemas_runs import RunOut
from gpufleet.domain.bmc import PowerAction
from gpufleet.domain.leases import parse_duration
from gpufleet.domain.remediation import Action
from gpufleet.domain.runs import RunKind
from gpufleet.service.background import jobs
from gpufleet.service.background.job_queue import JobQueue
from gpufleet.service.background.remediate_run import start_remediation
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.health import failures, parts
from gpufleet.service.health.inspect_report import build_report, parse_since
from gpufleet.service.hosts import bmc
from gpufleet.service.views import overview
from gpufleet.service.views.run_views import RunView

router = APIRouter(responses=ERRORS)


@router.post(
    "/inspect",
    status_code=202,
    summary="Queue one inspection sweep of the selected hosts (a run: poll GET /runs/{id})",
    tags=["inspect"],
)
def inspect_now(
    body: InspectIn, fleet: Fleet = Depends(as_operator), queue: JobQueue = Depends(job_queue)
) -> RunOut:
    return RunOut.of(start_run(fleet, RunKind.INSPECT, body.selector, queue))


@router.get(
    "/inspect/report",
    summary="What the inspections saw over a period (read only)",
    tags=["inspect"],
)
def inspect_report(
    selector: str | None = Query(None, description="Hosts (the CLI's selectors)."),
    since: str = Query("24h", max_length=32, description="Period: 30m, 24h, 7d."),
    fleet: Fleet = Depends(as_viewer),
) -> InspectReportOut:
    return InspectReportOut.of(build_report(fleet, selector, parse_since(since)))


@router.post(
    "/evidence",
    status_code=202,
    summary="Queue an active test (dcgm, nccl, gpu-burn) of the selected hosts (a run: poll "
    "GET /runs/{id}, each host's result at GET /runs/{id}/hosts)",
    tags=["evidence"],
)
def evidence_run(
    body: EvidenceRunIn, fleet: Fleet = Depends(as_operator), queue: JobQueue = Depends(job_queue)
) -> RunOut:
    params = {"test": body.kind, "level": body.level, "seconds": body.seconds}
    return RunOut.of(start_run(fleet, RunKind.EVIDENCE, body.selector, queue, params=params))


def start_run(
    fleet: Fleet, kind: RunKind, selector: str | None, queue: JobQueue,
    params: Mapping[str, Any] | None = None,
) -> RunView:
    """Long work is a run on the workers (issue 25 item 2), never the request's."""
    run = jobs.start_run(fleet, kind, selector, queue, params=params)
    assert run is not None  # only a scheduled start returns None
    return run


@router.post(
    "/hosts/{name}/remediate",
    status_code=202,
    summary="Queue one rung of the remediation ladder on a host (admin; a run: poll "
    "GET /runs/{id}, its report in `remediation` once finished)",
    tags=["remediation"],
)
def hosts_remediate(
    name: str,
    body: RemediateIn,
    fleet: Fleet = Depends(as_admin),
    queue: JobQueue = Depends(job_queue),
) -> RunOut:
    """A request that cannot run (unknown host, a state that refuses it, options of another
    action) is refused here, before anything is queued (issue 25 item 2)."""
    run = start_remediation(
        fleet,
        name,
        Action(body.action),
        queue,
        gpu=body.gpu,
        ticket=body.ticket,
        eta=body.eta,
        reason=body.reason,
        service=body.service,
        override_identity=body.reason if body.override_identity else None,
        no_drain=body.no_drain,
        drain_timeout_s=body.drain_timeout_s,
    )
    return RunOut.of(run)


@router.get("/parts", summary="Every GPU serial seen, where it is now", tags=["parts"])
def parts_list(
    history: bool = Query(False, description="Only serials with recorded events."),
    fleet: Fleet = Depends(as_viewer),
) -> list[PartOut]:
    return [PartOut.of(r) for r in parts.list_parts(fleet, with_history=history)]


@router.get("/parts/{serial}", summary="One GPU's hosts and events", tags=["parts"])
def parts_show(serial: str, fleet: Fleet = Depends(as_viewer)) -> PartHistoryOut:
    return PartHistoryOut.of(parts.show_part(fleet, serial))


@router.get("/bmc", summary="Read the selected hosts' BMCs (Redfish) now", tags=["bmc"])
def bmc_status(
    selector: str | None = Query(None, description="Hosts (the CLI's selectors)."),
    timeout_s: float = Query(10.0, gt=0, le=300),
    deadline_s: float | None = Query(
        None, gt=0, le=600, description="Seconds one BMC's whole read may take "
        "(default GPUFLEET_BMC_DEADLINE); a BMC past it is reported timed out."),
    fleet: Fleet = Depends(as_viewer),
) -> list[BmcStatusOut]:
    got = bmc.bmc_status(fleet, selector, timeout_s=timeout_s, deadline_s=deadline_s)
    return [BmcStatusOut.of(b) for b in got]


@router.post(
    "/hosts/{name}/power",
    summary="Power a host on/off/cycle/reset through its BMC (admin)",
    tags=["bmc"],
)
def hosts_power(name: str, body: PowerIn, fleet: Fleet = Depends(as_admin)) -> BmcActionOut:
    a = bmc.power(fleet, name, PowerAction(body.action), force=body.force,
                  override_identity=body.override_identity_reason)
    return BmcActionOut(
        host=a.host,
        action=a.action,
        ok=a.ok,
        power_state=a.power_state,
        reason=a.reason,
        notes=list(a.notes),
        state=a.state,
    )


@router.post(
    "/failures/import",
    summary="Record many job failures (JSON lines or CSV); bad lines reported, not fatal",
    tags=["failures"],
)
def failures_import(body: FailureImportIn, fleet: Fleet = Depends(as_operator)) -> FailureImportOut:
    fmt = body.format or ("jsonl" if body.text.lstrip().startswith("{") else "csv")
    rep = failures.import_failures_text(fleet, Path(f"request.{fmt}"), body.text)
    errors = [e.removeprefix("request.jsonl:").removeprefix("request.csv:") for e in rep.errors]
    return FailureImportOut(recorded=rep.recorded, errors=[f"line {e}" for e in errors])


@router.post(
    "/hosts/{name}/bmc/sel-ack",
    summary="Acknowledge a host's BMC event-log fault (closes its bmc-sel alarms)",
    tags=["bmc"],
)
def bmc_sel_ack(name: str, body: ReasonIn, fleet: Fleet = Depends(as_operator)) -> SelAckOut:
    return SelAckOut(host=name, closed=bmc.sel_ack(fleet, name, body.reason))


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
