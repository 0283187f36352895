"""SQLAlchemy 2 tables. The same schema serves SQLite (embedded) and PostgreSQL (shared).

History is append-only: a collection adds a ``FactSnapshot`` and never rewrites an earlier
one; ``Host.latest_snapshot_id`` points at the newest *good* snapshot, so a host that answers
garbage keeps its last known truth. ``Event`` is the append-only audit log.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from gpufleet.domain.bmc import BmcOutcome
from gpufleet.domain.decision import Decision
from gpufleet.domain.events import (
    AlarmKind,
    AlarmSeverity,
    CollectionOutcome,
    EventKind,
    EvidenceKind,
)
from gpufleet.domain.health import Fault, Health
from gpufleet.domain.leases import LeaseState
from gpufleet.domain.spec import BaselineStatus
from gpufleet.domain.states import HostState
from gpufleet.store.health_tables import FleetAlarm as FleetAlarm
from gpufleet.store.health_tables import GpuSampleRow as GpuSampleRow
from gpufleet.store.health_tables import HostSampleRow as HostSampleRow
from gpufleet.store.health_tables import InspectQuarantine as InspectQuarantine
from gpufleet.store.health_tables import PartEvent as PartEvent
from gpufleet.store.health_tables import Remediation as Remediation
from gpufleet.store.health_tables import SampleRollup as SampleRollup
from gpufleet.store.run_tables import ApiToken as ApiToken
from gpufleet.store.run_tables import CampaignHost as CampaignHost
from gpufleet.store.run_tables import CampaignRow as CampaignRow
from gpufleet.store.run_tables import JobChunk as JobChunk
from gpufleet.store.run_tables import JobRun as JobRun
from gpufleet.store.run_tables import JobRunHost as JobRunHost
from gpufleet.store.run_tables import WebhookDelivery as WebhookDelivery
from gpufleet.store.table_types import Base as Base
from gpufleet.store.table_types import JsonType as JsonType
from gpufleet.store.table_types import StrEnumType as StrEnumType
from gpufleet.store.table_types import UtcDateTime as UtcDateTime


class Host(Base):
    """One server: how to reach it, what it should be, where it is in its lifecycle."""

    __tablename__ = "hosts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(255), unique=True)
    address: Mapped[str] = mapped_column(String(255))
    port: Mapped[int] = mapped_column(Integer, default=22)
    user: Mapped[str | None] = mapped_column(String(64))
    key_file: Mapped[str | None] = mapped_column(Text)
    groups: Mapped[list[str]] = mapped_column(JsonType, default=list)
    vars: Mapped[dict[str, str]] = mapped_column(JsonType, default=dict)
    pool: Mapped[str | None] = mapped_column(String(128), index=True)
    rack: Mapped[str | None] = mapped_column(String(64), index=True)
    expected: Mapped[dict[str, Any]] = mapped_column(JsonType, default=dict)
    source: Mapped[str | None] = mapped_column(Text)  # inventory file it came from

    state: Mapped[HostState] = mapped_column(StrEnumType(HostState, 20), index=True)
    state_entered_at: Mapped[datetime] = mapped_column(UtcDateTime)
    state_deadline: Mapped[datetime | None] = mapped_column(UtcDateTime)
    health: Mapped[Health] = mapped_column(StrEnumType(Health, 10), default=Health.OK)
    fault: Mapped[Fault | None] = mapped_column(StrEnumType(Fault, 40))
    fault_reason: Mapped[str | None] = mapped_column(Text)
    #: Bumped by every lifecycle write (service/core/lifecycle.py): the compare-and-set token that
    #: keeps two writers from losing each other's transition.
    state_version: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    status_reason: Mapped[str | None] = mapped_column(Text)  # why it is where it is
    profiles: Mapped[list[str]] = mapped_column(JsonType, default=list)
    validated_until: Mapped[datetime | None] = mapped_column(UtcDateTime)
    maintenance_until: Mapped[datetime | None] = mapped_column(UtcDateTime)
    #: When a host in maintenance or quarantine is expected back (``--eta``, ``hosts eta``).
    eta: Mapped[datetime | None] = mapped_column(UtcDateTime)
    # --- issue 10 (GPU-level health): a partial host's usable GPU count (None: all of them)
    # and the GPUs validation marked unusable ({index, serial, uuid, pci_bus_id, reason}).
    usable_gpus: Mapped[int | None] = mapped_column(Integer)
    unusable_gpus: Mapped[list[dict[str, Any]] | None] = mapped_column(JsonType)
    # --- issue 24: why the host owes a passing reclaim (set when a lease releases it, kept
    # while reclaim finds the lessee's leftovers; cleared by a reclaim whose checks pass or
    # by `unquarantine --force`); None: it owes none. Validation never makes it available.
    reclaim_due: Mapped[str | None] = mapped_column(Text)
    # --- issue 26 item 9: gpu, cpu or storage (domain/roles.py; inventory gpufleet_role).
    # Only 'gpu' hosts are GPU capacity, placement candidates and carry GPU labels.
    role: Mapped[str] = mapped_column(String(16), default="gpu", server_default="gpu", index=True)
    # --- issue 27 (migration 0027): the rack (chassis serial) and NVLink domain (clusterUuid)
    # of its latest facts (None: not a multi-node NVLink member), and why an open rack
    # incident keeps it out of NVLink-domain placement (None: none does).
    nvl_rack: Mapped[str | None] = mapped_column(String(64))
    nvl_domain: Mapped[str | None] = mapped_column(String(64), index=True)
    nvl_restricted: Mapped[str | None] = mapped_column(Text)

    host_key: Mapped[str | None] = mapped_column(Text)  # pinned on first use
    latest_snapshot_id: Mapped[int | None] = mapped_column(
        ForeignKey("fact_snapshots.id", use_alter=True, name="fk_hosts_latest_snapshot")
    )
    last_collected_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    last_outcome: Mapped[CollectionOutcome | None] = mapped_column(
        StrEnumType(CollectionOutcome, 20)
    )
    last_reason: Mapped[str | None] = mapped_column(Text)
    #: Consecutive collections/inspections that could not reach the host (refused, timeout,
    #: auth, host key) and when the first of them failed; reset by one that reaches it
    #: (service/hosts/reachability.py).
    unreachable_attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    unreachable_since: Mapped[datetime | None] = mapped_column(UtcDateTime)

    # Work claiming across processes: a worker sets both under SELECT ... FOR UPDATE SKIP LOCKED.
    claim_token: Mapped[str | None] = mapped_column(String(36))
    claimed_until: Mapped[datetime | None] = mapped_column(UtcDateTime)
    # Who holds the claim: "BOOT_ID PID START HOSTNAME" (service/core/claim_owner.py); a claim of
    # a process gone from this machine's current boot is taken over at once.
    claim_owner: Mapped[str | None] = mapped_column(String(200))

    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime)

    latest_snapshot: Mapped[FactSnapshot | None] = relationship(
        foreign_keys=[latest_snapshot_id], post_update=True
    )


class CollectionRun(Base):
    """One ``gpufleet collect`` (or validate) sweep."""

    __tablename__ = "collection_runs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    started_at: Mapped[datetime] = mapped_column(UtcDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    transport: Mapped[str] = mapped_column(String(20))
    selector: Mapped[str | None] = mapped_column(Text)
    actor: Mapped[str] = mapped_column(String(128))
    counts: Mapped[dict[str, int]] = mapped_column(JsonType, default=dict)


class CollectionResult(Base):
    """Per-host outcome of a run, with the reason in words."""

    __tablename__ = "collection_results"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(
        ForeignKey("collection_runs.id", ondelete="CASCADE"), index=True
    )
    host_id: Mapped[int] = mapped_column(ForeignKey("hosts.id", ondelete="CASCADE"), index=True)
    outcome: Mapped[CollectionOutcome] = mapped_column(StrEnumType(CollectionOutcome, 20))
    reason: Mapped[str] = mapped_column(Text, default="")
    duration_s: Mapped[float] = mapped_column(Float, default=0.0)
    snapshot_id: Mapped[int | None] = mapped_column(ForeignKey("fact_snapshots.id"))


class FactSnapshot(Base):
    """The facts of one host at one time; never updated after insert."""

    __tablename__ = "fact_snapshots"
    __table_args__ = (Index("ix_fact_snapshots_host_time", "host_id", "collected_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    host_id: Mapped[int] = mapped_column(ForeignKey("hosts.id", ondelete="CASCADE"))
    run_id: Mapped[int | None] = mapped_column(
        ForeignKey("collection_runs.id", ondelete="SET NULL")
    )
    collected_at: Mapped[datetime] = mapped_column(UtcDateTime)
    facts: Mapped[dict[str, Any]] = mapped_column(JsonType)
    driver: Mapped[str | None] = mapped_column(String(32))
    cuda: Mapped[str | None] = mapped_column(String(16))
    kernel: Mapped[str | None] = mapped_column(String(128))
    os: Mapped[str | None] = mapped_column(String(128))
    gpu_count: Mapped[int] = mapped_column(Integer, default=0)
    gpu_model: Mapped[str | None] = mapped_column(String(128))

    gpus: Mapped[list[GpuRow]] = relationship(
        back_populates="snapshot", cascade="all, delete-orphan"
    )
    nics: Mapped[list[NicRow]] = relationship(
        back_populates="snapshot", cascade="all, delete-orphan"
    )

    # --- issue 8 (scale, migration 0006): derived at insert, never updated. ``content_hash``
    # (SHA-256 of the facts without ``collected_at``) lets a collection that saw the same
    # facts write no new snapshot; ``dmi_uuid`` (the in-band DMI system UUID, upper case) and
    # ``gpu_memory_mib`` (the smallest GPU's memory) are read without decoding ``facts``.
    content_hash: Mapped[str | None] = mapped_column(String(64))
    dmi_uuid: Mapped[str | None] = mapped_column(String(64), index=True)
    gpu_memory_mib: Mapped[int | None] = mapped_column(Integer)
    #: issue 8 (migrations 0015, 0017): what the labels take from the facts
    #: (``domain.labels.fact_labels``, versioned), so labels need not decode ``facts``: the
    #: :class:`FactLabelSet` holding that value (a fleet has a few distinct ones).
    fact_labels_id: Mapped[int | None] = mapped_column(
        ForeignKey("fact_label_sets.id"), nullable=True
    )


class FactLabelSet(Base):
    """One distinct value of what the labels take from the facts
    (``domain.labels.fact_labels``), shared by every snapshot that has it (issue 8,
    migration 0017): a 1.4 KB value stored once per fleet-wide variant instead of per
    snapshot, and referenced by id from the snapshots' covering read index. Never updated.
    ``digest``: SHA-256 of the value's canonical JSON text (``store.repo.label_set_digest``)."""

    __tablename__ = "fact_label_sets"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    digest: Mapped[str] = mapped_column(String(64), unique=True)
    value: Mapped[dict[str, Any]] = mapped_column(JsonType)


