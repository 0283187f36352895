"""Accelerators per vendor and model for the summary and capacity (issue 15): a mixed fleet
side by side.

NVIDIA GPUs are counted from the snapshot's own columns (``gpu_count``, ``gpu_model``: no
facts decoded). ``gpu_count`` counts every vendor's accelerators while the snapshot's GPU rows
are nvidia-smi's, so a snapshot counting more accelerators than it has GPU rows carries
another vendor's (an Ascend or AMD host, or a host with NVIDIA GPUs beside them): only those
hosts have their facts decoded (a batch at a time,
:func:`~gpufleet.domain.accelerators.inventories_of`), found by one aggregate query, so an
NVIDIA fleet costs nothing more and the decoding is bounded by the other vendors' hosts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpufleet.domain.accelerator_exports import model_counts
from gpufleet.domain.accelerators import Vendor, inventories_of
from gpufleet.store.repo import execute_read, latest_facts, read_columns_only
from gpufleet.store.tables import FactSnapshot, GpuRow, Host

#: (vendor, model, count) of one host's accelerators of one model.
Group = tuple[str, str, int]


def accelerators_from_facts(s: Session, host_ids: Iterable[int]) -> dict[int, list[Group]]:
    """Host id -> all its accelerators per (vendor, model), NVIDIA's included, read from its
    latest facts, for the hosts whose latest snapshot counts accelerators beside nvidia-smi's
    GPUs (``gpu_count`` above its GPU rows). The other hosts (NVIDIA only, no snapshot) are
    absent: their snapshot columns say it all, and their facts are not decoded.

    One read of every host's latest snapshot id and ``gpu_count`` from the snapshot index
    (:func:`~gpufleet.store.repo.read_columns_only`; the GPU rows counted on theirs), kept for
    ``host_ids`` (issue 8: ``capacity`` asked in batches of 1,000 ids, and on SQLite each
    snapshot row read walked its facts document: ~1 s at 12,500 hosts)."""
    wanted = set(host_ids)
    if not wanted:
        return {}
    stmt = (
        select(Host.id, FactSnapshot.id)
        .join(FactSnapshot, FactSnapshot.id == Host.latest_snapshot_id)
        .where(_BESIDE)
    )
    snaps = {
        sid: hid for hid, sid in execute_read(s, read_columns_only(stmt), stmt) if hid in wanted
    }
    return _decoded(s, snaps)


#: Per host (a column of a read of hosts and their latest snapshots): its latest snapshot
#: counts accelerators beside nvidia-smi's GPUs (``gpu_count`` above its GPU rows, counted
#: on the GPU rows' snapshot index): only these hosts' facts are decoded
#: (:func:`accelerators_of_snapshots`). NULL before the first collection.
_BESIDE = (
    FactSnapshot.gpu_count
    > select(func.count())
    .select_from(GpuRow)
    .where(GpuRow.snapshot_id == FactSnapshot.id)
    .scalar_subquery()
)
BESIDE_GPUS = _BESIDE.label("beside_gpus")


def accelerators_of_snapshots(s: Session, snaps: Mapping[int, int]) -> dict[int, list[Group]]:
    """:func:`accelerators_from_facts` for the snapshots the caller found with
    :data:`BESIDE_GPUS` (snapshot id -> host id; issue 8: the summary reads it with the
    hosts' other columns, so no snapshot row is read again)."""
    return _decoded(s, snaps)


def _decoded(s: Session, snaps: Mapping[int, int]) -> dict[int, list[Group]]:
    """Host id -> its accelerators per (vendor, model) from the facts of ``snaps``
    (snapshot id -> host id), decoded a batch at a time."""
    out: dict[int, list[Group]] = {}
    for sid, facts in latest_facts(s, sorted(snaps)):
        groups = [
            (vendor, model, n)
            for (vendor, model), n in sorted(model_counts(inventories_of(facts)).items())
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
    return [{"vendor": v, "model": m, **r} for (v, m), r in sorted(rows.items())]


def accelerator_noun(vendor: str) -> str:
    """What a vendor's accelerators are called in counts
    (:func:`gpufleet.service.hosts.vendor_exports.accelerator_noun`)."""
    from gpufleet.service.hosts.vendor_exports import accelerator_noun as noun

    return noun(vendor)


def accelerator_brand(vendor: str, noun: str) -> str:
    """The name a vendor's accelerators go by before their noun (``Ascend`` NPUs, ``Hygon``
    DCUs, ``AMD Instinct`` GPUs): its plugin's ``description`` without the noun; the vendor's
    name where no installed plugin describes it."""
    from gpufleet.domain.vendors import plugin

    try:
        described = plugin(vendor).description
    except (ValueError, KeyError):  # no installed plugin names it
        return vendor
    return described.removesuffix(f" {noun}") if described.endswith(f" {noun}") else vendor


def vendor_totals(
    counts: Sequence[tuple[str, str, int, bool]],
) -> list[dict[str, object]]:
    """Per vendor: its noun (:func:`accelerator_noun`) and brand (:func:`accelerator_brand`),
    accelerators and those on available hosts, from the same ``(vendor, model, count,
    available)`` as :func:`vendor_rows`; the most accelerators first, then vendor order."""
    totals: dict[str, list[int]] = {}
    for vendor, _model, n, available in counts:
        t = totals.setdefault(vendor, [0, 0])
        t[0] += n
        t[1] += n if available else 0
    out: list[dict[str, object]] = []
    for v, (n, a) in sorted(totals.items(), key=lambda kv: (-kv[1][0], kv[0])):
        noun = accelerator_noun(v)
        out.append({"vendor": v, "noun": noun, "brand": accelerator_brand(v, noun),
                    "accelerators": n, "available": a})
    return out


def fleet_noun(per_vendor: Sequence[Mapping[str, object]]) -> str:
    """What a fleet's accelerators are, from :func:`vendor_totals`: their one noun when every
    vendor's is the same (``GPUs`` for NVIDIA and AMD; ``GPUs`` too for an empty fleet),
    ``accelerators`` when the fleet mixes GPUs and NPUs."""
    nouns = {str(v["noun"]) for v in per_vendor}
    if not nouns:
        return "GPUs"
    return nouns.pop() if len(nouns) == 1 else "accelerators"


def fleet_counts_line(
    hosts: int, total: int, available: int, per_vendor: Sequence[Mapping[str, object]]
) -> str:
    """The summary's first line. A fleet of one kind reads as an NVIDIA fleet always did:
    ``32 hosts, 256 GPUs, 200 GPUs available`` (``NPUs`` for an Ascend fleet). A fleet mixing
    kinds counts accelerators, then each vendor's, the most first (issue 28): ``32 hosts, 214
    accelerators (184 NVIDIA GPUs, 16 Ascend NPUs, 8 Hygon DCUs, ...), 200 available``."""
    noun = fleet_noun(per_vendor)
    if noun != "accelerators":
        return f"{hosts} hosts, {total} {noun}, {available} {noun} available"
    parts = ", ".join(f"{n} {brand} {kind}" for brand, kind, n in vendor_parts(per_vendor))
    return f"{hosts} hosts, {total} accelerators ({parts}), {available} available"


def vendor_parts(per_vendor: Sequence[Mapping[str, object]]) -> list[tuple[str, str, int]]:
    """(brand, noun, accelerators) per vendor of :func:`vendor_totals`, in its order (a row
    without a brand, from an older server's JSON: the vendor's name)."""
    out = []
    for v in per_vendor:
        n = v["accelerators"]
        brand = v.get("brand") or v["vendor"]
        out.append((str(brand), str(v["noun"]), n if isinstance(n, int) else 0))
    return out
