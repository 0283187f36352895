"""Many processes allocate at once: 50 requests for one host each against 10 available
hosts grant exactly 10, no host is in two leases, and a future window is never
double-booked; on SQLite and PostgreSQL.

Deterministic, and it fails rather than hangs (issue 25, item 6): every child waits at one
barrier (with a timeout, so a child that died before it breaks the barrier for the others
instead of leaving them waiting), the parent collects one answer per child while watching the
children (a child that exited without an answer fails the test at once, naming its exit
code), everything is bounded by one deadline, and no child outlives the test. On SQLite the
busy timeout is the database URL's own setting (``?timeout=``, :func:`gpufleet.store.db.
sqlite_busy_timeout_s`), set here explicitly rather than relying on the default."""

from __future__ import annotations

import multiprocessing as mp
import queue
import time
from datetime import datetime, timedelta
from itertools import pairwise
from pathlib import Path

from sqlalchemy import select

from gpufleet.domain.placement import Request
from gpufleet.lab.demo import enroll_lab
from gpufleet.service.allocation.allocation import allocate
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.validate import validate
from gpufleet.store.tables import LeaseHost
from gpufleet.testing import FakeClock


def _worker(
    url: str, home: str, now: datetime, start: datetime | None, barrier: object, out: object
) -> None:
    fleet = Fleet.open(home=Path(home), url=url, actor="racer", clock=FakeClock(now))
    try:
        barrier.wait(BARRIER_S)  # type: ignore[attr-defined]
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


#: How long a child waits at the barrier for the others (all of them start within this).
BARRIER_S = 60.0
#: The whole race, from the first start to the last answer.
DEADLINE_S = 180.0
#: SQLite's busy timeout for the racers (seconds): a writer waits at most this for the lock.
SQLITE_BUSY_S = 60


def _racer_url(fleet: Fleet) -> str:
    url = fleet.db.url
    if url.startswith("sqlite"):
        url += ("&" if "?" in url else "?") + f"timeout={SQLITE_BUSY_S}"
    return url


def _race(fleet: Fleet, n: int, start: datetime | None) -> list[str | None]:
    ctx = mp.get_context("fork")
    barrier, out = ctx.Barrier(n), ctx.Queue()
    fleet.db.dispose()  # no connection is shared with the children
    url = _racer_url(fleet)
    procs = [
        ctx.Process(
            target=_worker, args=(url, str(fleet.home), fleet.now(), start, barrier, out)
        )
        for _ in range(n)
    ]
    results: list[str | None] = []
    try:
        for p in procs:
            p.start()
        deadline = time.monotonic() + DEADLINE_S
        while len(results) < n:
            try:
                results.append(out.get(timeout=0.5))
                continue
            except queue.Empty:
                pass
            # every answer is queued before its child exits: a dead child with none missing
            # from the queue after a drain is a child that died without answering
            dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            assert not dead, f"racer died without an answer: exit codes {dead}"
            assert time.monotonic() < deadline, (
                f"race not finished in {DEADLINE_S:.0f} s: {len(results)} of {n} answers")
        for p in procs:
            p.join(timeout=30)
            assert p.exitcode == 0, f"racer exit code {p.exitcode}"
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
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
