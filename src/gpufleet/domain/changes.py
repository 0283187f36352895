"""Changes between two collections of one host that invalidate its last validation.

Comparisons need both sides: facts a collection failed to get (nvidia-smi error, no ibstat)
are not a change; the checks report those. A GPU or port that *disappeared* shows as a count
change (or a failing check), a *new* identity as a swap.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from gpufleet.domain.drift import os_image_name
from gpufleet.domain.facts import HostFacts


class ChangeKind(StrEnum):
    GPU_SWAP = "gpu_swap"
    DRIVER_UPGRADE = "driver_upgrade"  # any driver change, downgrades included
    REIMAGE = "reimage"
    GPU_COUNT = "gpu_count"
    NIC_SWAP = "nic_swap"


class DeclaredChangeKind(StrEnum):
    """What an operator can declare (``gpufleet change record --kind ...``)."""

    DRIVER_UPGRADE = "driver-upgrade"
    REIMAGE = "reimage"
    GPU_SWAP = "gpu-swap"
    NIC_SWAP = "nic-swap"

    @property
    def change_kind(self) -> ChangeKind:
        return ChangeKind(self.value.replace("-", "_"))


#: Kinds that send a host back to validation (all of them: each can break a checked property).
REVALIDATING_KINDS: frozenset[ChangeKind] = frozenset(ChangeKind)


@dataclass(frozen=True, slots=True)
class Change:
    kind: ChangeKind
    field: str
    before: str | None
    after: str | None

    def describe(self) -> str:
        return f"{self.kind}: {self.field} {self.before or 'unset'} -> {self.after or 'unset'}"


def _gpu_ids(facts: HostFacts) -> set[str]:
    # Serials identify the board; UUIDs are the fallback where serials are blank or "N/A".
    return {
        g.serial if g.serial and g.serial.upper() != "N/A" else g.uuid or f"index:{g.index}"
        for g in facts.gpus
    }


def _joined(values: set[str]) -> str:
    return ",".join(sorted(values))


def detect_changes(previous: HostFacts | None, current: HostFacts) -> list[Change]:
    """Changes from ``previous`` (the facts of the last validation) to ``current``."""
    if previous is None:
        return []
    changes: list[Change] = []
    if previous.nvidia_smi is not None and current.nvidia_smi is not None:
        before, after = previous.driver_version, current.driver_version
        if before and after and before != after:
            changes.append(Change(ChangeKind.DRIVER_UPGRADE, "driver", before, after))
        n_before, n_after = len(previous.gpus), len(current.gpus)
        if n_before != n_after:
            changes.append(Change(ChangeKind.GPU_COUNT, "gpu_count", str(n_before), str(n_after)))
        ids_before, ids_after = _gpu_ids(previous), _gpu_ids(current)
        if ids_after - ids_before:
            changes.append(
                Change(
                    ChangeKind.GPU_SWAP,
                    "gpus",
                    _joined(ids_before - ids_after),
                    _joined(ids_after - ids_before),
                )
            )
    if previous.kernel and current.kernel and previous.kernel != current.kernel:
        changes.append(Change(ChangeKind.REIMAGE, "kernel", previous.kernel, current.kernel))
    os_before, os_after = os_image_name(previous.os), os_image_name(current.os)
    if os_before and os_after and os_before != os_after:
        changes.append(Change(ChangeKind.REIMAGE, "os", os_before, os_after))
    # None (ibstat not collected on one side): nothing to compare, no swap claimed.
    guids_before = {p.port_guid for p in previous.ib_ports or [] if p.port_guid}
    guids_after = {p.port_guid for p in current.ib_ports or [] if p.port_guid}
    if guids_before and guids_after - guids_before:
        changes.append(
            Change(
                ChangeKind.NIC_SWAP,
                "ib_port_guids",
                _joined(guids_before - guids_after),
                _joined(guids_after - guids_before),
            )
        )
    return changes


def needs_revalidation(changes: list[Change]) -> bool:
    return any(c.kind in REVALIDATING_KINDS for c in changes)


#: What a change is called in a reason ("no NCCL result since the driver change on ...");
#: detected kinds use ``_``, declared ones ``-`` (:class:`DeclaredChangeKind`).
_CHANGE_WORDS = {
    ChangeKind.GPU_SWAP: "GPU swap",
    ChangeKind.DRIVER_UPGRADE: "driver change",
    ChangeKind.REIMAGE: "reimage",
    ChangeKind.GPU_COUNT: "GPU count change",
    ChangeKind.NIC_SWAP: "NIC swap",
}


def change_words(kind: object) -> str:
    """``"driver change"`` for ``driver_upgrade`` / ``driver-upgrade``; ``"change"`` for a
    kind this does not know (a campaign's own words)."""
    try:
        return _CHANGE_WORDS[ChangeKind(str(kind).replace("-", "_"))]
    except ValueError:
        return "change"


def since_change(kind: object, day: str) -> str:
    """``"the driver change on 2026-12-01"``: what a result must be newer than."""
    return f"the {change_words(kind)} on {day}"
