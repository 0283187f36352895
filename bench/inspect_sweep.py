"""bench: the inspection sweep (gpufleet inspect, issue 10).

Three measurements, each printed with a reference measured in the same run:

1. **ingest**: one synthetic sweep of ``--hosts`` hosts x 8 GPUs (every GPU row parsed from the
   lab's real H100 ``--query-gpu`` capture) stored by ``service.inspect.store_samples`` into
   SQLite and PostgreSQL (scratch database). Goal: 10,000 x 8 = 80,000 samples in under 5 s on
   PostgreSQL. Reference: the same rows through plain SQLAlchemy ``executemany`` (what
   ``store_samples`` does on SQLite; on PostgreSQL it uses ``COPY``, binary for the GPU rows).
2. **kept-open vs fresh**: ``--ssh-hosts`` real sshd lab hosts (tests/sshlab.py), three sweeps
   with a fresh SSH connection per host per sweep (the default transport) against three
   sweeps over connections kept open between sweeps (``inspect --every``'s transport); the
   steady-state sweeps (2 and 3) are compared.
3. **time to act**: a sim-lab fleet swept every ``--interval`` seconds (60: the 1-minute
   interval) by ``inspect_loop``; faults are injected at a random moment between sweeps and
   the wall time until the alarm row exists and until the host has left allocation is
   measured, for a rule that fires on one observation (uncorrectable ECC) and one that needs
   two in a row (temperature).

    .venv/bin/python bench/inspect_sweep.py                     # all three, 10000 / 200 / 60 s
    .venv/bin/python bench/inspect_sweep.py --only ingest --hosts 10000
    .venv/bin/python bench/inspect_sweep.py --only ssh --ssh-hosts 50
    .venv/bin/python bench/inspect_sweep.py --only act --interval 60
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import shutil
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import create_engine, insert, select, text

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.sshlab import SshLab

from gpufleet.collect.inspect import ProbeResult, parse_probe
from gpufleet.domain.placement import Request
from gpufleet.domain.states import HostState
from gpufleet.inventory import load_inventory
from gpufleet.lab.fleet import LabFleet, create_fleet, write_inventory
from gpufleet.lab.probe import render_probe
from gpufleet.lab.renderers import render_sections
from gpufleet.service.allocation.candidates import candidate_filters
from gpufleet.service.core.fleet import Fleet, utcnow
from gpufleet.service.health.inspect import TransportCache, inspect, inspect_loop
from gpufleet.service.health.inspect_store import gpu_row, host_row, store_samples
from gpufleet.service.hosts.enroll import enroll
from gpufleet.service.hosts.validate import validate
from gpufleet.store.db import Database
from gpufleet.store.tables import (
    Alarm,
    FactSnapshot,
    GpuSampleRow,
    Host,
    HostSampleRow,
)

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
PG_ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


# ------------------------------------------------------------------------------ 1. ingest


def _hosts(db: Database, n: int) -> None:
    rows = [
        {
            "id": i,
            "name": f"gpu-{i:05d}",
            "address": f"10.{i // 65536}.{i // 256 % 256}.{i % 256}",
            "port": 22,
            "groups": ["h100"],
            "vars": {},
            "expected": {},
            "state": HostState.AVAILABLE,
            "state_entered_at": NOW,
            "health": "ok",
            "state_version": 1,
            "profiles": [],
            "created_at": NOW,
            "updated_at": NOW,
        }
        for i in range(1, n + 1)
    ]
    with db.session() as s:
        s.execute(insert(Host), rows)


def _sweep(n: int) -> dict[int, ProbeResult]:
    lab = create_fleet(1, models=["h100-8x"], faults={}).hosts[0]
    one = parse_probe(render_probe(lab), NOW)
    assert one.sample.gpus is not None and len(one.sample.gpus) == 8, one.problems
    return {i: one for i in range(1, n + 1)}


def ingest(url: str, n: int, backend: str) -> None:
    db = Database(url)
    db.migrate()
    _hosts(db, n)
    fleet = Fleet(db=db, home=Path(tempfile.gettempdir()), actor="bench")
    parsed = _sweep(n)
    t0, c0 = time.perf_counter(), time.process_time()
    kept = store_samples(fleet, NOW, parsed)
    ours, cpu = time.perf_counter() - t0, time.process_time() - c0
    assert len(kept) == n
    # Reference: the same rows (a second sweep, a minute later) through plain executemany.
    later = NOW + timedelta(minutes=1)
    t0 = time.perf_counter()
    with db.session() as s:
        s.execute(insert(HostSampleRow), [host_row(h, later, r) for h, r in parsed.items()])
        s.execute(
            insert(GpuSampleRow),
            [gpu_row(h, later, g) for h, r in parsed.items() for g in r.sample.gpus or ()],
        )
    ref = time.perf_counter() - t0
    with db.session() as s:
        count = s.scalar(select(text("count(*)")).select_from(GpuSampleRow))
    assert count == 2 * 8 * n, count
    print(
        f"ingest {backend:10} {n} hosts x 8 GPUs = {8 * n} samples: {ours:.2f} s "
        f"({8 * n / ours:,.0f} samples/s, {cpu:.2f} s CPU in this process); plain "
        f"executemany {ref:.2f} s (ratio executemany/ours {ref / ours:.2f}); "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    db.dispose()


def bench_ingest(n: int, pg: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        ingest(f"sqlite:///{Path(tmp) / 'bench.db'}", n, "sqlite")
    if pg:
        name = f"gpufleet_bench_{uuid.uuid4().hex[:8]}"
        admin = create_engine(pg, isolation_level="AUTOCOMMIT")
        with admin.connect() as c:
            c.execute(text(f'CREATE DATABASE "{name}"'))
        try:
            ingest(pg.rsplit("/", 1)[0] + "/" + name, n, "postgresql")
        finally:
            with admin.connect() as c:
                c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            admin.dispose()


# ------------------------------------------------------------------------------ 2. ssh


def bench_ssh(n: int, forks: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="gpufleet-bench-inspect-"))
    root.chmod(0o755)
    lf = create_fleet(n, models=["h100-8x"], faults={})
    lab = SshLab(root / "lab")
    try:
        t0 = time.perf_counter()
        targets = {h.name: lab.add_host(h.name, render_sections(h)) for h in lf.hosts}
        for h in lf.hosts:
            d = lab._host(h.name).dir
            gpu = render_probe(h).split("@@probe gpu\n", 1)[1].split("\n@@rc", 1)[0]
            (d / "data" / "probe-gpu.csv").write_text(gpu + "\n")
            tool = d / "bin" / "nvidia-smi"
            tool.write_text(f"#!/bin/sh\ncat '{d}/data/probe-gpu.csv'\n")
            tool.chmod(0o755)
        lab.start()
        print(f"ssh: {n} sshd lab hosts up in {time.perf_counter() - t0:.1f} s")
        inv = write_inventory(lf, root / "hosts.ini", transport="ssh")
        lines = []
        for line in inv.read_text().splitlines():
            name = line.split(" ", 1)[0]
            t = targets.get(name)
            if t is not None:
                line = (
                    f"{name} ansible_host={t.address} ansible_port={t.port} "
                    f"ansible_user={t.user} ansible_ssh_private_key_file={lab.client_key} "
                    + line.split(" ", 1)[1]
                )
            lines.append(line)
        inv.write_text("\n".join(lines) + "\n")
        db = Database(f"sqlite:///{root / 'bench.db'}")
        db.migrate()
        fleet = Fleet(db=db, home=root, actor="bench", clock=utcnow)
        enroll(fleet, load_inventory(inv))

        def sweeps(cache: TransportCache | None) -> list[float]:
            out = []
            for _ in range(3):
                t = time.perf_counter()
                r = inspect(fleet, forks=forks, timeout_s=60, transports=cache)
                out.append(time.perf_counter() - t)
                bad = [h.host for h in r.hosts if h.outcome != "ok" or h.problems]
                assert not bad, bad[:5]
            return out

        fresh = sweeps(None)
        cache = TransportCache(fleet)
        try:
            kept = sweeps(cache)
        finally:
            cache.close()
        f, k = sum(fresh[1:]) / 2, sum(kept[1:]) / 2
        print(
            f"ssh: {n} hosts, forks {forks}: fresh connections "
            f"{' / '.join(f'{x:.2f}' for x in fresh)} s; kept open "
            f"{' / '.join(f'{x:.2f}' for x in kept)} s (first sweep connects); "
            f"steady state fresh/kept = {f:.2f}/{k:.2f} s, ratio {f / k:.2f}"
        )
        db.dispose()
    finally:
        lab.stop()
        shutil.rmtree(root, ignore_errors=True)


# ------------------------------------------------------------------------------ 3. act


def bench_act(interval: float, n: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="gpufleet-bench-act-"))
    try:
        d = root / "lab"
        d.mkdir()
        lf = create_fleet(n, models=["h100-8x"], faults={})
        lf.save(d)
        write_inventory(lf, d / "inventory.ini", transport="sim", lab_dir=d)
        db = Database(f"sqlite:///{root / 'bench.db'}")
        db.migrate()
        fleet = Fleet(db=db, home=root, actor="bench", clock=utcnow)
        fleet.settings.guard_share = 1.0
        enroll(fleet, load_inventory(d / "inventory.ini"))
        assert validate(fleet).ok
        stop = threading.Event()
        sweeps: list[float] = []
        loop = threading.Thread(
            target=inspect_loop,
            args=(fleet, None, timedelta(seconds=interval), stop),
            kwargs={"on_sweep": lambda r, e: sweeps.append(time.monotonic())},
            daemon=True,
        )
        loop.start()
        while not sweeps:
            time.sleep(0.05)
        time.sleep(random.uniform(0.1, 0.9) * interval)  # the fault appears between sweeps
        faults = {"gpu-01": ["ecc-uncorrectable"], "gpu-02": ["hot"]}
        fl = LabFleet.load(d)
        hosts = [h.model_copy(update={"faults": faults.get(h.name, [])}) for h in fl.hosts]
        fl.model_copy(update={"hosts": hosts}).save(d)
        t_fault = time.monotonic()
        alarm: dict[str, float] = {}
        out: dict[str, float] = {}
        deadline = t_fault + 3 * interval + 60
        while len(out) < 2 and time.monotonic() < deadline:
            with db.session() as s:
                names = {
                    n for (n,) in s.execute(select(Host.name).join(Alarm, Alarm.host_id == Host.id))
                }
                now = utcnow()
                filters = candidate_filters(
                    s, Request(hosts=1), None, now, now + timedelta(hours=1), now
                )
                free = set(
                    s.scalars(
                        select(Host.name)
                        .join(FactSnapshot, FactSnapshot.id == Host.latest_snapshot_id)
                        .where(*filters)
                    )
                )
            t = time.monotonic() - t_fault
            for h in faults:
                if h in names:
                    alarm.setdefault(h, t)
                if h not in free:
                    out.setdefault(h, t)
            time.sleep(0.1)
        stop.set()
        loop.join(interval + 60)
        sweep_s = [b - a for a, b in itertools.pairwise(sweeps)]
        print(
            f"act: {n} sim hosts, interval {interval:g} s, sweep period seen "
            f"{', '.join(f'{x:.1f}' for x in sweep_s)} s"
        )
        for h, why in (("gpu-01", "ECC, 1 observation"), ("gpu-02", "temperature, 2 in a row")):
            print(
                f"act: {why}: fault -> alarm {alarm.get(h, float('nan')):.1f} s, "
                f"-> out of allocation {out.get(h, float('nan')):.1f} s "
                f"(reference: worst case {interval * (1 if h == 'gpu-01' else 2):g} s + a sweep)"
            )
        db.dispose()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", choices=("ingest", "ssh", "act"))
    ap.add_argument("--hosts", type=int, default=10000)
    ap.add_argument("--ssh-hosts", type=int, default=200)
    ap.add_argument("--forks", type=int, default=50)
    ap.add_argument("--interval", type=float, default=60.0)
    ap.add_argument("--act-hosts", type=int, default=50)
    ap.add_argument("--pg", default=PG_ADMIN, help="admin URL; a scratch database ('' skips)")
    args = ap.parse_args()
    if args.only in (None, "ingest"):
        bench_ingest(args.hosts, args.pg)
    if args.only in (None, "ssh"):
        bench_ssh(args.ssh_hosts, args.forks)
    if args.only in (None, "act"):
        bench_act(args.interval, args.act_hosts)


if __name__ == "__main__":
    main()
