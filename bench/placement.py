"""Placement latency for a 64-GPU request on a synthetic 10,000-host (80,000-GPU) fleet, on
SQLite and PostgreSQL, against a reference query measured in the same run.

    .venv/bin/python bench/placement.py [--hosts 10000] [--runs 200] [--pg URL]

The fleet is written straight into a fresh database (bench data, not a lifecycle story):
hosts ``available`` with 8 GPUs each (H100), validated for training-multinode and inference,
32 hosts per rack, InfiniBand; one fact snapshot and 8 GPU rows per host; every tenth rack
has one host allocated under a lease (so the overlap query has rows to read), the last rack
one host reserved from +24h, and every 50th host an open alarm.

Timed, ``--runs`` times each, after 10 warm-up runs:

* **placement**: what ``gpufleet allocate --gpus 64 --model H100 --profile
  training-multinode`` does before it writes, in one transaction
  (``service.candidates.find_placement``): read the per-rack summary
  (``store.placement_index``, ~300 rows), count the matching hosts per (rack, fabric, GPU
  count), plan the blocks placement needs (``domain.placement.plan_blocks``), read only those
  racks' hosts with every filter (state, model, profile, no open alarm, no overlapping lease
  or reservation) and place them (``domain.placement.place``). The winning rack holds a
  future reservation in the window, so the summary over-counts it and placement re-plans on
  the rack's real count (the path a stale summary takes).
* **exact counts**: the same placement without the summary: one ``GROUP BY`` over every
  candidate host (the path taken when the summary is missing); it must choose the same hosts.
* **reference**: a plain indexed ``SELECT id, name, rack FROM hosts JOIN fact_snapshots ...
  WHERE state = 'available'`` of the same candidate rows, fetched whole, in one transaction.

With ``--racks N`` (issue 27) the fleet is instead N GB200 NVL72 racks (18 trays of 4 GPUs,
one NVLink domain each; every 10th rack has one tray allocated, the first rack restricted by a
rack incident, every 7th rack one tray alarmed) and the request is ``allocate --gpus 72
--nvl-domain``: placement then groups the candidates by domain (one ``GROUP BY``) and reads
only the winning domain's trays; it must land on one whole, unrestricted domain.

Prints wall p50 / p99 in milliseconds, the ratios to the reference, the client process's CPU
milliseconds (p50 / p99; SQLite runs in it, PostgreSQL's server does not) and the load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import create_engine, insert, select, text

from gpufleet.domain.placement import Request
from gpufleet.domain.states import HostState
from gpufleet.service.allocation.candidates import candidate_filters, find_placement, place_exact
from gpufleet.store.db import Database
from gpufleet.store.placement_index import rebuild
from gpufleet.store.tables import (
    Alarm,
    FactSnapshot,
    GpuRow,
    Host,
    Lease,
    LeaseHost,
)

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
REQ = Request(gpus=64, model="H100", profile="training-multinode")
REQ_NVL = Request(gpus=72, nvl_domain=True)


def build(db: Database, n: int) -> None:
    hosts, snaps, gpus, alarms = [], [], [], []
    for i in range(1, n + 1):
        rack = f"r{(i - 1) // 32:04d}"
        allocated = (i - 1) // 32 % 10 == 0 and (i - 1) % 32 == 0
        hosts.append(
            {
                "id": i,
                "name": f"gpu-{i:05d}",
                "address": f"10.{i // 65536}.{i // 256 % 256}.{i % 256}",
                "port": 22,
                "groups": ["h100"],
                "vars": {},
                "pool": "train",
                "rack": rack,
                "expected": {"fabric": "ib", "gpu_count": 8},
                "state": HostState.ALLOCATED if allocated else HostState.AVAILABLE,
                "state_entered_at": NOW,
                "health": "ok",
                "state_version": 1,
                "profiles": ["training-multinode", "inference"],
                "created_at": NOW,
                "updated_at": NOW,
            }
        )
        snaps.append(
            {
                "id": i,
                "host_id": i,
                "collected_at": NOW,
                "facts": {},
                "driver": "550.90.07",
                "gpu_count": 8,
                "gpu_model": "NVIDIA H100 80GB HBM3",
            }
        )
        gpus += [
            {
                "snapshot_id": i,
                "host_id": i,
                "index": g,
                "uuid": f"GPU-{i:08x}-{g:04x}",
                "memory_total_mib": 81559,
            }
            for g in range(8)
        ]
        if i % 50 == 0:
            alarms.append(
                {
                    "host_id": i,
                    "kind": "other",
                    "severity": "warning",
                    "opened_at": NOW,
                    "message": "bench",
                    "data": {},
                }
            )
    with db.engine.begin() as c:
        c.execute(insert(Host), hosts)
        c.execute(insert(FactSnapshot), snaps)
        c.execute(text("UPDATE hosts SET latest_snapshot_id = id"))
        for k in range(0, len(gpus), 20000):
            c.execute(insert(GpuRow), gpus[k : k + 20000])
        c.execute(insert(Alarm), alarms)
        held = [h["id"] for h in hosts if h["state"] == HostState.ALLOCATED]
        c.execute(
            insert(Lease),
            [
                {
                    "id": 1,
                    "owner": "bench",
                    "purpose": "bench",
                    "actor": "bench",
                    "state": "active",
                    "request": {},
                    "created_at": NOW,
                    "starts_at": NOW,
                    "ends_at": NOW + timedelta(days=1),
                },
                {
                    "id": 2,
                    "owner": "bench",
                    "purpose": "reservation in the winning rack",
                    "actor": "bench",
                    "state": "reserved",
                    "request": {},
                    "created_at": NOW,
                    "starts_at": NOW + timedelta(days=1),
                    "ends_at": NOW + timedelta(days=2),
                },
            ],
        )
        c.execute(
            insert(LeaseHost),
            [
                {
                    "lease_id": 2,
                    "host_id": n - 1,
                    "host_name": f"gpu-{n - 1:05d}",
                    "gpus": 8,
                    "gpu_uuids": [],
                    "starts_at": NOW + timedelta(days=1),
                    "ends_at": NOW + timedelta(days=2),
                    "holding": True,
                }
            ],
        )
        c.execute(
            insert(LeaseHost),
            [
                {
                    "lease_id": 1,
                    "host_id": h,
                    "host_name": f"gpu-{h:05d}",
                    "gpus": 8,
                    "gpu_uuids": [],
                    "starts_at": NOW,
                    "ends_at": NOW + timedelta(days=1),
                    "holding": True,
                }
                for h in held
            ],
        )
    # Written straight to the tables (no ORM session): build placement's per-rack summary as
    # the first allocation would (store/placement_index.py); not timed.
    with db.session() as s:
        rebuild(s)
    if db.dialect == "postgresql":
        with db.engine.begin() as c:
            c.execute(text("ANALYZE"))


def build_racks(db: Database, racks: int) -> None:
    """``racks`` NVL72 racks (module docstring), written straight into the tables."""
    hosts, snaps, alarms, held = [], [], [], []
    for i in range(1, racks * 18 + 1):
        r, t = divmod(i - 1, 18)
        domain = f"{r:08x}-0000-0000-0000-{r:012x}"
        allocated = r % 10 == 5 and t == 0
        hosts.append({
            "id": i, "name": f"nvl{r + 1:03d}-t{t + 1:02d}", "address": f"10.{r}.0.{t + 1}",
            "port": 22, "groups": [], "vars": {}, "pool": "train", "rack": f"nvl{r + 1:03d}",
            "expected": {}, "state": HostState.ALLOCATED if allocated else HostState.AVAILABLE,
            "state_entered_at": NOW, "health": "ok", "state_version": 1,
            "profiles": ["training-nvl-domain"], "created_at": NOW, "updated_at": NOW,
            "nvl_rack": f"1820{r:09d}", "nvl_domain": domain,
            "nvl_restricted": "rack incident (bench)" if r == 0 else None,
        })
        snaps.append({"id": i, "host_id": i, "collected_at": NOW, "facts": {},
                      "driver": "580.173.02", "gpu_count": 4, "gpu_model": "NVIDIA GB200"})
        if r % 7 == 3 and t == 5:
            alarms.append({"host_id": i, "kind": "other", "severity": "warning",
                           "opened_at": NOW, "message": "bench", "data": {}})
        if allocated:
            held.append(i)
    with db.engine.begin() as c:
        c.execute(insert(Host), hosts)
        c.execute(insert(FactSnapshot), snaps)
        c.execute(text("UPDATE hosts SET latest_snapshot_id = id"))
        c.execute(insert(Alarm), alarms)
        c.execute(insert(Lease), [{"id": 1, "owner": "bench", "purpose": "bench",
                                   "actor": "bench", "state": "active", "request": {},
                                   "created_at": NOW, "starts_at": NOW,
                                   "ends_at": NOW + timedelta(days=1)}])
        c.execute(insert(LeaseHost), [
            {"lease_id": 1, "host_id": h, "host_name": hosts[h - 1]["name"], "gpus": 4,
             "gpu_uuids": [], "starts_at": NOW, "ends_at": NOW + timedelta(days=1),
             "holding": True} for h in held])
    with db.session() as s:
        rebuild(s)
    if db.dialect == "postgresql":
        with db.engine.begin() as c:
            c.execute(text("ANALYZE"))


def measure_racks(db: Database, runs: int) -> tuple[Timings, tuple[str, ...]]:
    chosen: list[tuple[str, ...]] = []
    window = (NOW, NOW + timedelta(hours=72))

    def placement() -> None:
        with db.session() as s:
            p, _, _ = find_placement(s, REQ_NVL, None, *window, now=NOW)
            assert p is not None and p.gpus == 72 and p.nvl_domain is not None
            assert len({h.split("-")[0] for h in p.hosts}) == 1  # one rack, whole
            chosen.append(p.hosts)

    def reference() -> None:
        with db.session() as s:
            rows = s.execute(
                select(Host.id, Host.name, Host.nvl_domain)
                .join(FactSnapshot, FactSnapshot.id == Host.latest_snapshot_id)
                .where(Host.state == HostState.AVAILABLE)
            ).all()
            assert rows

    return {"reference": timed(reference, runs), "placement": timed(placement, runs)}, chosen[-1]


def timed(fn: Callable[[], object], runs: int) -> tuple[list[float], list[float]]:
    """Wall and this process's CPU milliseconds of each run (CPU: less sensitive to other
    load on the machine; PostgreSQL's server time is not in it)."""
    for _ in range(10):
        fn()
    wall, cpu = [], []
    for _ in range(runs):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
    return wall, cpu


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(p / 100 * (len(xs) - 1)))]


