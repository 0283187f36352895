"""GPU-level health: a fault on one GPU marks that GPU unusable, and the pool's policy says
whether the host leaves service (``host``, the default) or stays available as a *partial host*
for the profiles its remaining GPUs still satisfy (``partial``).

:func:`evaluate_gpus` wraps :func:`gpufleet.domain.profiles.evaluate`: when the verdict is
*quarantine* and the pool keeps partial hosts, it names the GPUs that carry the hardware faults
(:func:`faulty_gpus`: a GPU in an error state or missing from the driver, volatile uncorrectable
ECC, a row-remap failure, a fatal Xid on the GPU's PCI address), takes them out of the facts
(:func:`without_gpus`) and of the expected count, and judges again. Only a second verdict that no
longer quarantines is kept, so a fault that cannot be pinned on a GPU still quarantines the host
(fail closed). Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from gpufleet.domain.checks import ActiveEvidence
from gpufleet.domain.checks.base import pci_addr
from gpufleet.domain.facts import HostFacts
from gpufleet.domain.health import HARDWARE_FAULTS, Fault, Health
from gpufleet.domain.profiles import Decision, Profile, ValidationOutcome, evaluate
from gpufleet.domain.spec import Baseline, ExpectedSpec
from gpufleet.domain.xid import XidPolicy
from gpufleet.errors import ConfigError

if TYPE_CHECKING:  # device_health -> rules -> preflight -> profiles: a type only
    from gpufleet.domain.device_health import Catalogues


class GpuFaultPolicy(StrEnum):
    """What a fault on one GPU does to its host (pool health policy ``gpu_fault``)."""

    HOST = "host"
    """The host leaves service (quarantine), whatever its other GPUs could still do."""
    PARTIAL = "partial"
    """The GPU is unusable; the host stays available with the others, for the profiles they
    still pass, counted with its usable GPUs only."""


class HolderPolicy(StrEnum):
    """What a GPU reset does about processes holding the GPU (pool health policy ``holders``)."""

    REFUSE = "refuse"
    STOP = "stop"


@dataclass(frozen=True, slots=True)
class HealthPolicy:
    """A pool's health policy (``gpufleet pool health-policy``); defaults when none is set."""

    gpu_fault: GpuFaultPolicy = GpuFaultPolicy.HOST
    holders: HolderPolicy = HolderPolicy.REFUSE
    #: A GPU reset that fails (or does not verify) is followed by a reboot.
    fallback_reboot: bool = True
    #: Rules whose alarm runs the first rung of the ladder (reset-gpu) automatically.
    auto_remediate: tuple[str, ...] = ()

    @classmethod
    def from_json(
        cls, raw: Mapping[str, Any] | None, *, where: str = "health policy"
    ) -> HealthPolicy:
        """From the pool's stored JSON (None: the defaults); a bad value is a ConfigError."""
        if not raw:
            return cls()
        try:
            return cls(
                gpu_fault=GpuFaultPolicy(raw.get("gpu_fault", GpuFaultPolicy.HOST.value)),
                holders=HolderPolicy(raw.get("holders", HolderPolicy.REFUSE.value)),
                fallback_reboot=bool(raw.get("fallback_reboot", True)),
                auto_remediate=tuple(str(r) for r in raw.get("auto_remediate", ())),
            )
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from None

    def as_json(self) -> dict[str, Any]:
        return {
            "gpu_fault": self.gpu_fault.value,
            "holders": self.holders.value,
            "fallback_reboot": self.fallback_reboot,
            "auto_remediate": list(self.auto_remediate),
        }


@dataclass(frozen=True, slots=True)
class UnusableGpu:
    """A GPU validation marked unusable, and why. ``index`` is None for a GPU the driver does
    not see at all (only its PCI address is known)."""

    index: int | None
    pci_bus_id: str | None
    reason: str
    serial: str | None = None
    uuid: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "pci_bus_id": self.pci_bus_id,
            "serial": self.serial,
            "uuid": self.uuid,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class GpuVerdict:
    """The verdict and, for a partial host, the GPUs left out and the usable count."""

    outcome: ValidationOutcome
    unusable: list[UnusableGpu] = field(default_factory=list)
    usable_gpus: int | None = None  # None: every GPU (not a partial host)


def _bus(addr: str | None) -> str | None:
    """``domain:bus:device`` in lspci's 4-digit form, function dropped; Xid lines print
    ``PCI:0000:19:00``, nvidia-smi ``00000000:19:00.0``, lspci ``0000:19:00.0``."""
    if not addr:
        return None
    text = addr.strip().lower().removeprefix("pci:")
    return pci_addr(text).split(".")[0]


