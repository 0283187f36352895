"""The audit-log and collection vocabulary: what kind of event was recorded, how a
collection attempt ended.

Every row of the ``events`` table carries an :class:`EventKind`; the store refuses any other
string. Lifecycle *events* (what moves a host) are :class:`gpufleet.domain.states.Event`.
"""

from __future__ import annotations

from enum import StrEnum


class EventKind(StrEnum):
    """What an audit-log row records (``gpufleet events --kind``)."""

    TRANSITION = "transition"
    """A lifecycle event was applied (self-transitions included); ``data`` has from/to/event."""

    ENROLLED = "enrolled"
    """A host was added (inventory, or ``collect --local``)."""

    UPDATED = "updated"
    """A host's inventory record changed; ``data`` has before/after."""

    CHANGE_DETECTED = "change-detected"
    """A collection found a hardware/software change against the previous snapshot."""

    CHANGE_DECLARED = "change-declared"
    """An operator declared a change (driver upgrade, reimage, swap)."""

    ALARM = "alarm"
    """Something an operator must look at (a changed SSH host key)."""

    HOST_KEY_PINNED = "host-key-pinned"
    """The host's SSH key was pinned on first use (or matched the operator's fingerprint)."""

    HOST_KEY_REKEYED = "host-key-rekeyed"
    """An operator accepted a new SSH host key (``hosts rekey``); ``data`` has the old
    fingerprint, the expected one (None: the next collection pins on first use) and why."""

    HOST_REMOVED = "host-removed"
    """A host was removed (``hosts remove``); the event keeps its name and last state (the
    host's earlier events stay, their host_id cleared)."""

    EVIDENCE = "evidence"
    """An active-test result (DCGM, NCCL, gpu-burn) was stored for a host."""

    BASELINE = "baseline"
    """A baseline was saved."""

    POOL = "pool"
    """A pool's baseline was set or changed."""

    PRUNED = "pruned"
    """Old fact snapshots were removed by ``gpufleet prune``."""


class CollectionOutcome(StrEnum):
    """Per-host result of one collection attempt."""

    OK = "ok"
    UNREACHABLE = "unreachable"
    AUTH_FAILED = "auth failed"
    HOST_KEY_CHANGED = "host key changed"
    TIMEOUT = "timeout"
    BAD_OUTPUT = "bad output"
    ERROR = "error"
