"""Inspection samples in the store: rows of ``gpu_samples`` / ``host_samples`` from parsed
probe answers, bulk inserts (``COPY`` on PostgreSQL), reading a host's samples back for the
rules, and the hourly roll-up of samples past the retention (``sample_rollups``)."""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, insert, select, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from gpufleet.collect.inspect import ProbeResult
from gpufleet.domain.samples import (
    DiskSample,
    GpuSample,
    HostSample,
    PortSample,
    ProbeFailure,
    XidSeen,
)
from gpufleet.service.core.fleet import Fleet
from gpufleet.store.tables import GpuSampleRow, Host, HostSampleRow, SampleRollup

#: Clock-event reasons as bits of ``gpu_samples.reasons``.
REASON_BITS: dict[str, int] = {
    "hw_slowdown": 1,
    "hw_thermal_slowdown": 2,
    "hw_power_brake_slowdown": 4,
    "sw_thermal_slowdown": 8,
    "sw_power_cap": 16,
    "sync_boost": 32,
    # multi-node NVLink fabric conditions (domain/samples.FABRIC_CONDITIONS; issue 27)
    "nvl_fabric_failed": 64, "nvl_fabric_rack": 128, "nvl_fabric_restricted": 256,
}

# ------------------------------------------------------------------------------ storage


def gpu_row(host_id: int, at: datetime, g: GpuSample) -> dict[str, Any]:
    """One ``gpu_samples`` row."""
    return {
        "host_id": host_id,
        "at": at,
        "gpu_index": g.index,
        "uuid": g.uuid,
        "model": g.model,
        "pci_bus_id": g.pci_bus_id,
        "temperature_c": g.temperature_c,
        "power_w": g.power_w,
        "power_limit_w": g.power_limit_w,
        "sm_clock_mhz": g.sm_clock_mhz,
        "max_sm_clock_mhz": g.max_sm_clock_mhz,
        "mem_clock_mhz": g.mem_clock_mhz,
        "util_gpu_pct": g.utilization_gpu_pct,
        "util_mem_pct": g.utilization_memory_pct,
        "memory_used_mib": g.memory_used_mib,
        "fan_pct": g.fan_pct,
        "ecc_vol_corr": g.ecc_volatile_correctable,
        "ecc_vol_unc": g.ecc_volatile_uncorrectable,
        "ecc_agg_corr": g.ecc_aggregate_correctable,
        "ecc_agg_unc": g.ecc_aggregate_uncorrectable,
        "retired_sbe": g.retired_single_bit,
        "retired_dbe": g.retired_double_bit,
        "retired_pending": g.retired_pending,
        "remap_corr": g.remap_correctable,
        "remap_unc": g.remap_uncorrectable,
        "remap_pending": g.remap_pending,
        "remap_failure": g.remap_failure,
        "pcie_gen": g.pcie_gen,
        "pcie_gen_max": g.pcie_gen_max,
        "pcie_width": g.pcie_width,
        "pcie_width_max": g.pcie_width_max,
        "reasons": sum(REASON_BITS[r] for r in g.reasons if r in REASON_BITS),
    }


def host_row(host_id: int, at: datetime, res: ProbeResult) -> dict[str, Any]:
    """One ``host_samples`` row."""
    smp = res.sample
    return {
        "host_id": host_id,
        "at": at,
        "gpus_ok": smp.gpus is not None,
        "gpu_count": len(smp.gpus or ()),
        "uptime_s": smp.uptime_s,
        "driver_age_s": smp.driver_age_s,
        "nvlink": smp.nvlink,
        "xids": [
            {
                "code": x.code,
                "pci": x.pci,
                "time": x.time.isoformat() if x.time else None,
                "message": x.message[:300],
            }
            for x in smp.xids
        ],
        "ports": [{"name": p.name, "state": p.state, **dict(p.counters)} for p in smp.ports],
        "disks": [
            {"path": d.path, "size_kib": d.size_kib, "used_kib": d.used_kib} for d in smp.disks
        ],
        "problems": list(res.problems),
        "kmsg_cursor": res.kmsg_cursor,
        "boot_id": smp.boot_id,
        "failures": [{"kind": f.kind, "detail": f.detail[:500]} for f in smp.failures],
    }


_GPU_COLUMNS = [c.name for c in GpuSampleRow.__table__.columns]
_HOST_COLUMNS = [c.name for c in HostSampleRow.__table__.columns]
_JSON_COLUMNS = frozenset({"xids", "ports", "disks", "problems", "failures"})


