"""GPU-level health in the store: the pool's health policy, and a verdict's unusable GPUs
written on the host (``usable_gpus`` is what placement, capacity and labels count).

The decision is the domain's (:func:`gpufleet.domain.gpu_health.evaluate_gpus`); validation
and collection call :func:`judge` and :func:`record_unusable` inside their own transaction.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.domain.checks import ActiveEvidence
from gpufleet.domain.events import EventKind
from gpufleet.domain.facts import HostFacts
from gpufleet.domain.gpu_health import (
    GpuFaultPolicy,
    GpuVerdict,
    HealthPolicy,
    HolderPolicy,
    evaluate_gpus,
)
from gpufleet.domain.roles import role_of
from gpufleet.domain.spec import Baseline, ExpectedSpec
from gpufleet.service.core.fleet import Fleet, record_event
from gpufleet.service.core.policies import Policies
from gpufleet.store.repo import no_pool
from gpufleet.store.tables import Host, PartEvent, Pool

_FAULT_WORDS = {
    GpuFaultPolicy.PARTIAL: "keeps a partial host",
    GpuFaultPolicy.HOST: "takes the host out of service",
}


def pool_health_policy(s: Session, pool: str | None) -> HealthPolicy:
    """The health policy of ``pool`` (defaults when none is set or the host has no pool)."""
    if pool is None:
        return HealthPolicy()
    raw = s.scalar(select(Pool.health_policy).where(Pool.name == pool))
    return HealthPolicy.from_json(raw, where=f"pool {pool} health policy")


def set_pool_health_policy(
    fleet: Fleet,
    pool: str,
    *,
    gpu_fault: str | None = None,
    holders: str | None = None,
    fallback_reboot: bool | None = None,
    auto_remediate: list[str] | None = None,
) -> HealthPolicy:
    """Change what is given of the pool's health policy; the rest stays (an event records it)."""
    with fleet.db.session() as s:
        row = s.scalar(select(Pool).where(Pool.name == pool).with_for_update())
        if row is None:
            raise no_pool(s, pool)
        cur = HealthPolicy.from_json(row.health_policy, where=f"pool {pool} health policy")
        raw: dict[str, Any] = cur.as_json()
        if gpu_fault is not None:
            raw["gpu_fault"] = gpu_fault
        if holders is not None:
            raw["holders"] = holders
        if fallback_reboot is not None:
            raw["fallback_reboot"] = fallback_reboot
        if auto_remediate is not None:
            raw["auto_remediate"] = auto_remediate
        policy = HealthPolicy.from_json(raw, where=f"pool {pool} health policy")
        row.health_policy = policy.as_json()
        record_event(
            s,
            fleet,
            EventKind.GPU_HEALTH,
            f"pool {pool}: a GPU fault {_FAULT_WORDS[policy.gpu_fault]}; "
            f"GPU holders: {policy.holders.value}"
            + ("" if policy.holders is HolderPolicy.REFUSE else " (stopped)")
            + f"; reboot when a reset fails: {'yes' if policy.fallback_reboot else 'no'}",
            data={"pool": pool, **policy.as_json()},
        )
        return policy


def judge(
    s: Session,
    host: Host,
    facts: HostFacts,
    baseline: Baseline | None,
    policies: Policies,
    now: datetime,
    *,
    evidence: ActiveEvidence | None = None,
) -> GpuVerdict:
    """The host's verdict under its pool's GPU fault policy."""
    return evaluate_gpus(
        facts,
        ExpectedSpec.model_validate(host.expected),
        baseline,
        policies.profiles,
        policies.xid,
        now,
        gpu_fault=pool_health_policy(s, host.pool).gpu_fault,
        # a cpu/storage host is judged by its role's profiles only (no GPU check)
        role=role_of(host.role).value,
        evidence=evidence,
        catalogues=policies.catalogues,
    )


def unusable_changed(host: Host, verdict: GpuVerdict) -> bool:
    """The verdict names other unusable GPUs than the host carries now."""
    had = sorted((u.get("index"), u.get("pci_bus_id")) for u in host.unusable_gpus or [])
    now = sorted((u.index, u.pci_bus_id) for u in verdict.unusable)
    return had != now


def _failed_elsewhere(s: Session, serial: str, host_id: int) -> list[str]:
    """Other hosts where the card with ``serial`` has a parts-history entry (a repeat
    offender that moved servers)."""
    rows = s.scalars(
        select(PartEvent.host_name)
        .where(PartEvent.serial == serial, PartEvent.host_id != host_id)
        .distinct()
    )
    return sorted(h for h in rows if h)


def record_unusable(s: Session, fleet: Fleet, host: Host, verdict: GpuVerdict) -> None:
    """Write the verdict's usable count and unusable GPUs on the host; a GPU newly marked
    unusable gets an audit event and, by serial, a parts-history entry."""
    if not unusable_changed(host, verdict):
        host.usable_gpus = verdict.usable_gpus
        return
    before = {(u.get("index"), u.get("pci_bus_id")) for u in host.unusable_gpus or []}
    host.unusable_gpus = [u.as_json() for u in verdict.unusable] or None
    host.usable_gpus = verdict.usable_gpus
    for u in verdict.unusable:
        if (u.index, u.pci_bus_id) in before:
            continue
        which = f"GPU {u.index}" if u.index is not None else f"GPU at {u.pci_bus_id}"
        before_on = _failed_elsewhere(s, u.serial, host.id) if u.serial else []
        again = (
            f"; this card (serial {u.serial}) failed before on {', '.join(before_on)}"
            if before_on
            else ""
        )
        record_event(
            s,
            fleet,
            EventKind.GPU_HEALTH,
            f"{which} unusable: {u.reason}; {verdict.usable_gpus} GPUs usable{again}",
            host=host,
            data={**u.as_json(), "usable_gpus": verdict.usable_gpus, "failed_before_on": before_on},
        )
        if u.serial:
            s.add(
                PartEvent(
                    serial=u.serial,
                    at=fleet.now(),
                    host_id=host.id,
                    host_name=host.name,
                    gpu_index=u.index,
                    kind="unusable",
                    message=u.reason,
                    data=u.as_json(),
                )
            )
    if not verdict.unusable:
        record_event(
            s,
            fleet,
            EventKind.GPU_HEALTH,
            "every GPU usable again",
            host=host,
            data={"usable_gpus": None},
        )
