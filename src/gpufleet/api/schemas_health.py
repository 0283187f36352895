"""API shapes for inspection, remediation, parts, BMC and bulk failure import (issue 12).

Kept apart from :mod:`gpufleet.api.schemas` (already long); same conventions: a shape that is
a read model field by field is a ``Mirror`` of it, others are mapped by hand (``of``); times
ISO 8601 with the zone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BeforeValidator, Field, field_validator

from gpufleet.api.schemas import Mirror, Schema, Time

if TYPE_CHECKING:  # the service's read models, checked by mypy; not loaded at run time
    # (those a Mirror["..."] names are used where ruff does not look: noqa F401)
    from gpufleet.domain.rules import Finding  # noqa: F401
    from gpufleet.service.core.webhooks import DeadLetter  # noqa: F401
    from gpufleet.service.health.inspect import SweepReport  # noqa: F401
    from gpufleet.service.health.inspect_act import HostInspection  # noqa: F401
    from gpufleet.service.health.inspect_report import (  # noqa: F401
        HostRow,
        InspectReport,
        ModelRow,
    )
    from gpufleet.service.health.parts import PartHistory  # noqa: F401
    from gpufleet.service.health.remediation import RemediationReport  # noqa: F401
    from gpufleet.service.health.remediation_steps import Step  # noqa: F401
    from gpufleet.service.hosts.bmc import BmcStatus  # noqa: F401


def _jsonable(value: Any) -> Any:
    """Dict values made JSON-safe (times as ISO 8601 text); keys as text."""
    from datetime import datetime

    from gpufleet.api.schemas import _iso

    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, datetime):
        return _iso(value)
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


#: A JSON object of the read model (times as ISO 8601 text, keys as text).
JsonObject = Annotated[dict[str, Any], BeforeValidator(_jsonable)]


class InspectIn(Schema):
    selector: str | None = Field(None, description="Hosts to inspect (the CLI's selectors).")


class FindingOut(Mirror["Finding"]):
    rule: str
    severity: str
    action: str
    message: str
    gpu_index: int | None = None
    gpu_uuid: str | None = None
    subject: str | None = None


class HostInspectionOut(Mirror["HostInspection"]):
    host: str
    outcome: str
    reason: str
    findings: list[FindingOut]
    actions: list[str]
    problems: list[str]


class SweepOut(Mirror["SweepReport"]):
    at: Time
    policy_version: str
    hosts: list[HostInspectionOut]
    busy: list[str]
    guard_tripped: bool
    guard_message: str
    incidents: list[dict[str, Any]] = Field(default_factory=list)


class RemediateIn(Schema):
    action: Literal["restart-service", "reset-gpu", "reboot", "power-cycle", "service-request"]
    service: str | None = Field(None, max_length=64, description="restart-service: which.")
    override_identity: bool = Field(
        False, description="Power-cycle even while the BMC's identity alarm is open (reason)."
    )
    gpu: int | None = Field(None, ge=0, le=63, description="One GPU (reset-gpu); all if absent.")
    ticket: str | None = Field(None, max_length=128, description="Vendor ticket (service-request).")
    eta: Time | None = Field(None, description="When the host is expected back (service-request).")
    reason: str | None = Field(None, max_length=512)
    no_drain: bool = Field(
        False, description="Act without draining first: Slurm jobs, pods (recorded; issue 26)."
    )
    drain_timeout_s: float | None = Field(
        None, gt=0, le=86400, description="Slurm: seconds to wait for running jobs (30 min)."
    )


class StepOut(Mirror["Step"]):
    action: str
    outcome: str
    detail: str
    gpus: list[int]
    bug_report: str | None = None


class RemediationOut(Mirror["RemediationReport"]):
    host: str
    action: str
    ok: bool
    steps: list[StepOut]
    state: str
    warnings: list[str]


class PartOut(Schema):
    """One GPU serial: where it is now and how much history it has (``parts list``)."""

    serial: str
    host: str | None = Field(description="Where it was seen last.")
    index: int | None = Field(description="Its GPU index there.")
    hosts: int = Field(description="How many hosts it has been in.")
    events: int = Field(description="Recorded part events.")

    @classmethod
    def of(cls, row: dict[str, Any]) -> PartOut:
        return cls(
            serial=str(row["serial"]),
            host=row["host"],
            index=row["index"],
            hosts=int(row["hosts"]),
            events=int(row["events"]),
        )


class PartHistoryOut(Mirror["PartHistory"]):
    serial: str
    model: str | None
    hosts: list[str]
    locations: list[JsonObject]
    events: list[JsonObject]


class BmcStatusOut(Mirror["BmcStatus"]):
    host: str
    outcome: str
    reason: str | None = None
    power_state: str | None = None
    health: str | None = None
    identity: JsonObject | None = None
    gpus: list[JsonObject] | None = None
    sel_new: list[JsonObject]
    sel_source: str | None = Field(None, description="The event log read (its Redfish id).")
    ssh: str | None = None
    diagnosis: str | None = None
    alarms: list[str]


class PowerIn(Schema):
    action: Literal["on", "off", "cycle", "reset"]
    force: bool = Field(False, description="Also for an allocated host.")
    override_identity_reason: str | None = Field(
        None,
        max_length=2000,
        description="Act even while the host's bmc-identity alarm is open: why the BMC is "
        "the right one (recorded; operator role).",
    )


class BmcActionOut(Schema):
    host: str
    action: str
    ok: bool
    power_state: str | None = None
    reason: str | None = None
    notes: list[str]
    state: str | None = None


class FailureImportIn(Schema):
    text: str = Field(max_length=10_000_000, description="JSON lines, or CSV with a header.")
    format: Literal["jsonl", "csv"] | None = Field(
        None, description="Default: JSON lines when the first line starts with '{'."
    )


class FailureImportOut(Schema):
    recorded: int
    errors: list[str] = Field(description="'LINE: why' for every refused line.")


class EvidenceRunIn(Schema):
    selector: str = Field(min_length=1, description="Hosts to test (allocated/retired skipped).")
    kind: Literal["dcgm", "nccl", "gpu-burn"]
    level: int = Field(1, ge=1, le=4, description="DCGM diag level.")
    seconds: int = Field(60, ge=1, le=86400, description="gpu-burn duration.")


class EvidenceRunOut(Schema):
    host: str
    ok: bool
    summary: str
    result: dict[str, Any] | None = None


class ReasonSelectorIn(Schema):
    selector: str = Field(min_length=1, description="Hosts (the CLI's selectors).")
    reason: str = Field(min_length=1, max_length=1024, pattern=r"\S")
    confirm_all: bool = Field(
        False, description="Confirm a change reaching more than GPUFLEET_CONFIRM_SHARE."
    )


class RetireIn(ReasonSelectorIn):
    no_drain: bool = Field(
        False, description="Retire without draining first: Slurm jobs, pods (recorded)."
    )
    drain_timeout_s: float | None = Field(
        None, gt=0, le=86400, description="Slurm: seconds to wait for running jobs (30 min)."
    )


class UnquarantineIn(ReasonSelectorIn):
    force: bool = Field(
        False,
        description="Let out a host that owes a passing reclaim without one (recorded as a "
        "reclaim-waived event).",
    )


class ReasonIn(Schema):
    reason: str = Field(min_length=1, max_length=1024, pattern=r"\S")


class SelAckOut(Schema):
    host: str
    closed: int = Field(description="bmc-sel alarms closed.")


class BaselineFromHostIn(Schema):
    name: str = Field(min_length=1, max_length=128)
    host: str = Field(min_length=1, description="A known-good host whose latest facts are pinned.")
    purpose: str = ""
    replace: bool = False
    pools: list[str] = Field(default_factory=list, description="Pools to point at it.")
    create: bool = Field(
        True, description="Create the pools that are new; false: a pool no inventory or host "
        "names is 404 and nothing is saved (baseline create without --create).")


class PoolBaselineIn(Schema):
    baseline: str | None = Field(description="The baseline's name; null unsets it.")
    create: bool = Field(False, description="Create the pool when no host names it yet.")


class InspectHostRowOut(Mirror["HostRow"]):
    host: str
    model: str
    gpus: int
    samples: int
    temperature_max: float | None
    ecc_uncorrectable_max: int | None
    throttled_samples: int
    findings: int
    worst: str
    rules: list[str]


class HourlyPeakOut(Schema):
    hour: Time
    temperature_max: float


class InspectModelRowOut(Mirror["ModelRow"]):
    model: str
    gpus: int
    samples: int
    temperature_avg: float | None
    temperature_max: float | None
    ecc_uncorrectable_max: int | None
    throttled_share: float
    hourly_peak: list[HourlyPeakOut]

    @field_validator("hourly_peak", mode="before")
    @classmethod
    def _peaks(cls, peaks: list[object]) -> list[object]:
        """The model's (hour, hottest) pairs as objects."""
        return [
            {"hour": p[0], "temperature_max": p[1]} if isinstance(p, tuple) else p for p in peaks
        ]


class InspectReportOut(Mirror["InspectReport"]):
    since: Time
    until: Time
    hosts: list[InspectHostRowOut]
    models: list[InspectModelRowOut]
    findings_by_rule: dict[str, int]
    top_offenders: list[str] = Field(description="Hosts with findings, worst first (10).")

    @field_validator("top_offenders", mode="before")
    @classmethod
    def _offenders(cls, rows: list[object]) -> list[object]:
        """The report's worst host rows (``HostRow``) by name."""
        return [getattr(h, "host", h) for h in rows]


class DeadLetterOut(Mirror["DeadLetter"]):
    """A webhook notification given up after GPUFLEET_WEBHOOK_MAX_AGE_H (issue 24)."""

    id: int
    kind: str
    host: str | None
    at: Time
    attempts: int
    status: int | None
    error: str | None