def bulk_insert(
    s: Session, table: Any, columns: Sequence[str], rows: Sequence[dict[str, Any]]
) -> None:
    """Bulk insert: ``COPY ... FROM STDIN`` on PostgreSQL (rows adapted by psycopg's C
    dumpers; about twice as fast as building the text in Python, ten times ``executemany``),
    ``executemany`` elsewhere."""
    if not rows:
        return
    if s.connection().dialect.name != "postgresql":
        s.execute(insert(table), list(rows))
        return
    copy_rows(s, table, columns, ([r[c] for c in columns] for r in rows))


#: ``[]`` as JSON, dumped once (most hosts' Xid and problem lists are empty every sweep).
_EMPTY_JSON: Any = None


def _jsonb(value: Any) -> Any:
    from psycopg.types.json import Jsonb

    global _EMPTY_JSON
    if value == []:
        if _EMPTY_JSON is None:
            _EMPTY_JSON = Jsonb([], dumps=lambda _: "[]")
        return _EMPTY_JSON
    return Jsonb(value)


def copy_rows(
    s: Session,
    table: Any,
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    *,
    binary: bool = False,
) -> None:
    """``COPY table (columns) FROM STDIN`` of value rows in ``columns`` order (PostgreSQL);
    JSON columns are wrapped as ``jsonb`` here. ``binary``: the binary COPY format with the
    columns' types read from the catalog (half the client CPU of the text format); a row
    the binary dumpers refuse (a value of another type than its column) makes it fall back
    to the text format, rolled back to a savepoint first, so a sample is never lost to it."""
    if not binary:
        _copy(s, table.__tablename__, columns, rows, None)
        return
    rows = list(rows)
    types = _pg_types(s, table.__tablename__, columns)
    try:
        with s.begin_nested():
            _copy(s, table.__tablename__, columns, rows, types)
    except (TypeError, ValueError, OverflowError, struct.error, DBAPIError) as exc:
        import psycopg

        if isinstance(exc, DBAPIError) and not isinstance(exc.orig, psycopg.DataError):
            raise
        _copy(s, table.__tablename__, columns, rows, None)


def _copy(
    s: Session,
    name: str,
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    types: Sequence[str] | None,
) -> None:
    raw: Any = s.connection().connection.driver_connection
    json_at = [i for i, c in enumerate(columns) if c in _JSON_COLUMNS]
    fmt = " (FORMAT BINARY)" if types is not None else ""
    with raw.cursor() as cur, cur.copy(f"COPY {name} ({', '.join(columns)}) FROM STDIN{fmt}") as cp:
        if types is not None:
            cp.set_types(list(types))
        write = cp.write_row
        if not json_at:
            for values in rows:
                write(values)
            return
        for values in rows:
            values = list(values)
            for i in json_at:
                values[i] = _jsonb(values[i])
            write(values)


#: Each COPY target's column types by table and columns (the schema is this gpufleet's).
_PG_TYPES: dict[tuple[str, tuple[str, ...]], list[str]] = {}


def _pg_types(s: Session, name: str, columns: Sequence[str]) -> list[str]:
    key = (name, tuple(columns))
    if key not in _PG_TYPES:
        query = text(
            "SELECT attname, format_type(atttypid, NULL) FROM pg_attribute "
            "WHERE attrelid = CAST(:t AS regclass) AND attnum > 0 AND NOT attisdropped"
        )
        got = {str(a): str(b) for a, b in s.execute(query, {"t": name})}
        _PG_TYPES[key] = [str(got[c]) for c in columns]
    return _PG_TYPES[key]


def _gpu_values(host_id: int, at: datetime, g: GpuSample) -> tuple[Any, ...]:
    """One ``gpu_samples`` row as values in ``_GPU_COLUMNS`` order (the COPY path: no dict
    per sample). Kept equal to :func:`gpu_row` by a test."""
    return (
        host_id,
        at,
        g.index,
        g.uuid,
        g.model,
        g.pci_bus_id,
        g.temperature_c,
        g.power_w,
        g.power_limit_w,
        g.sm_clock_mhz,
        g.max_sm_clock_mhz,
        g.mem_clock_mhz,
        g.utilization_gpu_pct,
        g.utilization_memory_pct,
        g.memory_used_mib,
        g.fan_pct,
        g.ecc_volatile_correctable,
        g.ecc_volatile_uncorrectable,
        g.ecc_aggregate_correctable,
        g.ecc_aggregate_uncorrectable,
        g.retired_single_bit,
        g.retired_double_bit,
        g.retired_pending,
        g.remap_correctable,
        g.remap_uncorrectable,
        g.remap_pending,
        g.remap_failure,
        g.pcie_gen,
        g.pcie_gen_max,
        g.pcie_width,
        g.pcie_width_max,
        sum(REASON_BITS[r] for r in g.reasons if r in REASON_BITS),
    )


