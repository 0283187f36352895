"""The multi-node NVLink fabric decision table (GB200/GB300 NVL72 racks; issue 27 item 3) and
the rack facts derived from one host's GPUs. Pure: facts in, verdicts out, no clock.

One GPU (:func:`gpu_verdict`), in this order, the first row that matches decides:

====================================================  =============  ======================
fabric as ``nvidia-smi -q`` reports it                outcome        reason
====================================================  =============  ======================
GPU in an error state (lost, requires reset)          fails          ``gpu_error``
no fabric / state N/A (not supported)                 not a member   ``not_supported``
``Not Started`` / ``In Progress`` within boot grace   pending        ``not_ready``
``Not Started`` / ``In Progress`` after it (or the    fails          ``not_ready``
host's settle time unknown: fail closed)
any other state but ``Completed``                     fails          ``state``
``Completed``, status not ``Success`` (e.g.           fails          ``status``
``Insufficient Resources``)
``Completed``, clusterUuid all-zero or absent         not a member   ``no_cluster``
health ``Unhealthy``, a route / access-timeout flag   fails, rack    ``unhealthy``
true, or an incorrect configuration                   scoped
non-zero clusterUuid, cliqueId 0 or absent            fails          ``no_partition``
health ``Limited Capacity`` / bandwidth ``Degraded``  restricted     ``degraded``
otherwise                                             ok             ``ok``
====================================================  =============  ======================

"Not a member" is a fact, not a fault (a B200/H100 HGX: single-node NVSwitch). A host
(:func:`host_fabric`) takes its GPUs' worst outcome; GPUs of one host that disagree on
clusterUuid or cliqueId fail it (``fabric_split_host``). Its derived values: rack id = the
chassis serial, NVLink domain = the clusterUuid (None when not a member), partition =
``<clusterUuid>.<cliqueId>`` (GPU Feature Discovery's ``nvidia.com/gpu.clique`` format),
tray position = (slot number, tray index, host id).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from gpufleet.domain.facts import Gpu, HostFacts

#: Seconds after boot / driver load during which a fabric still registering is pending,
#: not failed (the fabric manager trains the NVLink fabric after the driver loads).
DEFAULT_BOOT_GRACE_S = 600.0

_ZERO_UUID = "00000000-0000-0000-0000-000000000000"
_NOT_READY = frozenset({"not started", "in progress"})


class FabricOutcome(StrEnum):
    """What the fabric lets a GPU / host do, best first (the order :func:`worst` uses)."""

    OK = "ok"
    NOT_MEMBER = "not_member"
    RESTRICTED = "restricted"
    PENDING = "pending"
    FAILS = "fails"


_RANK = {o: i for i, o in enumerate(FabricOutcome)}
#: Outcomes whose GPU messages a host's message repeats (the others are quiet facts).
_TOLD = frozenset({FabricOutcome.RESTRICTED, FabricOutcome.PENDING, FabricOutcome.FAILS})


@dataclass(frozen=True, slots=True)
class FabricVerdict:
    """One GPU's row of the table: its outcome, the row's ``reason`` code, a message and
    whether the fault concerns the whole rack (one rack-scoped finding, not one per host)."""

    outcome: FabricOutcome
    reason: str
    message: str
    rack_scoped: bool = False


@dataclass(frozen=True, slots=True, order=True)
class TrayPosition:
    """Where a host sits in its rack: (slot number, tray index, host id); sorts in slot
    order. A value the driver does not report is None."""

    slot: int | None
    tray_index: int | None
    host_id: int | None


@dataclass(frozen=True, slots=True)
class HostFabric:
    """One host's fabric: the worst GPU verdict (a split host fails), each GPU's verdict by
    index, and the rack facts derived from the GPUs (None where not reported or not agreed)."""

    outcome: FabricOutcome
    reasons: tuple[str, ...]
    message: str
    rack_scoped: bool
    split: bool
    gpus: tuple[tuple[int, FabricVerdict], ...]
    rack_id: str | None
    nvl_domain: str | None
    partition: str | None
    tray: TrayPosition | None

    @property
    def member(self) -> bool:
        """True when the host's GPUs are in a multi-node NVLink domain."""
        return self.nvl_domain is not None


