"""The REST API under concurrent load on a synthetic 10,000-host fleet on PostgreSQL (issue 12),
with 1 and 2 ``gpufleet serve`` processes, against references measured in the same run.

    .venv/bin/python bench/api_load.py [--hosts 10000] [--concurrency 1,16] [--duration 10]
                                       [--procs 1,2] [--pg ADMIN_URL] [--src OLD_TREE/src]

The fleet is written straight into a scratch PostgreSQL database (created and dropped on the
server ``--pg`` names; bench data, not a lifecycle story): ``--hosts`` hosts of four 8-GPU
models (H100 40%, A100 30%, H200 20%, L40S 10%), mostly ``available`` (70%; the rest
allocated, validating, maintenance, quarantined, enrolled), 32 hosts per rack, three pools;
each host's latest snapshot carries a whole facts document (``gpufleet.testing.make_facts``
with the model's GPU name, ~25 KB of JSON, as a collection stores it), 8 GPU rows and 4 NIC
rows; every 50th host an open alarm, every 4 allocated hosts one lease. A viewer token is created
with ``service.tokens.create_token``.

Then, for each ``--procs`` value, that many real ``gpufleet --db URL serve --port P``
processes are started (``serve`` has no ``--workers``: two processes listen on two ports and
the client sends its requests to them round-robin), and one client process (``httpx``
``AsyncClient``, HTTP/1.1 keep-alive, one connection pool per server) keeps
``--concurrency`` requests in flight (each level in turn) for ``--duration`` seconds per
endpoint (closed loop: each worker sends its next request when the previous one answered, so
at C in flight the latency is about C / throughput), after a warm-up:

* ``health``: ``GET /api/v1/health`` (no token, no database): the HTTP + framework floor;
* ``hosts filtered``: ``GET /api/v1/hosts?model=H100&state=available&limit=100``;
* ``hosts filtered p.20``: the same list's 20th page (``cursor`` from page 19);
* ``host page``: ``GET /api/v1/hosts/{name}`` (facts, GPUs, NICs, labels, events, alarms,
  leases), a different host each request;
* ``capacity check``: ``GET /api/v1/capacity/check?gpus=64&model=H100``.

Printed per endpoint: requests/s, p50 / p99 / max milliseconds, errors (any status but 200,
any transport error), the servers' CPU milliseconds per request (``/proc`` of the server
processes, less sensitive to other load than wall time) and the load average before and
after. Reference measured in the same run, before the HTTP runs: the list's own SQL
(``EXPLAIN``-ed too) run directly through psycopg, one at a time.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import create_engine, insert, text

from gpufleet.domain.states import HostState
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.core.tokens import Role, create_token
from gpufleet.service.hosts.collect import facts_digest
from gpufleet.service.views.hosts import list_query
from gpufleet.store.db import Database
from gpufleet.store.tables import (
    Alarm,
    FactSnapshot,
    GpuRow,
    Host,
    Lease,
    LeaseHost,
    NicRow,
)
from gpufleet.testing import make_facts

GPUFLEET = str(Path(sys.executable).parent / "gpufleet")  # the venv running this
DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
#: (share of the fleet in tenths, GPU product name, GPU memory MiB)
MODELS = (
    (4, "NVIDIA H100 80GB HBM3", 81559),
    (3, "NVIDIA A100-SXM4-80GB", 81920),
    (2, "NVIDIA H200", 143771),
    (1, "NVIDIA L40S", 46068),
)
#: (share in twentieths, state)
STATES = (
    (14, HostState.AVAILABLE),
    (3, HostState.ALLOCATED),
    (1, HostState.VALIDATING),
    (1, HostState.MAINTENANCE),
    (1, HostState.QUARANTINED),
)
LIST = "/api/v1/hosts?model=H100&state=available&limit=100"


def spread(i: int, table: tuple[tuple[int, Any], ...] | tuple[tuple[int, Any, Any], ...]) -> Any:
    """Row ``i``'s entry of a (share, ...) table, interleaved (not in blocks by name)."""
    total = sum(t[0] for t in table)
    k = (i * 7) % total
    for entry in table:
        if k < entry[0]:
            return entry
        k -= entry[0]
    raise AssertionError