_GPU_VALUE_ORDER = list(gpu_row(0, datetime.min, GpuSample(index=0)).keys())


def store_samples(
    fleet: Fleet, at: datetime, parsed: dict[int, ProbeResult], *, token: str | None = None
) -> set[int]:
    """Store the sweep's samples of the hosts whose claim (``token``) still holds, in one
    transaction; the ids stored."""
    if not parsed:
        return set()
    with fleet.db.session() as s:
        ids = list(parsed)
        # one parameter per query, not one per host (10,000 bound ids cost a quarter second)
        if token is not None:
            claimed = set(s.scalars(select(Host.id).where(Host.claim_token == token)))
            ids = [h for h in ids if h in claimed]
        # a sample at this very instant already stored (two sweeps within one clock tick, or a
        # frozen test clock) is kept; the later one is discarded, never a unique-key error
        dup = set(s.scalars(select(HostSampleRow.host_id).where(HostSampleRow.at == at)))
        ids = [h for h in ids if h not in dup]
        bulk_insert(s, HostSampleRow, _HOST_COLUMNS, [host_row(h, at, parsed[h]) for h in ids])
        if s.connection().dialect.name == "postgresql":
            copy_rows(
                s,
                GpuSampleRow,
                _GPU_VALUE_ORDER,
                (_gpu_values(h, at, g) for h in ids for g in parsed[h].sample.gpus or ()),
                binary=True,
            )
        else:
            bulk_insert(
                s,
                GpuSampleRow,
                _GPU_COLUMNS,
                [gpu_row(h, at, g) for h in ids for g in parsed[h].sample.gpus or ()],
            )
    return set(ids)


def _sample_of(row: HostSampleRow, gpus: Iterable[GpuSampleRow]) -> HostSample:
    return HostSample(
        at=row.at,
        gpus=tuple(_gpu_of(g) for g in sorted(gpus, key=lambda g: g.gpu_index))
        if row.gpus_ok
        else None,
        xids=tuple(
            XidSeen(
                int(x["code"]),
                x.get("pci"),
                datetime.fromisoformat(x["time"]) if x.get("time") else None,
                x.get("message", ""),
            )
            for x in row.xids
        ),
        ports=tuple(
            PortSample(
                p["name"],
                p.get("state"),
                {k: int(v) for k, v in p.items() if k not in ("name", "state")},
            )
            for p in row.ports
        ),
        disks=tuple(DiskSample(d["path"], d["size_kib"], d["used_kib"]) for d in row.disks),
        uptime_s=row.uptime_s,
        driver_age_s=row.driver_age_s,
        nvlink=row.nvlink,
        failures=tuple(ProbeFailure(f["kind"], f.get("detail", "")) for f in row.failures or ()),
        boot_id=row.boot_id,
    )


def _gpu_of(r: GpuSampleRow) -> GpuSample:
    return GpuSample(
        index=r.gpu_index,
        uuid=r.uuid,
        model=r.model,
        temperature_c=r.temperature_c,
        power_w=r.power_w,
        power_limit_w=r.power_limit_w,
        sm_clock_mhz=r.sm_clock_mhz,
        max_sm_clock_mhz=r.max_sm_clock_mhz,
        mem_clock_mhz=r.mem_clock_mhz,
        utilization_gpu_pct=r.util_gpu_pct,
        utilization_memory_pct=r.util_mem_pct,
        memory_used_mib=r.memory_used_mib,
        ecc_volatile_correctable=r.ecc_vol_corr,
        ecc_volatile_uncorrectable=r.ecc_vol_unc,
        ecc_aggregate_correctable=r.ecc_agg_corr,
        ecc_aggregate_uncorrectable=r.ecc_agg_unc,
        retired_single_bit=r.retired_sbe,
        retired_double_bit=r.retired_dbe,
        retired_pending=r.retired_pending,
        remap_correctable=r.remap_corr,
        remap_uncorrectable=r.remap_unc,
        remap_pending=r.remap_pending,
        remap_failure=r.remap_failure,
        fan_pct=r.fan_pct,
        pcie_gen=r.pcie_gen,
        pcie_gen_max=r.pcie_gen_max,
        pcie_width=r.pcie_width,
        pcie_width_max=r.pcie_width_max,
        reasons=frozenset(k for k, bit in REASON_BITS.items() if r.reasons & bit),
        pci_bus_id=r.pci_bus_id,
    )


