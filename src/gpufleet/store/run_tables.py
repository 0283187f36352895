"""Tables of the work a server runs: API tokens, background runs and their chunks, campaigns
and their hosts, the webhook outbox (moved out of :mod:`gpufleet.store.tables`, which
re-exports them)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, Boolean, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from gpufleet.domain.campaign import ActionKind, CampaignStatus, HostStep
from gpufleet.domain.runs import RunKind, RunState
from gpufleet.store.table_types import Base, JsonType, StrEnumType, UtcDateTime


# --- issue 12 (service: auth and roles): API tokens, stored hashed ---
class ApiToken(Base):
    """One API bearer token (``gpufleet token create``): its name (the actor of what it does),
    role and the SHA-256 of the token; the token itself is never stored. Revoked tokens stay
    (revoked_at set) until a new token takes their name."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    role: Mapped[str] = mapped_column(String(16))
    digest: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    created_by: Mapped[str] = mapped_column(String(128))
    expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(UtcDateTime)


# --- issue 12 (service: workers): runs of background work and their chunks (one job each) ---
class JobRun(Base):
    """One collect or validate run started from the API or a schedule (``POST /api/v1/runs``,
    ``GPUFLEET_SCHEDULE_*``), split into chunks that workers run as queue jobs. A scheduled
    run records its schedule and period: one run per schedule and period, fleet-wide."""

    __tablename__ = "job_runs"
    __table_args__ = (
        Index("ux_job_runs_schedule_period", "schedule", "period", unique=True),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[RunKind] = mapped_column(StrEnumType(RunKind, 20))
    selector: Mapped[str | None] = mapped_column(Text)
    state: Mapped[RunState] = mapped_column(StrEnumType(RunState, 20), index=True)
    actor: Mapped[str] = mapped_column(String(128))
    schedule: Mapped[str | None] = mapped_column(String(64))
    period: Mapped[int | None] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    started_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    collection_run_id: Mapped[int | None] = mapped_column(
        ForeignKey("collection_runs.id", ondelete="SET NULL")
    )
    hosts: Mapped[int] = mapped_column(Integer, default=0)
    chunks: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text)
    #: What the run does besides its kind (evidence: the test, level, seconds).
    params: Mapped[dict[str, Any] | None] = mapped_column(JsonType)


class JobChunk(Base):
    """One chunk of a run: its hosts, its queue job, how many attempts and who ran the last."""

    __tablename__ = "job_chunks"
    __table_args__ = (Index("ux_job_chunks_run_seq", "run_id", "seq", unique=True),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("job_runs.id", ondelete="CASCADE"))
    seq: Mapped[int] = mapped_column(Integer)  # 0, 1, ... within the run
    #: Host ids (a host renamed meanwhile is still the same host).
    hosts: Mapped[list[int]] = mapped_column(JsonType, default=list)
    state: Mapped[RunState] = mapped_column(StrEnumType(RunState, 20))
    job_id: Mapped[int | None] = mapped_column(BigInteger)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    worker: Mapped[str | None] = mapped_column(String(128))
    started_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    #: What the chunk did: verdict counts (validate), hosts skipped as held elsewhere.
    result: Mapped[dict[str, Any]] = mapped_column(JsonType, default=dict)
    error: Mapped[str | None] = mapped_column(Text)


class JobRunHost(Base):
    """One host's result in an inspect or evidence run (collect and validate runs store theirs
    as ``collection_results``): one row per host and run, written by the chunk that did it."""

    __tablename__ = "job_run_hosts"

    run_id: Mapped[int] = mapped_column(
        ForeignKey("job_runs.id", ondelete="CASCADE"), primary_key=True
    )
    host_id: Mapped[int] = mapped_column(
        ForeignKey("hosts.id", ondelete="CASCADE"), primary_key=True
    )
    outcome: Mapped[str] = mapped_column(String(32))
    detail: Mapped[str | None] = mapped_column(Text)
    at: Mapped[datetime] = mapped_column(UtcDateTime)


