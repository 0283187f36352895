"""Remediation as a run (issue 25 item 2: long work is job-only): ``POST
/hosts/{name}/remediate`` checks the request (:func:`start_remediation`: an unknown host, a
state that refuses it, options of another action... are refused before anything is queued)
and queues a ``remediate`` run of one host, one chunk; a worker runs the remediation
(:func:`run_remediation`: the same steps, drain, audit events and BMC rung as ``gpufleet
remediate``) and the run keeps its report.

Fail closed: a remediation that raised (a drain that blocked, a host held elsewhere, a BMC
gone...) or whose last step did not end ok fails the run with the reason; one that raised is
logged and counted as a failure of the worker (``gpufleet_background_errors_total``). A run
whose worker died during the remediation is not run again (the reboot or power cycle may
have happened): its next attempt fails the run, asking for a look at the host."""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

from gpufleet.domain.remediation import Action
from gpufleet.domain.runs import RunKind
from gpufleet.errors import GpufleetError
from gpufleet.logs import ids
from gpufleet.service.background.run_start import Deferrer, start_run
from gpufleet.service.core import background_errors as background
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.health.remediation import check_remediation, remediate
from gpufleet.service.views.run_views import RunView

log = logging.getLogger(__name__)


def start_remediation(
    fleet: Fleet,
    name: str,
    action: Action,
    queue: Deferrer,
    *,
    gpu: int | None = None,
    ticket: str | None = None,
    eta: datetime | None = None,
    reason: str | None = None,
    service: str | None = None,
    override_identity: str | None = None,
    no_drain: bool = False,
    drain_timeout_s: float | None = None,
    timeout_s: float = 300.0,
    reboot_wait_s: float = 900.0,
) -> RunView:
    """Check a remediation of host ``name`` (:func:`~gpufleet.service.health.remediation.
    check_remediation`, the errors ``gpufleet remediate`` raises) and queue it as a run;
    the arguments are :func:`~gpufleet.service.health.remediation.remediate`'s."""
    check_remediation(fleet, name, action, gpu=gpu, ticket=ticket, eta=eta, service=service,
                      override_identity=override_identity)
    params = {
        "action": action.value,
        "service": service,
        "gpu": gpu,
        "ticket": ticket,
        "eta": eta.isoformat() if eta else None,
        "reason": reason,
        "override_identity": override_identity,
        "no_drain": no_drain or None,
        "drain_timeout_s": drain_timeout_s,
        "timeout_s": timeout_s,
        "reboot_wait_s": reboot_wait_s,
    }
    run = start_run(fleet, RunKind.REMEDIATE, name, queue, params=params)
    assert run is not None  # only a scheduled start returns None
    return run


@dataclass(frozen=True)
class RemediationOutcome:
    """What one remediation run did to its host."""

    #: The host's outcome in the run: ok, failed or refused (the last step's), error (raised).
    outcome: str
    #: Each step as ``action outcome: detail``, or the error.
    detail: str
    #: The report (``gpufleet remediate --json``'s shape), or the error that stopped it
    #: (``{"error": {code, message, retryable}}``, the one error shape).
    report: dict[str, Any]
    #: Why the run failed; None: the remediation ended ok.
    error: str | None


def _failed(name: str, exc: BaseException, run_id: int) -> RemediationOutcome:
    background.report(log, background.WORKER, f"remediation of {name} failed", exc,
                      run=run_id, host=name)
    if isinstance(exc, GpufleetError):
        shape = exc.as_json()
    else:
        shape = GpufleetError(f"{type(exc).__name__}: {exc}").as_json()
    message = str(shape["error"]["message"])
    return RemediationOutcome("error", message, shape, message)


def run_remediation(
    fleet: Fleet, name: str, params: dict[str, Any], *, attempt: int, run_id: int
) -> RemediationOutcome:
    """Run the remediation a run's ``params`` describe on host ``name`` (the worker's side of
    :func:`start_remediation`); never raises. ``attempt`` 2 or more: an earlier attempt's
    worker died during it, so nothing runs (fail closed)."""
    if attempt > 1:
        return _failed(name, GpufleetError(
            f"host {name}: the worker running this remediation stopped before it finished "
            "(it may have partly run): check the host (gpufleet hosts show) and remediate "
            "again"), run_id)
    eta, wait = params.get("eta"), params.get("drain_timeout_s")
    try:
        rep = remediate(
            fleet,
            name,
            Action(str(params["action"])),
            gpu=params.get("gpu"),
            ticket=params.get("ticket"),
            eta=datetime.fromisoformat(str(eta)) if eta else None,
            reason=params.get("reason"),
            service=params.get("service"),
            override_identity=params.get("override_identity"),
            no_drain=bool(params.get("no_drain")),
            drain_timeout=timedelta(seconds=float(wait)) if wait else None,
            timeout_s=float(params.get("timeout_s") or 300.0),
            reboot_wait_s=float(params.get("reboot_wait_s") or 900.0),
        )
    except Exception as exc:  # fail closed: the run fails with the error, logged and counted
        return _failed(name, exc, run_id)
    detail = "; ".join(f"{st.action} {st.outcome}: {st.detail}" for st in rep.steps)
    if rep.ok:
        return RemediationOutcome("ok", detail, asdict(rep), None)
    last = rep.steps[-1] if rep.steps else None
    why = f"{name}: " + (f"{last.action} {last.outcome}: {last.detail}" if last else "nothing ran")
    log.warning("remediation of %s did not end ok: %s", name, why, extra=ids(run=run_id, host=name))
    return RemediationOutcome(last.outcome if last else "failed", detail, asdict(rep), why)
