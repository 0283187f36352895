"""The SQL filters of allocation (``candidate_filters``) say exactly what the pure
``allocatable`` says, and ``find_placement`` (count blocks in SQL, read only the planned
racks) places exactly what ``place`` over every host places, on SQLite and PostgreSQL.

The fleet is written straight into the tables (varied on purpose: states, racks with and
without a name, fabric spellings, profiles, GPU counts and memory, open and closed alarms,
leases that overlap the window or end before it); it is synthetic data, not a lifecycle
story."""

from __future__ import annotations

import random
from datetime import timedelta

from sqlalchemy import insert, text

from gpufleet.domain.placement import Request, allocatable, place
from gpufleet.domain.states import HostState
from gpufleet.service.allocation.candidates import (
    candidate_filters,
    candidate_views,
    find_placement,
    host_views,
)
from gpufleet.service.core.fleet import Fleet
from gpufleet.store.tables import Alarm, FactSnapshot, GpuRow, Host, Lease, LeaseHost

STATES = [HostState.AVAILABLE] * 6 + [
    HostState.ALLOCATED,
    HostState.MAINTENANCE,
    HostState.QUARANTINED,
]
PROFILES = [["training-multinode", "inference"], ["inference"], [], ["training-multinode"]]


def _build(fleet: Fleet, n: int = 160) -> None:
    rng = random.Random(7)
    now = fleet.now()
    hosts, snaps, gpus, alarms, lease_hosts = [], [], [], [], []
    for i in range(1, n + 1):
        state = rng.choice(STATES)
        count = rng.choice([0, 4, 8, 8, 8])
        expected = {} if rng.random() < 0.1 else {"fabric": rng.choice(["ib", "IB", "roce"])}
        hosts.append(
            {
                "id": i,
                "name": f"gpu-{i:03d}",
                "address": f"10.0.0.{i}",
                "port": 22,
                "groups": [],
                "vars": {},
                "pool": "train",
                "rack": rng.choice([None, "", "r1", "r2", "r3", "r4", "r5", "r6"]),
                "expected": expected,
                "state": state,
                "state_entered_at": now,
                "health": "ok",
                "state_version": 1,
                "profiles": rng.choice(PROFILES),
                "created_at": now,
                "updated_at": now,
            }
        )
        model = rng.choice(["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB", None])
        snaps.append(
            {
                "id": i,
                "host_id": i,
                "collected_at": now,
                "facts": {},
                "gpu_count": count,
                "gpu_model": model,
            }
        )
        memory = rng.choice([81559, 40960, None])
        gpus += [
            {"snapshot_id": i, "host_id": i, "index": g, "memory_total_mib": memory}
            for g in range(count)
        ]
        if rng.random() < 0.1:
            alarms.append(
                {
                    "host_id": i,
                    "kind": "other",
                    "severity": "warning",
                    "opened_at": now,
                    "closed_at": now if rng.random() < 0.5 else None,
                    "message": "test",
                    "data": {},
                }
            )
        if state is HostState.ALLOCATED or rng.random() < 0.1:
            ends = now + timedelta(hours=rng.choice([2, 30, 200]))
            lease_hosts.append(
                {
                    "lease_id": 1,
                    "host_id": i,
                    "host_name": f"gpu-{i:03d}",
                    "gpus": count,
                    "gpu_uuids": [],
                    "starts_at": now if state is HostState.ALLOCATED else ends - timedelta(hours=1),
                    "ends_at": ends,
                    "holding": rng.random() < 0.9,
                }
            )
    with fleet.db.engine.begin() as c:
        c.execute(insert(Host), hosts)
        c.execute(insert(FactSnapshot), snaps)
        c.execute(text("UPDATE hosts SET latest_snapshot_id = id"))
        c.execute(insert(GpuRow), gpus)
        c.execute(insert(Alarm), alarms)
        c.execute(
            insert(Lease),
            [
                {
                    "id": 1,
                    "owner": "t",
                    "purpose": "t",
                    "actor": "t",
                    "state": "active",
                    "request": {},
                    "created_at": now,
                    "starts_at": now,
                    "ends_at": now + timedelta(days=9),
                }
            ],
        )
        c.execute(insert(LeaseHost), lease_hosts)


REQUESTS = [
    Request(gpus=8),
    Request(gpus=4),
    Request(gpus=16, profile="training-multinode"),
    Request(gpus=64, model="h100"),
    Request(gpus=24, model="A100", fabric="ib"),
    Request(gpus=8, min_gpu_memory_mib=80 * 1024, fabric="IB", profile="inference"),
    Request(gpus=200),
    Request(gpus=40, fabric="roce", profile="training-multinode"),
    Request(hosts=1, profile="inference"),
    Request(hosts=3, model="H100", min_gpu_memory_mib=40 * 1024),
    Request(hosts=12),
    Request(gpus=8, model="100%_"),  # LIKE wildcards are matched literally
]


def test_sql_filters_and_block_reads_match_the_pure_placement(fleet: Fleet) -> None:
    _build(fleet)
    now = fleet.now()
    windows = [
        (now, now + timedelta(hours=72)),
        (now + timedelta(hours=48), now + timedelta(hours=72)),  # leases of 2h/30h over by then
    ]
    placed = read = candidates = 0
    with fleet.db.session() as s:
        for req in REQUESTS:
            for start, end in windows:
                every, _ = host_views(s, req, None, start, end, now=now, candidates_only=False)
                want = {h.name for h in every if allocatable(req, h)}
                filters = candidate_filters(s, req, None, start, end, now)
                got, _ = candidate_views(s, req, filters)
                assert {h.name for h in got} == want, (req, start)
                expected = place(req, every)
                placement, views, index = find_placement(s, req, None, start, end, now=now)
                assert placement == expected, (req, start)
                if placement is not None:
                    placed += 1
                    assert set(placement.hosts) <= set(index)
                    assert {h.name for h in views} <= want
                    read += len(views)
                    candidates += len(want)
        # the fleet exercises future windows: allocated hosts free by the start are candidates
        future, _ = candidate_views(
            s, Request(gpus=1), candidate_filters(s, Request(gpus=1), None, *windows[1], now)
        )
        assert any(h.state is HostState.ALLOCATED for h in future)
    assert placed >= 12
    assert read < candidates / 2  # most placements read one rack, not the fleet