# --- issue 10 (health, items 2/3/4/6): inspection samples, roll-ups, auto-quarantines, -------
# --- fleet alarms (service/health/inspect.py; migration 0004) --------------------------------


# --- issue 14 (canary campaigns: the plan and each host's step, for crash-safe resume) ---
class CampaignRow(Base):
    """One change campaign (``gpufleet campaign``): what it does, to which baseline, the plan
    (hosts per wave, skipped hosts and why) and where it is (``status``); ``owner`` is
    ``hostname:pid`` of the process driving it (resume takes over only when that process is
    gone)."""

    __tablename__ = "campaigns"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    status: Mapped[CampaignStatus] = mapped_column(StrEnumType(CampaignStatus, 20))
    action_kind: Mapped[ActionKind] = mapped_column(StrEnumType(ActionKind, 12))
    action: Mapped[str] = mapped_column(Text)
    rollback: Mapped[str | None] = mapped_column(Text)
    target_baseline: Mapped[str] = mapped_column(String(128))
    selector: Mapped[str] = mapped_column(Text)
    ticket: Mapped[str] = mapped_column(String(128))
    options: Mapped[dict[str, Any]] = mapped_column(JsonType, default=dict)
    plan: Mapped[dict[str, Any]] = mapped_column(JsonType, default=dict)
    current_wave: Mapped[int] = mapped_column(Integer, default=0)
    halt_reason: Mapped[str | None] = mapped_column(Text)
    approved_by: Mapped[str | None] = mapped_column(String(128))
    approved_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    owner: Mapped[str | None] = mapped_column(String(128))
    created_by: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime)


class CampaignHost(Base):
    """One host of a campaign: its wave and step (``domain.campaign.HostStep``), committed
    before each next step; ``previous_baseline`` is the host's own ``gpufleet_baseline``
    variable before the change (None: it had none), restored by a rollback."""

    __tablename__ = "campaign_hosts"
    __table_args__ = (
        Index("ix_campaign_hosts_campaign_host", "campaign_id", "host_name", unique=True),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    campaign_id: Mapped[int] = mapped_column(ForeignKey("campaigns.id", ondelete="CASCADE"))
    host_id: Mapped[int | None] = mapped_column(ForeignKey("hosts.id", ondelete="SET NULL"))
    host_name: Mapped[str] = mapped_column(String(255))
    wave: Mapped[int] = mapped_column(Integer)
    step: Mapped[HostStep] = mapped_column(StrEnumType(HostStep, 20))
    reason: Mapped[str | None] = mapped_column(Text)
    previous_baseline: Mapped[str | None] = mapped_column(String(128))
    driver_before: Mapped[str | None] = mapped_column(String(32))
    action_runs: Mapped[int] = mapped_column(Integer, default=0)
    action_started_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    action_finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime)


class WebhookDelivery(Base):
    """One notification sent to the webhook (``GPUFLEET_WEBHOOK_URL``): what, how many tries,
    delivered or the last error. Never holds the secret or the signature."""

    __tablename__ = "webhook_deliveries"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[datetime] = mapped_column(UtcDateTime, index=True)
    kind: Mapped[str] = mapped_column(String(40))
    host_name: Mapped[str | None] = mapped_column(String(255))
    payload: Mapped[dict[str, Any]] = mapped_column(JsonType)
    attempts: Mapped[int] = mapped_column(Integer)
    delivered: Mapped[bool] = mapped_column(Boolean)
    status: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(Text)
    #: issue 10 (migration 0014), the outbox: when the next attempt is due (None: finished,
    #: delivered or given up), the sender holding it until ``claimed_until``, when delivered.
    next_at: Mapped[datetime | None] = mapped_column(UtcDateTime, index=True)
    claim: Mapped[str | None] = mapped_column(String(32))
    claimed_until: Mapped[datetime | None] = mapped_column(UtcDateTime)
    delivered_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
