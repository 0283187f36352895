"""Tables of fleet health: inspection samples and their roll-ups, automatic quarantines,
fleet alarms, remediation records and parts history (moved out of
:mod:`gpufleet.store.tables`, which re-exports them)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, Boolean, Float, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from gpufleet.domain.events import AlarmSeverity
from gpufleet.domain.remediation import Action
from gpufleet.store.table_types import Base, JsonType, StrEnumType, UtcDateTime


class GpuSampleRow(Base):
    """One GPU in one inspection sweep (``gpufleet inspect``): the ``--query-gpu`` values the
    rules read. Kept ``GPUFLEET_INSPECT_RETENTION`` long; older sweeps live on as hourly
    :class:`SampleRollup` rows. ``reasons`` is a bit set of active clock-event reasons."""

    __tablename__ = "gpu_samples"
    __table_args__ = (Index("ix_gpu_samples_at", "at"),)

    host_id: Mapped[int] = mapped_column(
        ForeignKey("hosts.id", ondelete="CASCADE"), primary_key=True
    )
    at: Mapped[datetime] = mapped_column(UtcDateTime, primary_key=True)
    gpu_index: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    uuid: Mapped[str | None] = mapped_column(String(64))
    model: Mapped[str | None] = mapped_column(String(96))
    pci_bus_id: Mapped[str | None] = mapped_column(String(32))
    temperature_c: Mapped[float | None] = mapped_column(Float)
    power_w: Mapped[float | None] = mapped_column(Float)
    power_limit_w: Mapped[float | None] = mapped_column(Float)
    sm_clock_mhz: Mapped[float | None] = mapped_column(Float)
    max_sm_clock_mhz: Mapped[float | None] = mapped_column(Float)
    mem_clock_mhz: Mapped[float | None] = mapped_column(Float)
    util_gpu_pct: Mapped[float | None] = mapped_column(Float)
    util_mem_pct: Mapped[float | None] = mapped_column(Float)
    memory_used_mib: Mapped[float | None] = mapped_column(Float)
    fan_pct: Mapped[float | None] = mapped_column(Float)
    ecc_vol_corr: Mapped[int | None] = mapped_column(BigInteger)
    ecc_vol_unc: Mapped[int | None] = mapped_column(BigInteger)
    ecc_agg_corr: Mapped[int | None] = mapped_column(BigInteger)
    ecc_agg_unc: Mapped[int | None] = mapped_column(BigInteger)
    retired_sbe: Mapped[int | None] = mapped_column(Integer)
    retired_dbe: Mapped[int | None] = mapped_column(Integer)
    retired_pending: Mapped[bool | None] = mapped_column(Boolean)
    remap_corr: Mapped[int | None] = mapped_column(Integer)
    remap_unc: Mapped[int | None] = mapped_column(Integer)
    remap_pending: Mapped[bool | None] = mapped_column(Boolean)
    remap_failure: Mapped[bool | None] = mapped_column(Boolean)
    pcie_gen: Mapped[int | None] = mapped_column(Integer)
    pcie_gen_max: Mapped[int | None] = mapped_column(Integer)
    pcie_width: Mapped[int | None] = mapped_column(Integer)
    pcie_width_max: Mapped[int | None] = mapped_column(Integer)
    reasons: Mapped[int] = mapped_column(Integer, default=0)


class HostSampleRow(Base):
    """One host in one inspection sweep: whether the GPU query answered, the new Xid lines,
    IB/RoCE port counters, disk space, uptime, and the kernel-log cursor for the next sweep."""

    __tablename__ = "host_samples"
    __table_args__ = (Index("ix_host_samples_at", "at"),)

    host_id: Mapped[int] = mapped_column(
        ForeignKey("hosts.id", ondelete="CASCADE"), primary_key=True
    )
    at: Mapped[datetime] = mapped_column(UtcDateTime, primary_key=True)
    gpus_ok: Mapped[bool] = mapped_column(Boolean)
    gpu_count: Mapped[int] = mapped_column(Integer, default=0)
    uptime_s: Mapped[float | None] = mapped_column(Float)
    #: issue 10 (migration 0014): seconds since the NVIDIA driver was loaded (grace).
    driver_age_s: Mapped[float | None] = mapped_column(Float)
    nvlink: Mapped[bool] = mapped_column(Boolean, default=False)
    xids: Mapped[list[dict[str, Any]]] = mapped_column(JsonType, default=list)
    ports: Mapped[list[dict[str, Any]]] = mapped_column(JsonType, default=list)
    disks: Mapped[list[dict[str, Any]]] = mapped_column(JsonType, default=list)
    problems: Mapped[list[str]] = mapped_column(JsonType, default=list)
    kmsg_cursor: Mapped[str | None] = mapped_column(String(64))
    #: issue 24 (migration 0018): the boot the sample was taken in (boot_id, else
    #: ``uptime:<boot time>``), and what the probe could not observe (``{kind, detail}``).
    boot_id: Mapped[str | None] = mapped_column(String(80))
    failures: Mapped[list[dict[str, str]] | None] = mapped_column(JsonType, default=list)


class SampleRollup(Base):
    """Hourly roll-up of one GPU's samples, kept after the raw samples are pruned."""

    __tablename__ = "sample_rollups"

    host_id: Mapped[int] = mapped_column(
        ForeignKey("hosts.id", ondelete="CASCADE"), primary_key=True
    )
    hour: Mapped[datetime] = mapped_column(UtcDateTime, primary_key=True)
    gpu_index: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    model: Mapped[str | None] = mapped_column(String(96))
    samples: Mapped[int] = mapped_column(Integer)
    temperature_max: Mapped[float | None] = mapped_column(Float)
    temperature_avg: Mapped[float | None] = mapped_column(Float)
    power_avg: Mapped[float | None] = mapped_column(Float)
    sm_clock_avg: Mapped[float | None] = mapped_column(Float)
    util_avg: Mapped[float | None] = mapped_column(Float)
    ecc_unc_max: Mapped[int | None] = mapped_column(BigInteger)
    throttled: Mapped[int] = mapped_column(Integer, default=0)