#: issue 8: hosts by their latest snapshot (duplicate checks join snapshot -> host).
Index("ix_hosts_latest_snapshot", Host.latest_snapshot_id)
#: issue 8 (migrations 0016, 0017): the derived columns fleet-wide reads take (summary,
#: hosts list, drift, labels), read from the index alone (on SQLite a snapshot's columns sit
#: after its facts document: reading them from the row walks the document's overflow pages).
Index(
    "ix_fact_snapshots_read_columns",
    FactSnapshot.id,
    FactSnapshot.gpu_count,
    FactSnapshot.gpu_model,
    FactSnapshot.driver,
    FactSnapshot.cuda,
    FactSnapshot.fact_labels_id,
)


class GpuRow(Base):
    """A GPU as seen in one snapshot (queryable without unpacking the JSON)."""

    __tablename__ = "gpus"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    snapshot_id: Mapped[int] = mapped_column(
        ForeignKey("fact_snapshots.id", ondelete="CASCADE"), index=True
    )
    host_id: Mapped[int] = mapped_column(ForeignKey("hosts.id", ondelete="CASCADE"), index=True)
    index: Mapped[int] = mapped_column(Integer)
    uuid: Mapped[str | None] = mapped_column(String(64), index=True)
    serial: Mapped[str | None] = mapped_column(String(64), index=True)
    product_name: Mapped[str | None] = mapped_column(String(128))
    pci_bus_id: Mapped[str | None] = mapped_column(String(32))
    memory_total_mib: Mapped[int | None] = mapped_column(Integer)
    vbios: Mapped[str | None] = mapped_column(String(64))

    snapshot: Mapped[FactSnapshot] = relationship(back_populates="gpus")


