"""Accelerators per vendor and model for the summary and capacity (issue 15): a mixed fleet
side by side.

NVIDIA GPUs are counted from the snapshot's own columns (``gpu_count``, ``gpu_model``: no
facts decoded); a host whose snapshot lists no NVIDIA GPU (no per-GPU row: those are
nvidia-smi's; ``gpu_count`` counts every vendor's accelerators) has its facts decoded (a
batch at a time) for the other vendors' accelerators
(:func:`~gpufleet.domain.accelerators.inventories_of`),
so an NVIDIA fleet costs nothing more and the decoding is bounded by the other vendors' hosts.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sqlalchemy import exists, select
from sqlalchemy.orm import Session

from gpufleet.domain.accelerator_exports import model_counts
from gpufleet.domain.accelerators import Vendor, inventories_of
from gpufleet.store.repo import latest_facts
from gpufleet.store.tables import GpuRow, Host

#: (vendor, model, count) of one host's accelerators of one model.
Group = tuple[str, str, int]


def other_vendor_accelerators(s: Session, host_ids: Iterable[int]) -> dict[int, list[Group]]:
    """Host id -> its accelerators of vendors other than NVIDIA, per (vendor, model), read
    from its latest facts (hosts without a snapshot or without such accelerators: absent).
    Only hosts whose latest snapshot has no NVIDIA GPU row are decoded."""
    ids = sorted(set(host_ids))
    snaps: dict[int, int] = {}
    for i in range(0, len(ids), 1000):
        snaps.update(
            (sid, hid)
            for hid, sid in s.execute(
                select(Host.id, Host.latest_snapshot_id).where(
                    Host.id.in_(ids[i : i + 1000]),
                    ~exists().where(GpuRow.snapshot_id == Host.latest_snapshot_id),
                )
            )
            if sid is not None
        )
    out: dict[int, list[Group]] = {}
    for sid, facts in latest_facts(s, list(snaps)):
        groups = [
            (vendor, model, n)
            for (vendor, model), n in model_counts(inventories_of(facts)).items()
            if vendor != Vendor.NVIDIA.value
        ]
        if groups:
            out[snaps[sid]] = groups
    return out


def display_model(vendor: str, model: str) -> str:
    """The model as the tables show it beside NVIDIA's: ``huawei 910B3``, ``amd Instinct
    MI100`` (NVIDIA's without its ``NVIDIA`` prefix, as before; ``unknown`` for a host not
    collected yet)."""
    if vendor in (Vendor.NVIDIA.value, "unknown"):
        return model.removeprefix("NVIDIA ")
    return f"{vendor} {model}"


def vendor_rows(
    counts: Sequence[tuple[str, str, int, bool]],
) -> list[dict[str, object]]:
    """Per (vendor, model): hosts, accelerators and those on available hosts, from one
    ``(vendor, model, count, available)`` per host and model; vendor then model order."""
    rows: dict[tuple[str, str], dict[str, int]] = {}
    for vendor, model, n, available in counts:
        r = rows.setdefault((vendor, model), {"hosts": 0, "accelerators": 0, "available": 0})
        r["hosts"] += 1
        r["accelerators"] += n
        if available:
            r["available"] += n
    return [
        {"vendor": v, "model": m, **r} for (v, m), r in sorted(rows.items())
    ]