def build(db: Database, n: int) -> None:
    """``n`` hosts with their latest snapshot, GPUs, NICs, some alarms and leases."""
    templates = {}
    for _share, product, mem in MODELS:
        doc = make_facts(all_gpus={"product_name": product, "memory_total_mib": mem}).model_dump(
            mode="json"
        )
        templates[product] = (doc, facts_digest(doc))
    hosts, snaps, gpus, nics, alarms, held = [], [], [], [], [], []
    for i in range(1, n + 1):
        name = f"gpu-{i:05d}"
        _s, product, mem = spread(i, MODELS)
        state = spread(i * 3 + 1, STATES)[1] if i % 97 else HostState.ENROLLED
        enrolled = state is HostState.ENROLLED
        hosts.append(
            {
                "id": i,
                "name": name,
                "address": f"10.{i // 65536}.{i // 256 % 256}.{i % 256}",
                "port": 22,
                "groups": [product.split()[1].split("-")[0].lower()],
                "vars": {},
                "pool": ("train", "infer", "research")[i % 3],
                "rack": f"r{(i - 1) // 32:04d}",
                "expected": {"fabric": "ib", "gpu_count": 8},
                "state": state,
                "state_entered_at": NOW,
                "health": "ok",
                "state_version": 1,
                "profiles": [] if enrolled else ["training-multinode", "inference"],
                "last_collected_at": None if enrolled else NOW,
                "last_outcome": None if enrolled else "ok",
                "created_at": NOW,
                "updated_at": NOW,
            }
        )
        if state is HostState.ALLOCATED:
            held.append(i)
        if enrolled:
            continue
        doc, digest = templates[product]
        snaps.append(
            {
                "id": i,
                "host_id": i,
                "collected_at": NOW,
                "facts": {**doc, "hostname": name},
                "driver": "550.90.07",
                "cuda": "12.4",
                "kernel": doc["kernel"],
                "os": doc["os"]["pretty_name"],
                "gpu_count": 8,
                "gpu_model": product,
                "content_hash": digest,
                "gpu_memory_mib": mem,
            }
        )
        gpus += [
            {
                "snapshot_id": i,
                "host_id": i,
                "index": g,
                "uuid": f"GPU-{i:08x}-{g:04x}",
                "serial": f"{i:08d}{g}",
                "product_name": product,
                "memory_total_mib": mem,
            }
            for g in range(8)
        ]
        nics += [
            {
                "snapshot_id": i,
                "host_id": i,
                "ca": f"mlx5_{p}",
                "port": 1,
                "state": "Active",
                "physical_state": "LinkUp",
                "rate_gbps": 400,
                "link_layer": "InfiniBand",
            }
            for p in range(4)
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
        for k in range(0, len(snaps), 500):
            c.execute(insert(FactSnapshot), snaps[k : k + 500])
        c.execute(text("UPDATE hosts SET latest_snapshot_id = id WHERE last_outcome = 'ok'"))
        for k in range(0, len(gpus), 20000):
            c.execute(insert(GpuRow), gpus[k : k + 20000])
        c.execute(insert(NicRow), nics)
        c.execute(insert(Alarm), alarms)
        # one 32-GPU lease per 4 allocated hosts
        groups = [held[k : k + 4] for k in range(0, len(held), 4)]
        c.execute(
            insert(Lease),
            [
                {
                    "id": g + 1,
                    "owner": f"team-{g % 7}",
                    "purpose": "bench",
                    "actor": "bench",
                    "state": "active",
                    "request": {"gpus": 8 * len(ids)},
                    "created_at": NOW,
                    "starts_at": NOW,
                    "ends_at": NOW + timedelta(days=365),
                }
                for g, ids in enumerate(groups)
            ],
        )
        c.execute(
            insert(LeaseHost),
            [
                {
                    "lease_id": g + 1,
                    "host_id": h,
                    "host_name": f"gpu-{h:05d}",
                    "gpus": 8,
                    "gpu_uuids": [f"GPU-{h:08x}-{k:04x}" for k in range(8)],
                    "starts_at": NOW,
                    "ends_at": NOW + timedelta(days=365),
                    "holding": True,
                }
                for g, ids in enumerate(groups)
                for h in ids
            ],
        )
    with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
        c.execute(text("VACUUM ANALYZE"))


def load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(p / 100 * (len(xs) - 1)))] if xs else float("nan")