Timings = dict[str, tuple[list[float], list[float]]]


def measure(db: Database, runs: int) -> tuple[Timings, tuple[str, ...]]:
    chosen: list[tuple[str, ...]] = []
    window = (NOW, NOW + timedelta(hours=72))

    def placement() -> None:
        with db.session() as s:
            p, _, _ = find_placement(s, REQ, None, *window, now=NOW)
            assert p is not None and p.gpus == 64
            chosen.append(p.hosts)

    def exact() -> None:
        with db.session() as s:
            p, _, _ = place_exact(s, REQ, candidate_filters(s, REQ, None, *window, NOW))
            assert p is not None and p.hosts == chosen[-1]

    def reference() -> None:
        with db.session() as s:
            rows = s.execute(
                select(Host.id, Host.name, Host.rack)
                .join(FactSnapshot, FactSnapshot.id == Host.latest_snapshot_id)
                .where(Host.state == HostState.AVAILABLE)
            ).all()
            assert rows

    out = {"reference": timed(reference, runs), "placement": timed(placement, runs)}
    out["exact counts"] = timed(exact, runs)
    return out, chosen[-1]


def report(name: str, t: Timings, hosts: tuple[str, ...]) -> None:
    ref = t["reference"][0]
    r50, r99 = statistics.median(ref), pct(ref, 99)
    print(f"{name}: reference SELECT p50 {r50:6.2f} ms  p99 {r99:6.2f} ms")
    for row in ("placement", "exact counts")[: len(t) - 1]:
        wall, cpu = t[row]
        p50, p99 = statistics.median(wall), pct(wall, 99)
        print(
            f"  {row:13s} p50 {p50:7.2f} ms  p99 {p99:7.2f} ms | ratio to reference p50 "
            f"{p50 / r50:4.2f}x  p99 {p99 / r99:4.2f}x | client CPU p50 "
            f"{statistics.median(cpu):6.2f} ms  p99 {pct(cpu, 99):6.2f} ms"
        )
    print(f"  placed {hosts[0]}..{hosts[-1]} ({len(hosts)} hosts); load {os.getloadavg()}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hosts", type=int, default=10000)
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--racks", type=int, default=0,
                    help="NVL72 racks instead (issue 27): allocate --gpus 72 --nvl-domain")
    ap.add_argument(
        "--pg",
        default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres",
        help="an admin URL; a scratch database is created and dropped ('' skips)",
    )
    args = ap.parse_args()
    racks = args.racks
    build_fn = (lambda db: build_racks(db, racks)) if racks else (
        lambda db: build(db, args.hosts))
    measure_fn = measure_racks if racks else measure
    req = REQ_NVL if racks else REQ
    size = f"{racks} NVL72 racks, {racks * 18} trays, {racks * 72} GPUs" if racks else (
        f"{args.hosts} hosts, {args.hosts * 8} GPUs")
    print(f"{size}; request: {req.describe()}; {args.runs} runs each")
    with tempfile.TemporaryDirectory() as tmp:
        db = Database(f"sqlite:///{Path(tmp) / 'bench.db'}")
        db.migrate()
        build_fn(db)
        report("sqlite", *measure_fn(db, args.runs))
        db.dispose()
    if args.pg:
        name = f"gpufleet_bench_{uuid.uuid4().hex[:8]}"
        admin = create_engine(args.pg, isolation_level="AUTOCOMMIT")
        with admin.connect() as c:
            c.execute(text(f'CREATE DATABASE "{name}"'))
        try:
            db = Database(args.pg.rsplit("/", 1)[0] + "/" + name)
            db.migrate()
            build_fn(db)
            report("postgresql", *measure_fn(db, args.runs))
            db.dispose()
        finally:
            with admin.connect() as c:
                c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            admin.dispose()


if __name__ == "__main__":
    main()
