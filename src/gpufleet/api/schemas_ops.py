"""API shapes of alarms, maintenance, job failures and the health check (the fleet's
operations; split from :mod:`gpufleet.api.schemas`, whose base and time types they use)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from pydantic import Field, field_validator

from gpufleet.api.schemas import ErrorBody, InTime, Mirror, Schema, Time
from gpufleet.errors import GpufleetError

if TYPE_CHECKING:  # the service's read models, checked by mypy; not loaded at run time
    from gpufleet.service.core.alarms import AlarmRecord  # noqa: F401  (Mirror[...])
    from gpufleet.service.hosts.operations import HostOutcome  # noqa: F401  (Mirror[...])

# --- alarms, events, maintenance, failures ------------------------------------------------


class AckIn(Schema):
    reason: str | None = None


class ResolveIn(Schema):
    reason: str = Field(min_length=1, description="Why it is closed by hand (audited).")


class AlarmRecordOut(Mirror["AlarmRecord"]):
    """One alarm with its id (``alarms list/show``)."""

    id: int
    host: str
    kind: str
    severity: str
    opened_at: Time
    message: str
    acknowledged_at: Time | None
    acknowledged_by: str | None
    closed_at: Time | None
    reason: str | None
    data: dict[str, Any]


class HostOutcomeOut(Mirror["HostOutcome"]):
    """One host's result of an action on a selector: its new state, or its error."""

    host: str
    state: str | None
    error: ErrorBody | None

    @field_validator("error", mode="before")
    @classmethod
    def _error(cls, error: object) -> object:
        """The host's error (a ``GpufleetError``) as its one JSON shape."""
        return error.as_json()["error"] if isinstance(error, GpufleetError) else error


class MaintenanceOnIn(Schema):
    selector: str = Field(min_length=1, description="Host name or selector.")
    reason: str = Field(min_length=1)
    until: InTime | None = None
    eta: InTime | None = None
    confirm_all: bool = False
    no_drain: bool = Field(
        False, description="Skip draining first: Slurm jobs, pods (recorded; issue 26)."
    )
    drain_timeout_s: float | None = Field(
        None, gt=0, le=86400, description="Slurm: seconds to wait for running jobs (30 min)."
    )


class MaintenanceOffIn(Schema):
    selector: str = Field(min_length=1)
    reason: str = "maintenance done"
    confirm_all: bool = False


class FailureIn(Schema):
    job: str = Field(min_length=1, max_length=128)
    host: str = Field(min_length=1)
    gpu: str | None = None
    time: datetime
    message: str = Field(min_length=1)


class FailureOut(Schema):
    job: str
    host: str
    gpu: str | None
    at: Time
    category: str
    rule: str | None
    message: str | None = None
    source: str | None = None
    actor: str | None = None


class FailureHostOut(Schema):
    host: str
    failures: int
    jobs: int
    gpus: dict[str, int]
    categories: dict[str, int]
    flagged: bool
    evidence: list[str]
    summary: str


class FailureReportOut(Schema):
    since: Time
    until: Time
    fleet_hosts: int
    rule: dict[str, Any]
    flagged: list[str]
    quarantined: list[str]
    not_quarantined: list[str]
    hosts: list[FailureHostOut]


class Health(Schema):
    status: str
    version: str
