"""One machine, one host: the identifiers that say two hosts are the same machine.

GPU UUIDs are burnt into each board (nvidia-smi ``uuid``); serials are not used because
boards and captures often report them blank, ``N/A`` or all zeros. Pure functions.
"""

from __future__ import annotations

from gpufleet.domain.facts import HostFacts

_BLANK = {"", "N/A", "[N/A]", "NONE", "UNKNOWN"}


def usable_id(value: str | None) -> str | None:
    """The identifier normalised for comparison, or None when it identifies nothing."""
    if value is None:
        return None
    v = value.strip().upper()
    return None if v in _BLANK or set(v) <= {"0", "-"} else v


def machine_ids(facts: HostFacts) -> set[str]:
    """GPU UUIDs of the host (normalised); empty when none was reported."""
    return {u for g in facts.gpus if (u := usable_id(g.uuid))}


def duplicate_reason(other: str, shared: list[str]) -> str:
    """Status reason for the later-enrolled host of a pair that is one machine."""
    shown = ", ".join(shared[:2]) + (f" (+{len(shared) - 2} more)" if len(shared) > 2 else "")
    return (
        f"same machine as host {other} (same GPU UUIDs: {shown}); not counted twice: "
        f"remove one of the two names"
    )