class NicRow(Base):
    """A high-speed NIC port as seen in one snapshot."""

    __tablename__ = "nics"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    snapshot_id: Mapped[int] = mapped_column(
        ForeignKey("fact_snapshots.id", ondelete="CASCADE"), index=True
    )
    host_id: Mapped[int] = mapped_column(ForeignKey("hosts.id", ondelete="CASCADE"), index=True)
    ca: Mapped[str] = mapped_column(String(64))
    port: Mapped[int] = mapped_column(Integer)
    state: Mapped[str | None] = mapped_column(String(32))
    physical_state: Mapped[str | None] = mapped_column(String(32))
    rate_gbps: Mapped[float | None] = mapped_column(Float)
    link_layer: Mapped[str | None] = mapped_column(String(32))

    snapshot: Mapped[FactSnapshot] = relationship(back_populates="nics")


class Event(Base):
    """Append-only audit log: who did what to which host, when, and why."""

    __tablename__ = "events"
    __table_args__ = (Index("ix_events_host_time", "host_id", "at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[datetime] = mapped_column(UtcDateTime, index=True)
    actor: Mapped[str] = mapped_column(String(128))
    host_id: Mapped[int | None] = mapped_column(ForeignKey("hosts.id", ondelete="SET NULL"))
    host_name: Mapped[str | None] = mapped_column(String(255))
    kind: Mapped[EventKind] = mapped_column(StrEnumType(EventKind, 40), index=True)
    message: Mapped[str] = mapped_column(Text)
    data: Mapped[dict[str, Any]] = mapped_column(JsonType, default=dict)


class BaselineRow(Base):
    """A validated software/firmware combination (see ``domain.spec.Baseline``)."""

    __tablename__ = "baselines"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    status: Mapped[BaselineStatus] = mapped_column(StrEnumType(BaselineStatus, 16))
    spec: Mapped[dict[str, Any]] = mapped_column(JsonType)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime)


class InventoryGroup(Base):
    """A group of an enrolled inventory (``all`` too): its child groups and its own
    non-secret variables (issue 26 item 5, migration 0028). Hosts list their groups in
    ``Host.groups``; the last enroll naming a group writes its row."""

    __tablename__ = "inventory_groups"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(255), unique=True)
    children: Mapped[list[str]] = mapped_column(JsonType, default=list)
    vars: Mapped[dict[str, str]] = mapped_column(JsonType, default=dict)
    source: Mapped[str | None] = mapped_column(Text)