def histories(s: Session, host_ids: Sequence[int], since: datetime) -> dict[int, list[HostSample]]:
    """Each host's samples since ``since``, oldest first."""
    if not host_ids:
        return {}
    gpus: dict[tuple[int, datetime], list[GpuSampleRow]] = {}
    for g in s.scalars(
        select(GpuSampleRow).where(GpuSampleRow.host_id.in_(host_ids), GpuSampleRow.at >= since)
    ):
        gpus.setdefault((g.host_id, g.at), []).append(g)
    out: dict[int, list[HostSample]] = {}
    for h in s.scalars(
        select(HostSampleRow)
        .where(HostSampleRow.host_id.in_(host_ids), HostSampleRow.at >= since)
        .order_by(HostSampleRow.at)
    ):
        out.setdefault(h.host_id, []).append(_sample_of(h, gpus.get((h.host_id, h.at), [])))
    return out


# ------------------------------------------------------------------------------ retention


def roll_up_and_prune(fleet: Fleet, before: datetime | None = None) -> tuple[int, int]:
    """Roll raw GPU samples older than the retention up into hourly rows, then delete them
    (and the host samples of that age). Returns (roll-up rows written, samples deleted)."""
    cutoff = before or fleet.now() - timedelta(hours=fleet.settings.inspect_retention_hours)
    with fleet.db.session() as s:
        rows = s.scalars(select(GpuSampleRow).where(GpuSampleRow.at < cutoff)).all()
        groups: dict[tuple[int, datetime, int], list[GpuSampleRow]] = {}
        for r in rows:
            hour = r.at.replace(minute=0, second=0, microsecond=0)
            groups.setdefault((r.host_id, hour, r.gpu_index), []).append(r)
        for (hid, hour, idx), rs in groups.items():
            existing = s.get(SampleRollup, (hid, hour, idx))
            values = _rollup(rs, existing)
            if existing is None:
                s.add(SampleRollup(host_id=hid, hour=hour, gpu_index=idx, **values))
            else:
                for k, v in values.items():
                    setattr(existing, k, v)
        res = s.execute(delete(GpuSampleRow).where(GpuSampleRow.at < cutoff))
        s.execute(delete(HostSampleRow).where(HostSampleRow.at < cutoff))
        deleted = int(getattr(res, "rowcount", 0) or 0)
    return len(groups), deleted


def _rollup(rs: list[GpuSampleRow], old: SampleRollup | None) -> dict[str, Any]:
    def avg(values: list[float | None], old_avg: float | None, old_n: int) -> float | None:
        vs = [v for v in values if v is not None]
        total = sum(vs) + (old_avg or 0.0) * (old_n if old_avg is not None else 0)
        n = len(vs) + (old_n if old_avg is not None else 0)
        return total / n if n else None

    n_old = old.samples if old else 0
    temps = [r.temperature_c for r in rs if r.temperature_c is not None]
    eccs = [r.ecc_vol_unc for r in rs if r.ecc_vol_unc is not None]
    hw = REASON_BITS["hw_slowdown"] | REASON_BITS["hw_thermal_slowdown"]
    hw |= REASON_BITS["hw_power_brake_slowdown"]
    return {
        "model": rs[0].model,
        "samples": n_old + len(rs),
        "temperature_max": max(
            [*temps, *([old.temperature_max] if old and old.temperature_max is not None else [])],
            default=None,
        ),
        "temperature_avg": avg(
            [r.temperature_c for r in rs], old.temperature_avg if old else None, n_old
        ),
        "power_avg": avg([r.power_w for r in rs], old.power_avg if old else None, n_old),
        "sm_clock_avg": avg([r.sm_clock_mhz for r in rs], old.sm_clock_avg if old else None, n_old),
        "util_avg": avg([r.util_gpu_pct for r in rs], old.util_avg if old else None, n_old),
        "ecc_unc_max": max(
            [*eccs, *([old.ecc_unc_max] if old and old.ecc_unc_max is not None else [])],
            default=None,
        ),
        "throttled": (old.throttled if old else 0) + sum(1 for r in rs if r.reasons & hw),
    }