def is_zero_uuid(value: str | None) -> bool:
    """True for an absent or all-zero clusterUuid (not in a fabric cluster)."""
    return value is None or value.strip().lower() == _ZERO_UUID


def _no_partition(clique_id: str | None) -> bool:
    return clique_id is None or clique_id.strip() in ("", "0")


def _health_faults(gpu: Gpu) -> list[str]:
    f = gpu.fabric
    if f is None:
        return []
    found: list[str] = []
    if (f.health_summary or "").lower() == "unhealthy":
        found.append("health Unhealthy")
    for flag in ("route_unhealthy", "route_recovery_in_progress", "access_timeout_recovery"):
        if getattr(f, flag) is True:
            found.append(f"{flag} True")
    if f.incorrect_configuration is not None:
        found.append(f"incorrect configuration {f.incorrect_configuration!r}")
    return found


def gpu_verdict(
    gpu: Gpu, settled_s: float | None = None, grace_s: float = DEFAULT_BOOT_GRACE_S
) -> FabricVerdict:
    """The decision table (module docstring) for one GPU. ``settled_s``: seconds since the
    later of boot and driver load (None: unknown, so a fabric still registering fails)."""
    where = f"GPU {gpu.index}"
    if gpu.error is not None:
        return FabricVerdict(FabricOutcome.FAILS, "gpu_error", f"{where}: {gpu.error}")
    f = gpu.fabric
    if f is None or f.state is None:
        return FabricVerdict(FabricOutcome.NOT_MEMBER, "not_supported", f"{where}: no fabric")
    state = f.state.strip()
    if state.lower() in _NOT_READY:
        if settled_s is not None and settled_s < grace_s:
            msg = f"{where}: fabric {state} {settled_s:.0f} s after boot (grace {grace_s:.0f} s)"
            return FabricVerdict(FabricOutcome.PENDING, "not_ready", msg)
        after = "" if settled_s is None else f" {settled_s:.0f} s after boot"
        return FabricVerdict(FabricOutcome.FAILS, "not_ready", f"{where}: fabric {state}{after}")
    if state.lower() != "completed":
        return FabricVerdict(FabricOutcome.FAILS, "state", f"{where}: fabric state {state!r}")
    if f.status is not None and f.status.strip().lower() != "success":
        msg = f"{where}: fabric Completed with status {f.status!r}"
        return FabricVerdict(FabricOutcome.FAILS, "status", msg)
    if is_zero_uuid(f.cluster_uuid):
        msg = f"{where}: not in a multi-node NVLink domain (clusterUuid zero)"
        return FabricVerdict(FabricOutcome.NOT_MEMBER, "no_cluster", msg)
    faults = _health_faults(gpu)
    if faults:
        msg = f"{where}: fabric {', '.join(faults)}"
        return FabricVerdict(FabricOutcome.FAILS, "unhealthy", msg, rack_scoped=True)
    if _no_partition(f.clique_id):
        msg = f"{where}: clusterUuid {f.cluster_uuid} but cliqueId {f.clique_id or 'absent'}"
        return FabricVerdict(FabricOutcome.FAILS, "no_partition", msg + " (no partition)")
    summary = (f.health_summary or "").lower()
    if summary == "limited capacity" or (f.bandwidth or "").lower() == "degraded":
        msg = f"{where}: fabric {f.health_summary or '?'}, bandwidth {f.bandwidth or '?'}"
        return FabricVerdict(FabricOutcome.RESTRICTED, "degraded", msg)
    return FabricVerdict(FabricOutcome.OK, "ok", f"{where}: fabric healthy")


def worst(outcomes: Iterable[FabricOutcome]) -> FabricOutcome:
    """The worst of ``outcomes`` (``not_member`` when there are none)."""
    return max(outcomes, key=_RANK.__getitem__, default=FabricOutcome.NOT_MEMBER)