def reference_sql(db: Database, runs: int) -> tuple[list[float], str]:
    """The filtered list's SQL, compiled as the API runs it, through psycopg directly, one at
    a time: wall ms per run, and its EXPLAIN."""
    import psycopg

    stmt = list_query(None, model="H100", state="available", limit=101)
    sql = str(
        stmt.compile(dialect=db.engine.dialect, compile_kwargs={"literal_binds": True})
    ).replace("%%", "%")  # no parameters are sent: the driver's escaping is not applied
    times = []
    with psycopg.connect(db.url.replace("postgresql+psycopg", "postgresql")) as conn:
        plan = "\n".join(
            r[0] for r in conn.execute("EXPLAIN (ANALYZE, BUFFERS OFF) " + sql).fetchall()
        )
        for k in range(runs + 20):
            t0 = time.perf_counter()
            rows = conn.execute(sql).fetchall()
            conn.commit()
            if k >= 20:
                times.append((time.perf_counter() - t0) * 1000)
            assert len(rows) == 101, len(rows)
    return times, plan


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_ms(pids: list[int]) -> float:
    """User + system CPU milliseconds of ``pids`` (and their reaped children)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += sum(int(f) for f in fields[11:15])
    return total * 1000 / tick


@dataclass
class Servers:
    procs: list[subprocess.Popen[str]]
    bases: list[str]
    logs: list[Path]

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def stop(self) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def start_servers(url: str, n: int, home: Path, src: str | None = None) -> Servers:
    """``n`` ``gpufleet serve`` processes on free ports (``src``: run that source tree)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    env |= {"GPUFLEET_HOME": str(home), "GPUFLEET_ACTOR": "bench"}
    if src:
        env["PYTHONPATH"] = src
    procs, bases, logs = [], [], []
    for k in range(n):
        port = free_port()
        # stderr to a file (a pipe nobody reads fills up and blocks the server's logging)
        logs.append(home.parent / f"serve-{n}-{k}.log")
        with logs[-1].open("w") as log:
            procs.append(
                subprocess.Popen(
                    [GPUFLEET, "--db", url, "serve", "--port", str(port)],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=log,
                    text=True,
                )
            )
        bases.append(f"http://127.0.0.1:{port}")
    servers = Servers(procs, bases, logs)
    deadline = time.monotonic() + 120
    for p, base, log_path in zip(procs, bases, logs, strict=True):
        while True:
            try:
                if httpx.get(f"{base}/api/v1/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if p.poll() is not None or time.monotonic() > deadline:
                servers.stop()
                raise SystemExit(f"gpufleet serve did not start: {log_path.read_text()}")
            time.sleep(0.2)
    return servers


@dataclass
class Result:
    endpoint: str
    procs: int
    concurrency: int
    requests: int
    errors: int
    seconds: float
    wall_ms: list[float]
    server_cpu_ms: float
    client_cpu_ms: float
    load_before: str
    load_after: str


async def drive(
    bases: list[str],
    paths: Callable[[int], str],
    headers: dict[str, str],
    concurrency: int,
    duration: float,
    warmup: float,
) -> tuple[int, int, float, list[float], list[str]]:
    """Keep ``concurrency`` requests in flight for ``duration`` seconds (after ``warmup``
    seconds: requests answered before then are not counted), servers taken round-robin.
    Returns (requests, errors, seconds, wall ms of each counted request, the first few error
    descriptions)."""
    # idle connections dropped before uvicorn closes them (its keep-alive timeout is 5 s)
    limits = httpx.Limits(
        max_connections=concurrency, max_keepalive_connections=concurrency, keepalive_expiry=4
    )
    clients = [
        httpx.AsyncClient(base_url=b, headers=headers, limits=limits, timeout=60) for b in bases
    ]
    times: list[float] = []
    errors: list[str] = []
    counter = 0
    t_start = time.perf_counter()
    t_count = t_start + warmup
    t_end = t_count + duration
    t_last = t_end

    async def worker() -> None:
        nonlocal counter, t_last
        while True:
            k = counter
            counter += 1
            client = clients[k % len(clients)]
            t0 = time.perf_counter()
            if t0 >= t_end:
                return
            try:
                r = await client.get(paths(k))
                ok = r.status_code == 200
                why = f"{r.status_code} {r.text[:200]}"
            except httpx.HTTPError as exc:
                ok, why = False, repr(exc)
            t1 = time.perf_counter()
            # counted: answered after the warm-up and sent before the end (a request slower
            # than the warm-up still counts)
            if t1 >= t_count:
                t_last = max(t_last, t1)
                times.append((t1 - t0) * 1000)
                if not ok:
                    errors.append(why)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    for c in clients:
        await c.aclose()
    # requests/s over the span the counted answers came in (longer than ``duration`` when a
    # request sent just before the end is slow)
    return len(times), len(errors), t_last - t_count, times, errors[:3]


def run_endpoint(
    name: str,
    servers: Servers,
    paths: Callable[[int], str],
    headers: dict[str, str],
    concurrency: int,
    args: argparse.Namespace,
) -> Result:
    before = load()
    s0, c0 = cpu_ms(servers.pids), time.process_time()
    n, errs, secs, times, why = asyncio.run(
        drive(servers.bases, paths, headers, concurrency, args.duration, args.warmup)
    )
    server = cpu_ms(servers.pids) - s0
    client = (time.process_time() - c0) * 1000
    for w in why:
        print(f"    error ({name}): {w}", file=sys.stderr)
    if errs:
        for log_path in servers.logs:
            tail = log_path.read_text()[-1500:]
            if tail:
                print(f"    {log_path.name} ends:\n{tail}", file=sys.stderr)
    # CPU is counted over warm-up and the run: divide by the requests of both (approximately:
    # the warm-up's share of the rate is the same as the run's).
    total = max(1, round(n * (args.warmup + secs) / secs))
    return Result(
        name,
        len(servers.procs),
        concurrency,
        n,
        errs,
        secs,
        times,
        server / total,
        client / total,
        before,
        load(),
    )


def report(r: Result) -> None:
    w = r.wall_ms
    print(
        f"  {r.procs} proc | {r.concurrency:2d} in flight | {r.endpoint:20s} | "
        f"{r.requests / r.seconds:7.1f} req/s | p50 "
        f"{median(w):7.1f} | p99 {pct(w, 99):7.1f} | max "
        f"{max(w) if w else float('nan'):7.1f} ms | errors {r.errors:4d}/{r.requests:<5d} | "
        f"server CPU {r.server_cpu_ms:5.1f} ms/req | client CPU {r.client_cpu_ms:4.1f} ms/req | "
        f"load {r.load_before} -> {r.load_after}",
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--hosts", type=int, default=10000)
    ap.add_argument("--concurrency", default="1,16", help="requests in flight, levels (1,16)")
    ap.add_argument("--duration", type=float, default=10.0, help="seconds per endpoint (10)")
    ap.add_argument("--warmup", type=float, default=2.0, help="seconds not counted (2)")
    ap.add_argument("--procs", default="1,2", help="server process counts to run (1,2)")
    ap.add_argument("--only", default="", help="endpoints to run, comma-separated names")
    ap.add_argument("--src", help="run the servers from this source tree (before figures)")
    ap.add_argument("--sql-runs", type=int, default=200, help="reference SQL runs (200)")
    ap.add_argument(
        "--pg",
        default=os.environ.get("GPUFLEET_BENCH_PG", DEFAULT_PG),
        help="an admin URL; a scratch database is created there and dropped",
    )
    args = ap.parse_args()
    name = f"gpufleet_bench_{uuid.uuid4().hex[:8]}"
    admin = create_engine(args.pg, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}"'))
    url = args.pg.rsplit("/", 1)[0] + "/" + name
    print(
        f"{args.hosts} hosts on PostgreSQL ({name}); in flight {args.concurrency}, "
        f"{args.duration:g} s per endpoint after {args.warmup:g} s warm-up; nproc "
        f"{os.cpu_count()}; load {load()}",
        flush=True,
    )
    try:
        with tempfile.TemporaryDirectory(prefix="gpufleet-bench-") as tmp:
            db = Database(url)
            db.migrate()
            t0 = time.perf_counter()
            build(db, args.hosts)
            print(f"fleet built in {time.perf_counter() - t0:.1f} s; load {load()}", flush=True)
            fleet = Fleet(db=db, home=Path(tmp), actor="bench")
            _info, secret = create_token(fleet, "bench-viewer", Role.VIEWER)
            headers = {"Authorization": f"Bearer {secret}"}
            times, plan = reference_sql(db, args.sql_runs)
            print("EXPLAIN ANALYZE of the filtered list's SQL:")
            print("\n".join("    " + line for line in plan.splitlines()))
            print(
                f"reference: the filtered list's SQL through psycopg, one at a time: p50 "
                f"{statistics.median(times):.2f} ms, p99 {pct(times, 99):.2f} ms; load {load()}",
                flush=True,
            )
            page_path = LIST
            with httpx.Client(headers=headers) as client:
                db.dispose()
                servers = start_servers(url, 1, Path(tmp) / "home", args.src)
                try:
                    page = 1
                    while page < 20:  # the 20th page, or the last one of a smaller fleet
                        got = client.get(servers.bases[0] + page_path)
                        assert got.status_code == 200, got.text
                        cursor = got.json()["next_cursor"]
                        if cursor is None:
                            break
                        page_path = f"{LIST}&cursor={cursor}"
                        page += 1
                finally:
                    servers.stop()
            n = args.hosts
            endpoints: dict[str, Callable[[int], str]] = {
                "health": lambda k: "/api/v1/health",
                "hosts filtered": lambda k: LIST,
                f"hosts filtered p.{page}": lambda k: page_path,
                "host page": lambda k: f"/api/v1/hosts/gpu-{(k * 7919) % n + 1:05d}",
                "capacity check": lambda k: "/api/v1/capacity/check?gpus=64&model=H100",
            }
            only = [e.strip() for e in args.only.split(",") if e.strip()]
            results: list[Result] = []
            for procs in [int(p) for p in args.procs.split(",")]:
                servers = start_servers(url, procs, Path(tmp) / "home", args.src)
                try:
                    for conc in [int(c) for c in args.concurrency.split(",")]:
                        for ep, paths in endpoints.items():
                            if only and ep not in only:
                                continue
                            results.append(run_endpoint(ep, servers, paths, headers, conc, args))
                            report(results[-1])
                finally:
                    servers.stop()
            print(
                "\n| procs | in flight | endpoint | req/s | p50 ms | p99 ms | errors "
                "| server CPU ms/req | load before -> after |\n" + "|---" * 9 + "|"
            )
            for r in results:
                print(
                    f"| {r.procs} | {r.concurrency} | {r.endpoint} | "
                    f"{r.requests / r.seconds:.1f} | "
                    f"{median(r.wall_ms):.1f} | {pct(r.wall_ms, 99):.1f} | "
                    f"{r.errors} | {r.server_cpu_ms:.1f} | {r.load_before} -> {r.load_after} |"
                )
    finally:
        with admin.connect() as c:
            c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


if __name__ == "__main__":
    main()
