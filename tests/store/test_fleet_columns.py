"""Fleet-wide reads by columns (issue 8): ``repo.latest_columns`` gives what the ORM rows give,
``pool list`` counts each pool's hosts with one aggregate, and the summary of an explicit
selector matching every host equals the unfiltered one (the unfiltered read sends no id list
for alarms); on both databases."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime

import pytest
from sqlalchemy import insert, text

from gpufleet.domain.events import AlarmKind, AlarmSeverity
from gpufleet.domain.states import HostState
from gpufleet.service.core.alarms import raise_alarm
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.core.select import select_hosts
from gpufleet.service.hosts.baselines import list_pools
from gpufleet.service.views.summary import fleet_summary
from gpufleet.store.repo import host_by_name, hosts_with_latest_facts, latest_columns
from gpufleet.store.tables import FactSnapshot, GpuRow, Host, Pool

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
STATES = (HostState.AVAILABLE, HostState.QUARANTINED, HostState.MAINTENANCE, HostState.AVAILABLE)


def _build(fleet: Fleet, n: int) -> None:
    """``n`` hosts in pools train/infer/none (every 7th never collected), and an empty pool."""
    hosts, snaps = [], []
    for i in range(1, n + 1):
        collected = i % 7 != 0
        hosts.append(
            {
                "id": i,
                "name": f"gpu-{(n - i):03d}",  # ids against the name order
                "address": f"10.0.0.{i}",
                "groups": [],
                "vars": {},
                "pool": ("train", "infer", None)[i % 3],
                "expected": {},
                "state": STATES[i % 4] if collected else HostState.ENROLLED,
                "state_entered_at": NOW,
                "health": "ok",
                "profiles": ["inference"] if i % 2 else [],
                "last_outcome": "ok" if collected else None,
                "created_at": NOW,
                "updated_at": NOW,
            }
        )
        if collected:
            snaps.append(
                {
                    "id": i,
                    "host_id": i,
                    "collected_at": NOW,
                    "facts": {},
                    "gpu_count": 8,
                    "gpu_model": "NVIDIA H100 80GB HBM3" if i % 2 else "NVIDIA A100-SXM4-80GB",
                }
            )
    with fleet.db.engine.begin() as c:
        c.execute(insert(Pool), [{"name": p, "expected": {}} for p in ("train", "infer", "empty")])
        c.execute(insert(Host), hosts)
        c.execute(insert(FactSnapshot), snaps)
        gpus = [
            {"snapshot_id": s["id"], "host_id": s["id"], "index": g}
            for s in snaps
            for g in range(8)
        ]
        c.execute(insert(GpuRow), gpus)  # NVIDIA GPUs: gpu_count is theirs, no facts decoded
        c.execute(text("UPDATE hosts SET latest_snapshot_id = id WHERE last_outcome = 'ok'"))


@pytest.mark.parametrize("selector", [None, "state:available", "gpu-01*", "pool:infer"])
def test_latest_columns_equal_the_orm_rows(fleet: Fleet, selector: str | None) -> None:
    _build(fleet, 40)
    with fleet.db.session() as s:
        orm = hosts_with_latest_facts(s, select_hosts(selector), facts=False)
        want = [
            (
                h.name,
                h.state,
                h.profiles,
                snap.id if snap else None,
                snap.gpu_count if snap else None,
            )
            for h, snap in orm
        ]
        got = latest_columns(
            s,
            select_hosts(selector),
            *(Host.name, Host.state, Host.profiles),
            *(FactSnapshot.id, FactSnapshot.gpu_count),
        )
    assert [tuple(r) for r in got] == want
    assert want
    if selector is None:  # the uncollected hosts are there, with NULL snapshot columns
        assert [w[0] for w in want if w[3] is None] == [
            f"gpu-{40 - i:03d}" for i in (35, 28, 21, 14, 7)
        ]


def test_pool_list_counts_each_pools_hosts(fleet: Fleet) -> None:
    _build(fleet, 40)
    with fleet.db.session() as s:
        by_pool = Counter(h.pool for h, _ in hosts_with_latest_facts(s, select_hosts(None)))
    sizes = {p.name: p.hosts for p in list_pools(fleet)}
    assert sizes == {"empty": 0, "infer": by_pool["infer"], "train": by_pool["train"]}
    assert sizes["infer"] > 0 and sizes["train"] > 0


def test_summary_of_every_host_by_name_equals_the_unfiltered_one(fleet: Fleet) -> None:
    _build(fleet, 40)
    with fleet.db.session() as s:
        for name in ("gpu-003", "gpu-020"):
            host = host_by_name(s, name)
            raise_alarm(s, fleet, host, AlarmKind.HOST_KEY_CHANGED, AlarmSeverity.CRITICAL, "k")
    whole = fleet_summary(fleet)
    assert [a["host"] for a in whole.alarms] == ["gpu-003", "gpu-020"]
    assert whole.hosts == 40 and whole.gpus_total == 8 * (40 - 40 // 7)
    assert fleet_summary(fleet, "gpu-*") == whole
    some = fleet_summary(fleet, "gpu-00*")
    assert [a["host"] for a in some.alarms] == ["gpu-003"] and some.hosts == 10
