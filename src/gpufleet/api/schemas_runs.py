"""API shapes of runs of background work and of campaigns (split from
:mod:`gpufleet.api.schemas`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from gpufleet.api.schemas import Mirror, Schema, Time
from gpufleet.domain.runs import RunKind, RunState

if TYPE_CHECKING:  # the service's read models, checked by mypy; not loaded at run time
    from gpufleet.service.campaigns.campaign import CampaignView
    from gpufleet.service.views.run_views import ChunkView, RunView  # noqa: F401  (Mirror[...])

# --- runs of background work (issue 12 item 2: workers) ------------------------------------


class RunIn(Schema):
    kind: RunKind = Field(
        description="collect, validate, inspect (one sweep) or evidence (remediate runs are "
        "started with POST /hosts/{name}/remediate)"
    )
    selector: str | None = Field(
        None, description="Hosts (NAME-GLOB, group:G, pool:P, state:S, model:M, rack:R); none: all."
    )
    test: Literal["dcgm", "nccl", "gpu-burn"] | None = Field(
        None, description="Evidence runs: the active test (required there, refused elsewhere)."
    )
    level: int | None = Field(None, ge=1, le=4, description="Evidence dcgm: diag level (1).")
    seconds: int | None = Field(
        None, ge=1, le=86400, description="Evidence gpu-burn: duration (60)."
    )

    def params(self) -> dict[str, Any]:
        """The run's parameters (checked by ``service.jobs.run_params``)."""
        return {"test": self.test, "level": self.level, "seconds": self.seconds}


class RunHostOut(Schema):
    host: str
    outcome: str = Field(
        description="collect/validate: the collection outcome; inspect: the probe outcome; "
        "evidence: passed, failed or skipped (allocated/retired)."
    )
    detail: str | None = Field(description="Reason, findings and actions, or the test summary.")


class RunChunkOut(Mirror["ChunkView"]):
    seq: int
    state: RunState
    hosts: int
    attempts: int = Field(description="Times a worker started it (more than 1: retried).")
    worker: str | None = Field(description="host:pid of the worker that ran it last.")
    job_id: int | None
    error: str | None


class RunOut(Mirror["RunView"]):
    """A run and its progress; ``counts`` are the collection outcomes so far, ``verdicts``
    the validation decisions (validate runs)."""

    id: int
    kind: RunKind
    selector: str | None
    state: RunState
    actor: str
    schedule: str | None
    period: int | None
    created_at: Time
    started_at: Time | None
    finished_at: Time | None
    collection_run: int | None
    hosts: int
    hosts_done: int
    chunks: int
    chunks_done: int
    counts: dict[str, int]
    verdicts: dict[str, int]
    skipped: list[str] = Field(description="Hosts held by another worker until the end.")
    error: str | None
    chunk_list: list[RunChunkOut]
    params: dict[str, Any] = Field(description="Evidence runs: test, level, seconds.")
    findings: int = Field(description="Inspect runs: health findings in the finished chunks.")
    remediation: dict[str, Any] | None = Field(
        None, description="Remediate runs, once finished: the report (`remediate --json`'s "
        "shape: host, action, ok, steps, state), or the error that stopped it "
        "({\"error\": {code, message, retryable}})."
    )


class QueueDepthOut(Schema):
    queue: str
    status: str = Field(description="todo (waiting) or doing (running)")
    jobs: int


# --- campaigns (issue 14) --------------------------------------------------------------------


class CampaignActionOut(Schema):
    kind: str = Field(description="playbook, command, reimage or mig")
    value: str
    rollback: str | None


class CampaignHostOut(Schema):
    host: str
    wave: int
    step: str
    reason: str | None
    action_runs: int


class CampaignWaveOut(Schema):
    wave: int
    canary: bool
    hosts: list[CampaignHostOut]


class CampaignSkipOut(Schema):
    host: str
    reason: str


class CampaignOut(Schema):
    """A campaign: plan, progress per wave, every host's step (``campaign status|report
    --json`` prints the same shape)."""

    name: str
    status: str
    ticket: str
    target_baseline: str
    action: CampaignActionOut
    selector: str
    options: dict[str, Any]
    current_wave: int
    halt_reason: str | None
    approved_by: str | None
    created_by: str
    counts: dict[str, int]
    waves: list[CampaignWaveOut]
    skipped: list[CampaignSkipOut]
    notes: list[str]
    racks: dict[str, list[str]] = Field(
        default_factory=dict,
        description="--unit rack: each rack's trays in slot order (empty for host units).")

    @classmethod
    def of(cls, v: CampaignView) -> CampaignOut:
        """From ``service.campaign.CampaignView``."""
        return cls.model_validate(v.as_json())


class CampaignJobOut(Schema):
    """A campaign run queued on the workers; follow it with ``GET /campaigns/{name}``."""

    campaign: str
    job: int = Field(description="The worker job's id (procrastinate).")
    status: str = Field(description="The campaign's status when it was queued.")


class CampaignRunIn(Schema):
    """Optional body of ``/campaigns/{name}/run`` and ``/resume`` (the CLI's options)."""

    no_drain: bool = Field(
        False, description="Act without draining first: Slurm jobs, pods (recorded; issue 26)."
    )
    drain_timeout_s: float | None = Field(
        None, gt=0, le=86400, description="Slurm: seconds to wait for running jobs (30 min)."
    )
