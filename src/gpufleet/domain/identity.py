"""One machine, one host: the identifiers that say two hosts are the same machine.

GPU UUIDs are burnt into each board (nvidia-smi ``uuid``); serials are not used because
boards and captures often report them blank, ``N/A`` or all zeros. The SMBIOS system serial
and UUID (in-band DMI, and the BMC's) are compared by the BMC identity cross-check; the
placeholders many boards ship with (``To Be Filled By O.E.M.``, the
``03000200-0400-0500-0006-000700080009`` UUID of unprogrammed AMI boards) identify nothing.
Pure functions.
"""

from __future__ import annotations

from gpufleet.domain.facts import HostFacts

_BLANK = {"", "N/A", "[N/A]", "NONE", "UNKNOWN"}
#: Placeholders boards leave in their SMBIOS serial / UUID (upper case).
_SYSTEM_PLACEHOLDERS = {
    "TO BE FILLED BY O.E.M.",
    "DEFAULT STRING",
    "NOT SPECIFIED",
    "NOT APPLICABLE",
    "SYSTEM SERIAL NUMBER",
    "0123456789",
    "123456789",
    "03000200-0400-0500-0006-000700080009",
    "FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF",
}


def usable_id(value: str | None) -> str | None:
    """The identifier normalised for comparison, or None when it identifies nothing."""
    if value is None:
        return None
    v = value.strip().upper()
    return None if v in _BLANK or set(v) <= {"0", "-"} else v


def usable_system_id(value: str | None) -> str | None:
    """A system serial or UUID (DMI or BMC) normalised, None when blank or a placeholder."""
    v = usable_id(value)
    return None if v is None or v in _SYSTEM_PLACEHOLDERS else v


def _swapped_uuid(v: str) -> str | None:
    """The UUID with its first three fields byte-swapped (SMBIOS before 2.6 / some BMCs
    store them little-endian): the same machine printed the other way round."""
    parts = v.split("-")
    if [len(p) for p in parts] != [8, 4, 4, 4, 12]:
        return None

    def swap(p: str) -> str:
        return "".join(reversed([p[i : i + 2] for i in range(0, len(p), 2)]))

    return "-".join([swap(parts[0]), swap(parts[1]), swap(parts[2]), parts[3], parts[4]])


def same_system_uuid(a: str | None, b: str | None) -> bool | None:
    """Do two system UUIDs name one machine? None when either is unknown or a placeholder;
    equal also when one is the other with the SMBIOS byte order of its first fields."""
    ua, ub = usable_system_id(a), usable_system_id(b)
    if ua is None or ub is None:
        return None
    return ua == ub or _swapped_uuid(ua) == ub


def machine_ids(facts: HostFacts) -> set[str]:
    """GPU UUIDs of the host (normalised); empty when none was reported."""
    return {u for g in facts.gpus if (u := usable_id(g.uuid))}


def system_uuid(facts: HostFacts) -> str | None:
    """The DMI system UUID the host's OS reported (normalised), None when not collected (not
    root) or a placeholder: the second "one machine" identifier, for hosts without GPUs or
    whose GPUs were swapped."""
    return usable_system_id(facts.dmi.uuid) if facts.dmi is not None else None


def duplicate_reason(other: str, shared: list[str], what: str = "GPU UUIDs") -> str:
    """Status reason for the later-enrolled host of a pair that is one machine (``what``:
    the kind of identifier shared, ``GPU UUIDs`` or ``system UUID``)."""
    shown = ", ".join(shared[:2]) + (f" (+{len(shared) - 2} more)" if len(shared) > 2 else "")
    return (
        f"same machine as host {other} (same {what}: {shown}); not counted twice: "
        f"remove one of the two names"
    )
