"""Many processes allocate at once: 50 requests for one host each against 10 available
hosts grant exactly 10, no host is in two leases, and a future window is never
double-booked; on SQLite and PostgreSQL."""

from __future__ import annotations

import multiprocessing as mp
from datetime import datetime, timedelta
from itertools import pairwise
from pathlib import Path

from sqlalchemy import select

from gpufleet.domain.placement import Request
from gpufleet.lab.demo import enroll_lab
from gpufleet.service.allocation import allocate
from gpufleet.service.fleet import Fleet
from gpufleet.service.validate import validate
from gpufleet.store.tables import LeaseHost
from gpufleet.testing import FakeClock


def _worker(
    url: str, home: str, now: datetime, start: datetime | None, barrier: object, out: object
) -> None:
    fleet = Fleet.open(home=Path(home), url=url, actor="racer", clock=FakeClock(now))
    barrier.wait()  # type: ignore[attr-defined]
    try:
        got = allocate(
            fleet,
            Request(hosts=1),
            owner="racer",
            purpose="race",
            start=start,
            duration=timedelta(hours=1),
        )
        out.put(got.lease.hosts[0] if got.lease else None)  # type: ignore[attr-defined]
    except Exception as exc:  # reported to the parent, which fails the test
        out.put(f"error: {type(exc).__name__}: {exc}")  # type: ignore[attr-defined]
    finally:
        fleet.db.dispose()


def _race(fleet: Fleet, n: int, start: datetime | None) -> list[str | None]:
    ctx = mp.get_context("fork")
    barrier, out = ctx.Barrier(n), ctx.Queue()
    fleet.db.dispose()  # no connection is shared with the children
    procs = [
        ctx.Process(
            target=_worker,
            args=(fleet.db.url, str(fleet.home), fleet.now(), start, barrier, out),
        )
        for _ in range(n)
    ]
    for p in procs:
        p.start()
    results = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    return results


def test_fifty_processes_ten_hosts_exactly_ten_leases_and_no_double_booking(
    fleet: Fleet, tmp_path: Path
) -> None:
    enroll_lab(fleet, tmp_path / "lab", 10, models=["h100-8x"], faults={})
    validate(fleet)

    now_results = _race(fleet, 50, None)
    assert not [r for r in now_results if r and r.startswith("error")], now_results
    granted = [r for r in now_results if r]
    assert len(granted) == 10 and len(set(granted)) == 10

    # every host is allocated for the next hour; a later window may book each one once
    later = fleet.now() + timedelta(hours=2)
    res_results = _race(fleet, 30, later)
    assert not [r for r in res_results if r and r.startswith("error")], res_results
    booked = [r for r in res_results if r]
    assert len(booked) == 10 and len(set(booked)) == 10

    with fleet.db.session() as s:
        rows = s.execute(
            select(LeaseHost.host_name, LeaseHost.starts_at, LeaseHost.ends_at).where(
                LeaseHost.holding
            )
        ).all()
    assert len(rows) == 20
    by_host: dict[str, list[tuple[datetime, datetime]]] = {}
    for name, a, b in rows:
        by_host.setdefault(name, []).append((a, b))
    for windows in by_host.values():
        windows.sort()
        assert all(w1[1] <= w2[0] for w1, w2 in pairwise(windows))
