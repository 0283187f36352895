"""Which accelerator vendors an inspection sweep asks each host about (issue 24 item 3;
:mod:`gpufleet.collect.inspect_vendors`).

The vendors come from the host's latest collected facts: those of the records vendor plugins
reported (``accelerators``) and those whose tool could not vouch for what ``lspci`` listed
(``accelerator_errors``: asked again, so a tool still failing is a failure to observe);
NVIDIA as well when ``nvidia-smi`` reported GPUs. A host with neither (only NVIDIA, or never
collected) is left out: it gets the probe of old, NVIDIA's.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.domain.vendors import is_registered
from gpufleet.store.tables import FactSnapshot, Host

NVIDIA = "nvidia"


def host_vendors(s: Session, host_ids: Sequence[int]) -> dict[int, tuple[str, ...]]:
    """The hosts with accelerators of another vendor than NVIDIA: their vendors, sorted."""
    if not host_ids:
        return {}
    facts = FactSnapshot.facts
    found: dict[int, set[str]] = {}
    for hid, accs, errors in s.execute(
        select(Host.id, facts["accelerators"], facts["accelerator_errors"])
        .join(FactSnapshot, FactSnapshot.id == Host.latest_snapshot_id)
        .where(Host.id.in_(host_ids))
    ):
        names = (
            {a.get("vendor") for a in accs if isinstance(a, dict)}
            if isinstance(accs, list)
            else set()
        )
        names |= set(errors if isinstance(errors, dict) else ())
        vendors = {v for v in names if isinstance(v, str) and v != NVIDIA and is_registered(v)}
        if vendors:
            found[hid] = vendors
    if not found:
        return {}
    # NVIDIA GPUs too (a mixed host): read only for the hosts of other vendors
    for hid, gpus in s.execute(
        select(Host.id, facts["nvidia_smi"]["gpus"])
        .join(FactSnapshot, FactSnapshot.id == Host.latest_snapshot_id)
        .where(Host.id.in_(list(found)))
    ):
        if isinstance(gpus, list) and gpus:
            found[hid].add(NVIDIA)
    return {hid: tuple(sorted(v)) for hid, v in found.items()}