class Pool(Base):
    """A set of hosts sharing a purpose, an expected spec and a baseline."""

    __tablename__ = "pools"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    baseline: Mapped[str | None] = mapped_column(String(128))
    expected: Mapped[dict[str, Any]] = mapped_column(JsonType, default=dict)
    #: The pool's lease rules (``leases policy``): on_expiry, max_duration_s; None: defaults.
    lease_policy: Mapped[dict[str, Any] | None] = mapped_column(JsonType)
    #: issue 10: the pool's health rules (``pool health-policy``): gpu_fault, holders,
    #: fallback_reboot, auto_remediate; None: defaults.
    health_policy: Mapped[dict[str, Any] | None] = mapped_column(JsonType)


class Validation(Base):
    """One validation of one host: what it was checked against, what passed, until when."""

    __tablename__ = "validations"
    __table_args__ = (Index("ix_validations_host_time", "host_id", "at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    host_id: Mapped[int] = mapped_column(ForeignKey("hosts.id", ondelete="CASCADE"))
    at: Mapped[datetime] = mapped_column(UtcDateTime)
    snapshot_id: Mapped[int | None] = mapped_column(ForeignKey("fact_snapshots.id"))
    baseline: Mapped[str | None] = mapped_column(String(128))
    decision: Mapped[Decision] = mapped_column(StrEnumType(Decision, 20))
    profiles: Mapped[list[str]] = mapped_column(JsonType, default=list)
    results: Mapped[list[dict[str, Any]]] = mapped_column(JsonType, default=list)
    expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime)


class EvidenceRow(Base):
    """One active-test result (DCGM, NCCL, gpu-burn) of one host; never updated.

    ``change_event_id`` is the host's latest change event (detected or declared) when the
    result was recorded: validation counts evidence only while it is still the latest, i.e.
    the result tested the hardware and software the host has now. An ``evidence`` event in
    the audit log says the result was recorded.
    """

    __tablename__ = "evidence"
    __table_args__ = (Index("ix_evidence_host_time", "host_id", "recorded_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    host_id: Mapped[int] = mapped_column(ForeignKey("hosts.id", ondelete="CASCADE"))
    kind: Mapped[EvidenceKind] = mapped_column(StrEnumType(EvidenceKind, 20))
    recorded_at: Mapped[datetime] = mapped_column(UtcDateTime)
    snapshot_id: Mapped[int | None] = mapped_column(
        ForeignKey("fact_snapshots.id", ondelete="SET NULL")
    )
    change_event_id: Mapped[int | None] = mapped_column(ForeignKey("events.id"))
    passed: Mapped[bool | None] = mapped_column(Boolean)  # None: judged by the profile
    summary: Mapped[str] = mapped_column(Text, default="")
    data: Mapped[dict[str, Any]] = mapped_column(JsonType)  # the parsed result
    source: Mapped[str] = mapped_column(Text)  # the file, or "transport: command"
    actor: Mapped[str] = mapped_column(String(128))


class Alarm(Base):
    """Something an operator must look at on one host, open until closed.

    One open alarm per host and kind; raising it again while it is open adds an ``alarm``
    event to the audit log but no second row.
    """

    __tablename__ = "alarms"
    __table_args__ = (Index("ix_alarms_host_kind", "host_id", "kind"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    host_id: Mapped[int] = mapped_column(ForeignKey("hosts.id", ondelete="CASCADE"))
    kind: Mapped[AlarmKind] = mapped_column(StrEnumType(AlarmKind, 40))
    severity: Mapped[AlarmSeverity] = mapped_column(StrEnumType(AlarmSeverity, 10))
    opened_at: Mapped[datetime] = mapped_column(UtcDateTime, index=True)
    message: Mapped[str] = mapped_column(Text)
    data: Mapped[dict[str, Any]] = mapped_column(JsonType, default=dict)
    acknowledged_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    acknowledged_by: Mapped[str | None] = mapped_column(String(128))
    closed_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    reason: Mapped[str | None] = mapped_column(Text)  # why it was closed


class Lease(Base):
    """Whole hosts handed to an owner for a purpose and a window (``gpufleet allocate``); a
    reservation is a lease whose window starts in the future (state ``reserved``)."""

    __tablename__ = "leases"
    __table_args__ = (Index("ix_leases_state_ends", "state", "ends_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    owner: Mapped[str] = mapped_column(String(128), index=True)
    purpose: Mapped[str] = mapped_column(Text)
    actor: Mapped[str] = mapped_column(String(128))  # who asked
    state: Mapped[LeaseState] = mapped_column(StrEnumType(LeaseState, 12))
    request: Mapped[dict[str, Any]] = mapped_column(JsonType, default=dict)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    starts_at: Mapped[datetime] = mapped_column(UtcDateTime)
    ends_at: Mapped[datetime] = mapped_column(UtcDateTime)
    released_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    notified_at: Mapped[datetime | None] = mapped_column(UtcDateTime)  # expiry told (notify)
    reason: Mapped[str | None] = mapped_column(Text)  # why it ended
    # --- issue 9 (session 6, migration 0003): the lessee's login users (``allocate --user``),
    # whose processes and crontabs reclaim looks for; None: none recorded (reclaim then counts
    # every regular user, UID >= 1000).
    users: Mapped[list[str] | None] = mapped_column(JsonType)

    hosts: Mapped[list[LeaseHost]] = relationship(
        back_populates="lease", cascade="all, delete-orphan", order_by="LeaseHost.host_name"
    )


class LeaseHost(Base):
    """One host of a lease, with its GPU UUIDs and the window it is held for; ``holding`` is
    true while the lease holds it (reserved or active)."""

    __tablename__ = "lease_hosts"
    __table_args__ = (Index("ix_lease_hosts_window", "holding", "ends_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    lease_id: Mapped[int] = mapped_column(
        ForeignKey("leases.id", ondelete="CASCADE"), index=True
    )
    host_id: Mapped[int] = mapped_column(ForeignKey("hosts.id", ondelete="CASCADE"), index=True)
    host_name: Mapped[str] = mapped_column(String(255))
    gpus: Mapped[int] = mapped_column(Integer)
    gpu_uuids: Mapped[list[str]] = mapped_column(JsonType, default=list)
    starts_at: Mapped[datetime] = mapped_column(UtcDateTime)
    ends_at: Mapped[datetime] = mapped_column(UtcDateTime)
    holding: Mapped[bool] = mapped_column(Boolean)

    lease: Mapped[Lease] = relationship(back_populates="hosts")


class FailureRow(Base):
    """One job failure reported against a host (``gpufleet failures record/import``), with
    the category the rule table gave its message; never updated."""

    __tablename__ = "failures"
    __table_args__ = (Index("ix_failures_host_time", "host_id", "at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[str] = mapped_column(String(128), index=True)
    host_id: Mapped[int] = mapped_column(ForeignKey("hosts.id", ondelete="CASCADE"))
    gpu: Mapped[str | None] = mapped_column(String(64))  # index or UUID, as reported
    at: Mapped[datetime] = mapped_column(UtcDateTime, index=True)
    message: Mapped[str] = mapped_column(Text)
    category: Mapped[str] = mapped_column(String(32))
    rule: Mapped[str | None] = mapped_column(String(64))
    recorded_at: Mapped[datetime] = mapped_column(UtcDateTime)
    source: Mapped[str] = mapped_column(Text)  # "cli" or FILE:LINE
    actor: Mapped[str] = mapped_column(String(128))


class BmcRead(Base):
    """One read of a host's BMC over Redfish (``gpufleet bmc status``), kept as history: the
    outcome, and when it was read, identity, power, health, GPU processors, the event-log
    entries new since the previous read and the keys of every entry seen so far (the cursor of
    "since the last read")."""

    __tablename__ = "bmc_reads"
    __table_args__ = (Index("ix_bmc_reads_host_time", "host_id", "read_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    host_id: Mapped[int] = mapped_column(ForeignKey("hosts.id", ondelete="CASCADE"))
    read_at: Mapped[datetime] = mapped_column(UtcDateTime)
    outcome: Mapped[BmcOutcome] = mapped_column(StrEnumType(BmcOutcome, 20))
    reason: Mapped[str | None] = mapped_column(Text)
    power_state: Mapped[str | None] = mapped_column(String(32))
    health: Mapped[str | None] = mapped_column(String(32))
    reading: Mapped[dict[str, Any] | None] = mapped_column(JsonType)
    sel_new: Mapped[list[dict[str, Any]]] = mapped_column(JsonType, default=list)
    sel_seen: Mapped[list[str] | None] = mapped_column(JsonType)


# --- issue 9 (session 6, migration 0003): placement's per-rack summary of candidate hosts ---
class PlacementRack(Base):
    """What placement reads first (``store/placement_index.py``): per rack, how many
    hosts of each kind are ``available`` with no open alarm. Rewritten from the hosts of the rack by
    every commit that changed one of them; the row of scope ``fleet`` (rack '') says the
    summary covers the whole fleet (absent: placement reads every candidate, and rebuilds it).
    A stale row can only cost placement a re-read, never a wrong grant."""

    __tablename__ = "placement_racks"

    scope: Mapped[str] = mapped_column(String(8), primary_key=True)  # "rack" or "fleet"
    rack: Mapped[str] = mapped_column(String(255), primary_key=True)  # '' = no rack
    #: [[fabric, gpus, model, smallest GPU memory MiB, [profiles], hosts], ...]
    blocks: Mapped[list[list[Any]]] = mapped_column(JsonType, default=list)
    refreshed_at: Mapped[datetime] = mapped_column(UtcDateTime)