class InspectQuarantine(Base):
    """A host the inspection quarantined on its own (the blast-radius guard counts these
    within its window)."""

    __tablename__ = "inspect_quarantines"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    host_id: Mapped[int] = mapped_column(ForeignKey("hosts.id", ondelete="CASCADE"))
    at: Mapped[datetime] = mapped_column(UtcDateTime, index=True)
    rule: Mapped[str] = mapped_column(String(64))


class FleetAlarm(Base):
    """An alarm about the fleet rather than one host (the blast-radius guard tripped); one
    open per kind."""

    __tablename__ = "fleet_alarms"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(40), index=True)
    severity: Mapped[AlarmSeverity] = mapped_column(StrEnumType(AlarmSeverity, 10))
    opened_at: Mapped[datetime] = mapped_column(UtcDateTime)
    message: Mapped[str] = mapped_column(Text)
    data: Mapped[dict[str, Any]] = mapped_column(JsonType, default=dict)
    closed_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    reason: Mapped[str | None] = mapped_column(Text)


# --- issue 10 (health: remediation records, parts history, webhook deliveries) ---
class Remediation(Base):
    """One remediation step on one host (``gpufleet remediate``): the action, the GPUs (and
    their serials) it touched, what ran and how it ended; the host's ladder is these rows."""

    __tablename__ = "remediations"
    __table_args__ = (Index("ix_remediations_host_time", "host_id", "started_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    host_id: Mapped[int] = mapped_column(ForeignKey("hosts.id", ondelete="CASCADE"))
    host_name: Mapped[str] = mapped_column(String(255))
    action: Mapped[Action] = mapped_column(StrEnumType(Action, 20))
    gpus: Mapped[list[int]] = mapped_column(JsonType, default=list)
    serials: Mapped[list[str]] = mapped_column(JsonType, default=list)
    started_at: Mapped[datetime] = mapped_column(UtcDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    outcome: Mapped[str] = mapped_column(String(20))
    detail: Mapped[str] = mapped_column(Text, default="")
    steps: Mapped[list[dict[str, Any]]] = mapped_column(JsonType, default=list)
    ticket: Mapped[str | None] = mapped_column(String(128))
    eta: Mapped[datetime | None] = mapped_column(UtcDateTime)
    rule: Mapped[str | None] = mapped_column(String(128))  # the rule that ran it automatically
    actor: Mapped[str] = mapped_column(String(128))


class PartEvent(Base):
    """Something that happened to one GPU, by serial, wherever it was (``gpufleet parts``):
    marked unusable, reset, RMA ticket, alarm. Where a serial was seen is the ``gpus`` rows."""

    __tablename__ = "part_events"
    __table_args__ = (Index("ix_part_events_serial_time", "serial", "at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    serial: Mapped[str] = mapped_column(String(64))
    at: Mapped[datetime] = mapped_column(UtcDateTime)
    host_id: Mapped[int | None] = mapped_column(ForeignKey("hosts.id", ondelete="SET NULL"))
    host_name: Mapped[str | None] = mapped_column(String(255))
    gpu_index: Mapped[int | None] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(20))
    message: Mapped[str] = mapped_column(Text)
    data: Mapped[dict[str, Any]] = mapped_column(JsonType, default=dict)