def faulty_gpus(facts: HostFacts, policy: XidPolicy) -> tuple[list[UnusableGpu], bool]:
    """The GPUs carrying a hardware fault, and whether every hardware fault in ``facts`` was
    pinned on a GPU (False: something this cannot attribute, e.g. a fatal Xid without a PCI
    address, or nvidia-smi failing for the whole host)."""
    bad: dict[str, UnusableGpu] = {}
    complete = True

    def mark(key: str, u: UnusableGpu) -> None:
        if key in bad:
            old = bad[key]
            bad[key] = UnusableGpu(
                old.index, old.pci_bus_id, f"{old.reason}; {u.reason}", old.serial, old.uuid
            )
        else:
            bad[key] = u

    if facts.nvidia_smi is None or (facts.nvidia_smi_error and not facts.gpus):
        return [], False
    by_bus = {_bus(g.pci_bus_id): g for g in facts.gpus if g.pci_bus_id}
    for g in facts.gpus:
        key = f"gpu{g.index}"

        def one(reason: str, g: Any = g, key: str = key) -> None:
            mark(key, UnusableGpu(g.index, g.pci_bus_id, reason, g.serial, g.uuid))

        if g.error:
            one(f"GPU in error state: {g.error}")
        if g.ecc_volatile and g.ecc_volatile.uncorrectable:
            one(f"{g.ecc_volatile.uncorrectable} uncorrectable ECC errors since driver load")
        if g.remapped_rows and g.remapped_rows.failure:
            one("row remapping failure")
    seen = set(by_bus)
    for d in facts.pci_gpus:
        if _bus(d.address) not in seen:
            mark(
                f"pci{d.address}",
                UnusableGpu(None, d.address, "on the PCI bus, lost by the driver"),
            )
    for e in facts.xids or []:
        if not policy.is_fatal(e.code):
            continue
        gpu = by_bus.get(_bus(e.pci_address))
        if gpu is None:
            complete = False  # a fatal Xid we cannot pin on a GPU
            continue
        mark(
            f"gpu{gpu.index}",
            UnusableGpu(gpu.index, gpu.pci_bus_id, f"fatal Xid {e.code}", gpu.serial, gpu.uuid),
        )
    return sorted(
        bad.values(), key=lambda u: (u.index is None, u.index or 0, u.pci_bus_id or "")
    ), complete


def without_gpus(facts: HostFacts, unusable: list[UnusableGpu]) -> HostFacts:
    """``facts`` as if the ``unusable`` GPUs were not in the machine: left out of nvidia-smi,
    lspci and the Xid lines (by index and PCI address)."""
    indices = {u.index for u in unusable if u.index is not None}
    buses = {_bus(u.pci_bus_id) for u in unusable if u.pci_bus_id}
    update: dict[str, Any] = {}
    if facts.nvidia_smi is not None:
        gpus = [g for g in facts.nvidia_smi.gpus if g.index not in indices]
        update["nvidia_smi"] = facts.nvidia_smi.model_copy(update={"gpus": gpus})
    if facts.pci_devices is not None:
        update["pci_devices"] = [
            d for d in facts.pci_devices if not (d in facts.pci_gpus and _bus(d.address) in buses)
        ]
    if facts.xids is not None:
        update["xids"] = [e for e in facts.xids if _bus(e.pci_address) not in buses]
    return facts.model_copy(update=update)


def evaluate_gpus(
    facts: HostFacts,
    spec: ExpectedSpec,
    baseline: Baseline | None,
    profiles: Mapping[str, Profile],
    policy: XidPolicy,
    now: datetime,
    *,
    gpu_fault: GpuFaultPolicy = GpuFaultPolicy.HOST,
    evidence: ActiveEvidence | None = None,
    hardware_faults: frozenset[Fault] = HARDWARE_FAULTS,
    role: str = "gpu",
    catalogues: Catalogues | None = None,
) -> GpuVerdict:
    """Judge the host as :func:`~gpufleet.domain.profiles.evaluate` does; under the
    ``partial`` policy, a quarantine caused by GPUs that can be named is judged again without
    them (see the module)."""
    outcome = evaluate(
        facts,
        spec,
        baseline,
        profiles,
        policy,
        now,
        evidence=evidence,
        hardware_faults=hardware_faults,
        role=role,
        catalogues=catalogues,
    )
    if outcome.decision is not Decision.QUARANTINE or gpu_fault is not GpuFaultPolicy.PARTIAL:
        return GpuVerdict(outcome)
    unusable, complete = faulty_gpus(facts, policy)
    if not unusable or not complete:
        return GpuVerdict(outcome)
    left = without_gpus(facts, unusable)
    usable = len(left.gpus)
    if usable == 0:
        return GpuVerdict(outcome)
    masked_spec = spec
    if spec.gpu_count is not None:
        masked_spec = spec.model_copy(update={"gpu_count": max(spec.gpu_count - len(unusable), 0)})
    described = [
        f"GPU {u.index if u.index is not None else u.pci_bus_id} unusable: {u.reason}"
        for u in unusable
    ]
    again = evaluate(
        left,
        masked_spec,
        baseline,
        profiles,
        policy,
        now,
        evidence=evidence,
        hardware_faults=hardware_faults,
        unusable=described,
        role=role,
        catalogues=catalogues,
    )
    if again.decision is Decision.QUARANTINE:
        return GpuVerdict(outcome)
    marked = "; ".join(described)
    reasons = [marked, *again.reasons]
    health = Health.WARNING if again.health is Health.OK else again.health
    return GpuVerdict(
        again.model_copy(update={"reasons": reasons, "health": health}),
        unusable=unusable,
        usable_gpus=usable,
    )