def _agreed(values: Sequence[object]) -> object | None:
    distinct = set(values)
    return distinct.pop() if len(distinct) == 1 else None


def partition_id(cluster_uuid: str | None, clique_id: str | None) -> str | None:
    """``<clusterUuid>.<cliqueId>`` for a member GPU with a partition, else None."""
    if is_zero_uuid(cluster_uuid) or _no_partition(clique_id):
        return None
    return f"{(cluster_uuid or '').strip()}.{(clique_id or '').strip()}"


def host_fabric(
    facts: HostFacts, settled_s: float | None = None, grace_s: float = DEFAULT_BOOT_GRACE_S
) -> HostFabric:
    """The host's fabric: the decision table on every GPU, the split-host rule and the
    derived rack facts (module docstring)."""
    gpus = facts.gpus
    verdicts = tuple((g.index, gpu_verdict(g, settled_s, grace_s)) for g in gpus)
    fabrics = [g.fabric for g in gpus if g.fabric is not None and g.fabric.state is not None]
    uuids = sorted({(f.cluster_uuid or "").strip().lower() for f in fabrics})
    cliques = sorted({(f.clique_id or "").strip() for f in fabrics})
    split = len(uuids) > 1 or len(cliques) > 1
    outcome = worst(v.outcome for _, v in verdicts)
    deciding = [v for _, v in verdicts if v.outcome is outcome]
    reasons = sorted({v.reason for v in deciding})
    messages = [v.message for v in deciding if v.outcome in _TOLD]
    if split:
        outcome = FabricOutcome.FAILS
        reasons = ["fabric_split_host", *(r for r in reasons if r != "ok")]
        messages.insert(0, f"GPUs disagree: clusterUuid {uuids}, cliqueId {cliques}")
    platforms = [g.platform for g in gpus if g.platform is not None]
    serials = [p.chassis_serial for p in platforms if p.chassis_serial]
    positions = [TrayPosition(p.slot_number, p.tray_index, p.host_id) for p in platforms]
    tray = _agreed(positions)
    domain = None if split or not uuids or is_zero_uuid(uuids[0]) else uuids[0]
    partition = None
    if domain is not None and not split and fabrics:
        partition = partition_id(fabrics[0].cluster_uuid, fabrics[0].clique_id)
    rack = _agreed(serials)
    if not isinstance(rack, str) or not isinstance(tray, TrayPosition):
        tray = None  # a tray position means something inside a rack only (not on an HGX)
    return HostFabric(
        outcome=outcome,
        reasons=tuple(reasons),
        message="; ".join(messages) or _quiet_message(outcome, len(gpus)),
        rack_scoped=any(v.rack_scoped for _, v in verdicts),
        split=split,
        gpus=verdicts,
        rack_id=rack if isinstance(rack, str) else None,
        nvl_domain=domain,
        partition=partition,
        tray=tray,
    )


def _quiet_message(outcome: FabricOutcome, count: int) -> str:
    if outcome is FabricOutcome.OK:
        return f"multi-node NVLink fabric healthy on {count} GPUs"
    return "not in a multi-node NVLink domain" if count else "no GPUs reported"


def fabric_conditions(gpu: Gpu) -> frozenset[str]:
    """The GPU's :data:`~gpufleet.domain.samples.FABRIC_CONDITIONS` for the inspection rules
    (whose ``grace`` after boot keeps a fabric still registering from firing): failing,
    rack-scoped, restricted; none for a healthy member or a GPU in no NVLink domain."""
    if gpu.error is not None:
        return frozenset()  # the probe reports the error state itself (gpu_error_state)
    v = gpu_verdict(gpu)
    if v.outcome is FabricOutcome.FAILS:
        return frozenset({"nvl_fabric_failed", "nvl_fabric_rack"} if v.rack_scoped
                         else {"nvl_fabric_failed"})
    if v.outcome is FabricOutcome.RESTRICTED:
        return frozenset({"nvl_fabric_restricted"})
    return frozenset()
