"""The typed shapes of the API (``/api/v1``) and of the CLI's ``--json`` for the same objects.

These are the published contract. Where a shape is a read model of the service field by
field (``service.views.hosts.HostView``, ``service.allocation.leases.LeaseView`` ...) it is a
:class:`Mirror` of it: pydantic reads the read model's attributes (``from_attributes``), no
hand-written copy, and mypy checks that ``Shape.of`` is given that read model; an internal
rename fails validation (and the API tests) instead of changing a response silently. Times
are ISO 8601 with the zone (``2026-01-05T10:00:00+00:00``; naive values are UTC), the same as
the CLI always printed.

Only pydantic: the CLI imports this module without loading the web server.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Generic, Self, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    WithJsonSchema,
    field_validator,
)

from gpufleet.api.schemas_accelerators import AcceleratorOut, VendorSoftwareOut
from gpufleet.domain.facts import HostFacts
from gpufleet.domain.times import as_utc
from gpufleet.errors import GpufleetError

if TYPE_CHECKING:  # the service's read models, checked by mypy; not loaded by the CLI's import
    # (the read models a Mirror["..."] names are used where ruff does not look: noqa F401)
    from gpufleet.domain.drift import DriftItem, DriftSummary  # noqa: F401
    from gpufleet.domain.facts import Gpu, IbPort  # noqa: F401
    from gpufleet.domain.spec import Baseline
    from gpufleet.service.allocation.capacity import CapacityCheck  # noqa: F401
    from gpufleet.service.allocation.leases import LeaseView  # noqa: F401
    from gpufleet.service.core.alarms import AlarmView  # noqa: F401
    from gpufleet.service.hosts.baselines import DriftReport  # noqa: F401
    from gpufleet.service.views.hosts import HostDetail, HostView  # noqa: F401


def _iso(dt: datetime) -> str:
    return as_utc(dt).isoformat()


#: A timestamp: ISO 8601 with the zone in JSON.
Time = Annotated[
    datetime,
    PlainSerializer(_iso, return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "format": "date-time"}, mode="serialization"),
]


#: A time given by the caller: without a zone it is UTC (gpufleet.domain.times.as_utc; the
#: CLI sends the operator's times zoned, docs/reference.md "Times").
InTime = Annotated[datetime, AfterValidator(as_utc)]


class Schema(BaseModel):
    """Base of every API shape: unknown request fields are refused, not ignored."""

    model_config = ConfigDict(extra="forbid")

    def json_dict(self) -> dict[str, Any]:
        """The JSON-ready dict (what the API sends and the CLI prints)."""
        return self.model_dump(mode="json")


#: The service's read model a :class:`Mirror` publishes.
M = TypeVar("M")


class Mirror(Schema, Generic[M]):
    """A shape that is the read model ``M`` of the service field by field (its enums as their
    values): validated from its attributes, never copied by hand. ``M`` is named, not
    imported (``Mirror["HostView"]``): the CLI loads no service module with the schemas."""

    model_config = ConfigDict(extra="forbid", from_attributes=True)

    @classmethod
    def of(cls, v: M) -> Self:
        """The published shape of the read model ``v``."""
        return cls.model_validate(v)


# --- errors -------------------------------------------------------------------------------


class ErrorBody(Schema):
    code: str = Field(description="Stable machine name of the error class (errors.py).")
    message: str
    retryable: bool = Field(description="True: the same call may succeed later unchanged.")


class ErrorOut(Schema):
    """The one error shape: ``{"error": {"code", "message", "retryable"}}``."""

    error: ErrorBody

    @classmethod
    def of(cls, exc: GpufleetError) -> ErrorOut:
        return cls.model_validate(exc.as_json())


# --- hosts --------------------------------------------------------------------------------


class HostOut(Mirror["HostView"]):
    """One host as listed (``hosts list``)."""

    name: str
    address: str
    state: str
    health: str
    fault: str | None
    pool: str | None
    groups: list[str]
    gpu_count: int | None = Field(description="None: never collected.")
    gpu_model: str | None
    driver: str | None
    cuda: str | None
    profiles: list[str] = Field(description="Workload profiles the host is validated for.")
    last_collected_at: Time | None
    last_outcome: str | None
    last_reason: str | None
    status_reason: str | None
    eta: Time | None = Field(description="Expected back (maintenance or quarantine).")


class HostPage(Schema):
    """A page of hosts; pass ``next_cursor`` as ``cursor`` for the next one (None: last)."""

    items: list[HostOut]
    limit: int
    next_cursor: str | None


class FactsSummary(Schema):
    collected_at: Time
    hostname: str | None
    os: str | None
    kernel: str | None
    driver_version: str | None
    cuda_version: str | None
    cpu_count: int | None
    memory_total_kib: int | None
    system_vendor: str | None
    system_product: str | None
    pci_gpus: int = Field(description="NVIDIA GPUs seen on the PCI bus.")
    nvidia_smi_error: str | None
    problems: list[str]


class GpuOut(Schema):
    index: int
    model: str | None
    uuid: str | None
    serial: str | None
    pci_bus_id: str | None
    vbios_version: str | None
    memory_total_mib: int | None
    temperature_c: float | None
    power_draw_w: float | None
    ecc_uncorrectable_volatile: int | None
    remapped_rows: str | None = Field(description="ok, pending, failure; None: not reported.")
    error: str | None


class NicPortOut(Mirror["IbPort"]):
    ca: str
    port: int
    state: str | None
    physical_state: str | None
    rate_gbps: float | None
    link_layer: str | None
    firmware: str | None


class EventOut(Schema):
    at: Time
    actor: str
    host: str | None = None
    kind: str
    message: str
    data: dict[str, Any]

    @classmethod
    def of(cls, e: dict[str, Any], host: str | None = None) -> EventOut:
        return cls(
            at=e["at"],
            actor=e["actor"],
            host=e.get("host", host),
            kind=str(e["kind"]),
            message=e["message"],
            data=dict(e.get("data") or {}),
        )


class CollectionOut(Schema):
    run_id: int | None
    outcome: str
    reason: str | None
    duration_s: float


class AlarmOut(Mirror["AlarmView"]):
    host: str
    kind: str
    severity: str
    opened_at: Time
    message: str
    acknowledged_by: str | None
    closed_at: Time | None
    reason: str | None


class EvidenceOut(Schema):
    at: Time
    kind: str
    passed: bool | None
    summary: str | None
    source: str | None
    actor: str | None


class ValidationOut(Schema):
    at: Time
    decision: str
    baseline: str | None
    profiles: list[str]
    results: list[dict[str, Any]]
    expires_at: Time | None


class LeaseOut(Mirror["LeaseView"]):
    id: int
    owner: str
    purpose: str
    state: str
    actor: str
    starts_at: Time
    ends_at: Time
    created_at: Time
    hosts: list[str]
    gpus: int
    gpu_uuids: dict[str, list[str]]
    request: dict[str, Any]
    released_at: Time | None
    notified_at: Time | None
    reason: str | None
    users: list[str] | None = Field(
        None, description="The lessee's login users (reclaim checks them); null: not recorded."
    )


def _gpu(g: Gpu) -> GpuOut:
    rr = g.remapped_rows
    return GpuOut(
        index=g.index,
        model=g.product_name,
        uuid=g.uuid,
        serial=g.serial,
        pci_bus_id=g.pci_bus_id,
        vbios_version=g.vbios_version,
        memory_total_mib=g.memory_total_mib,
        temperature_c=g.temperature_c,
        power_draw_w=g.power_draw_w,
        ecc_uncorrectable_volatile=g.ecc_volatile.uncorrectable if g.ecc_volatile else None,
        remapped_rows=None
        if rr is None
        else ("failure" if rr.failure else "pending" if rr.pending else "ok"),
        error=g.error,
    )


class HostDetailOut(Schema):
    """One host (``hosts show``): the row, a facts summary, GPUs, NIC ports, labels,
    validation, open alarms, leases, recent events; ``facts`` is the whole collected
    document as stored (its shape is versioned by ``facts_version``)."""

    host: HostOut
    expected: dict[str, Any]
    host_key: str | None
    summary: FactsSummary | None = Field(description="None: never collected.")
    gpus: list[GpuOut] = Field(description="NVIDIA GPUs (nvidia-smi); see accelerators.")
    accelerators: list[AcceleratorOut] = Field(description="Every vendor's, one shape.")
    software: list[VendorSoftwareOut] = Field(description="Per vendor: stack and count.")
    nics: list[NicPortOut]
    labels: dict[str, str]
    taints: list[str]
    validation: ValidationOut | None
    alarms: list[AlarmOut]
    leases: list[LeaseOut]
    events: list[EventOut]
    collections: list[CollectionOut]
    evidence: list[EvidenceOut]
    facts: dict[str, Any] | None
    #: issue 10: the remediation ladder climbed (oldest first); a partial host's usable GPU
    #: count (None: every GPU) and the GPUs validation marked unusable.
    remediations: list[dict[str, Any]] = Field(default_factory=list)
    usable_gpus: int | None = None
    unusable_gpus: list[dict[str, Any]] = Field(default_factory=list)
    reclaim_due: str | None = Field(
        None, description="Why the host owes a passing reclaim (None: it owes none)."
    )

    @classmethod
    def of(cls, d: HostDetail) -> HostDetailOut:
        """From ``service.hosts.HostDetail``."""
        from gpufleet.domain.accelerators import other_vendor_host
        from gpufleet.service.views.accelerators import host_accelerators

        f: HostFacts | None = d.facts
        summary = None
        acc = host_accelerators(f) if f is not None else None
        if f is not None:
            summary = FactsSummary(
                collected_at=f.collected_at,
                hostname=f.hostname,
                os=f.os.pretty_name if f.os else None,
                kernel=f.kernel,
                driver_version=f.driver_version,
                cuda_version=f.cuda_version,
                cpu_count=f.cpu_count,
                memory_total_kib=f.memory_total_kib,
                system_vendor=f.system_vendor,
                system_product=f.system_product,
                pci_gpus=len(f.pci_gpus),
                # nvidia-smi's failure is news only where NVIDIA GPUs may be (issue 29)
                nvidia_smi_error=f.nvidia_smi_error if not other_vendor_host(f) else None,
                problems=list(f.problems),
            )
        return cls(
            host=HostOut.of(d.view),
            expected=dict(d.expected),
            host_key=d.host_key,
            summary=summary,
            gpus=[_gpu(g) for g in f.gpus] if f else [],
            accelerators=[AcceleratorOut.of(a) for a in acc.accelerators] if acc else [],
            software=[VendorSoftwareOut.of(v) for v in acc.vendors] if acc else [],
            nics=[NicPortOut.of(p) for p in (f.ib_ports or [] if f else [])],
            labels=dict(d.labels),
            taints=list(d.taints),
            validation=None if d.validation is None else ValidationOut(**d.validation),
            alarms=[AlarmOut.of(a) for a in d.alarms],
            leases=[LeaseOut.of(v) for v in d.leases],
            events=[EventOut.of(e, d.view.name) for e in d.events],
            collections=[CollectionOut(**c) for c in d.collections],
            evidence=[
                EvidenceOut(**{**e, "kind": str(e["kind"]), "source": e.get("source")})
                for e in d.evidence
            ],
            facts=f.model_dump(mode="json") if f else None,
            remediations=list(d.remediations),
            usable_gpus=d.usable_gpus,
            unusable_gpus=list(d.unusable_gpus),
            reclaim_due=d.reclaim_due,
        )


# --- baselines, pools, drift --------------------------------------------------------------


class BaselineOut(Schema):
    name: str
    status: str
    purpose: str
    pools: list[str]
    spec: dict[str, Any] = Field(description="Every pinned field of the baseline.")
    os_image_url: str | None = Field(
        None, description="Not a pin: the OS image gpufleet reimage --baseline inserts."
    )

    @classmethod
    def of(cls, b: Baseline, pools: list[str]) -> BaselineOut:
        """From ``domain.spec.Baseline`` and the pools pointing at it."""
        spec = b.model_dump(mode="json", exclude={"name", "status", "purpose", "os_image_url"})
        return cls(name=b.name, status=str(b.status), purpose=b.purpose, pools=pools, spec=spec,
                   os_image_url=b.os_image_url)


class PoolOut(Schema):
    name: str
    baseline: str | None
    hosts: int


class DriftItemOut(Mirror["DriftItem"]):
    field: str
    expected: str
    actual: str | None


class DriftSummaryOut(Mirror["DriftSummary"]):
    field: str
    actual: str | None
    expected: str
    hosts: list[str]


class DriftOut(Mirror["DriftReport"]):
    by_host: dict[str, list[DriftItemOut]]
    summary: list[DriftSummaryOut]
    baselines: dict[str, str] = Field(description="host -> the baseline it was compared with")
    no_baseline: list[str]
    no_facts: list[str]
    pools: list[dict[str, Any]] = Field(
        default_factory=list,
        description="issue 26: each pool with a baseline: pool, baseline, hosts, matching, "
        "on_other (other baseline -> hosts), fields (field, expected, matching, others), drifts",
    )

    @field_validator("pools", mode="before")
    @classmethod
    def _pools(cls, pools: list[object]) -> list[object]:
        """A pool's comparison (``domain.drift.PoolDrift``) as its JSON object, and whether
        it drifts."""
        from gpufleet.domain.drift import PoolDrift

        return [
            dataclasses.asdict(p) | {"drifts": p.drifts} if isinstance(p, PoolDrift) else p
            for p in pools
        ]


# --- leases -------------------------------------------------------------------------------


class AllocateIn(Schema):
    """A lease request: ``gpus`` or ``hosts``, what they must be, for whom and how long."""

    gpus: int | None = Field(None, ge=1)
    hosts: int | None = Field(None, ge=1)
    model: str | None = None
    min_gpu_memory: str | None = Field(None, description="Per GPU, e.g. 80G.")
    fabric: str | None = Field(None, description="ib, roce or none.")
    profile: str | None = None
    cuda: str | None = Field(None, description="CUDA MAJOR.MINOR the workload was built for.")
    nvl_domain: bool = Field(False, description="Keep the lease inside one NVLink domain.")
    selector: str | None = None
    owner: str = Field(min_length=1, max_length=128)
    purpose: str = Field(min_length=1)
    duration: str | None = Field(None, description="e.g. 72h or 7d.", alias="for")
    until: InTime | None = None
    start: InTime | None = Field(None, description="Reserve from this time; default now.")
    users: list[str] | None = Field(
        None, description="The lessee's login users; reclaim checks their processes, crontabs."
    )
    account: str | None = Field(
        None, max_length=64, description="Slurm account (project): its reservation admits "
        "that account's jobs (Accounts=)."
    )

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class RefusalOut(Schema):
    reason: str
    counts: dict[str, int]
    held: list[dict[str, Any]]
    missing_gpus: int | None


class AllocationOut(Schema):
    granted: bool
    lease: LeaseOut | None
    refusal: RefusalOut | None
    warnings: list[str]


class RenewIn(Schema):
    duration: str | None = Field(None, description="Add this to the end, e.g. 24h.", alias="for")
    until: InTime | None = Field(None, description="New end (UTC unless zoned).")
    shorten: bool = Field(False, description="Allow an until before the current end.")
    owner: str | None = Field(None, description="Refuse (409) unless this is the lease's owner.")

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class ReleaseIn(Schema):
    reason: str = "released by its owner"
    owner: str | None = Field(None, description="Refuse (409) unless this is the lease's owner.")


class ReleasedOut(Schema):
    lease: LeaseOut
    reclaiming: list[str]
    reclaim: str | None
    note: str | None
    warnings: list[str]


# --- capacity -----------------------------------------------------------------------------


class CapacityRow(Schema):
    vendor: str = Field(description="nvidia, huawei, amd (issue 15); unknown: not collected")
    model: str
    pool: str
    profile: str
    free: int
    allocated: int
    reserved: int
    quarantined: int
    maintenance: int
    other: int


class BackOut(Schema):
    host: str
    state: str
    gpus: int
    eta: Time


class CapacityOut(Schema):
    at: Time
    rows: list[CapacityRow]
    totals: dict[str, int]
    back: list[BackOut]
    domains: list[dict[str, Any]] = Field(
        default_factory=list, description="Per NVLink domain: hosts, gpus, free, restricted.")
    largest_domain_block: int = Field(0, description="Most free GPUs in one NVLink domain.")


class HeldOut(Schema):
    host: str
    state: str
    gpus: int
    until: Time | None


class FreesOut(Schema):
    at: Time
    gpus: int


class CapacityCheckOut(Mirror["CapacityCheck"]):
    ok: bool
    requested: int
    headroom: float
    needed: int
    allocatable: int
    missing: int
    model: str | None
    profile: str | None
    message: str
    held: list[HeldOut]
    cuda: str | None = None
    frees: list[FreesOut]
    k8s: dict[str, Any] | None = None  # issue 26: capacity check --k8s
