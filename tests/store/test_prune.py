"""``gpufleet prune`` on both databases: old snapshots go, cited ones stay."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import func, select, update

from gpufleet.domain.events import EventKind
from gpufleet.errors import ConfigError
from gpufleet.lab.demo import enroll_lab
from gpufleet.service.core.fleet import Fleet, record_event
from gpufleet.service.core.prune import prune
from gpufleet.service.hosts.collect import collect
from gpufleet.service.hosts.validate import validate
from gpufleet.store.tables import CollectionResult, FactSnapshot, Host
from gpufleet.testing import FakeClock


def _snaps(fleet: Fleet) -> dict[str, list[int]]:
    with fleet.db.session() as s:
        out: dict[str, list[int]] = {}
        for name, sid in s.execute(
            select(Host.name, FactSnapshot.id)
            .join(Host, Host.id == FactSnapshot.host_id)
            .order_by(FactSnapshot.id)
        ):
            out.setdefault(name, []).append(sid)
        return out


def test_prune_keeps_latest_recent_validated_and_changed(
    fleet: Fleet, clock: FakeClock, tmp_path: Path
) -> None:
    enroll_lab(fleet, tmp_path / "lab", 2, models=["h100-8x"], faults={})
    for i in range(5):  # snapshots at day 0, 10, 20, 30, 40
        collect(fleet)
        # Lab facts never change, and an unchanged host writes no new snapshot (issue 8):
        # forgetting the content hash makes every collection here store one, as when facts
        # change without a tracked change (no change event cites it).
        with fleet.db.session() as s:
            s.execute(update(FactSnapshot).values(content_hash=None))
        if i == 1:
            validate(fleet, collect_first=False)  # validations cite the day-10 snapshots
        clock.advance(days=10)
    snaps = _snaps(fleet)
    assert [len(v) for v in snaps.values()] == [5, 5]
    with fleet.db.session() as s:  # a change detected on gpu-01's day-0 snapshot
        host = s.scalar(select(Host).where(Host.name == "gpu-01"))
        record_event(
            s,
            fleet,
            EventKind.CHANGE_DETECTED,
            "driver: 1 -> 2",
            host=host,
            data={"snapshot": snaps["gpu-01"][0]},
        )

    dry = prune(fleet, keep_days=15, keep_last=2, dry_run=True)
    assert (dry.removed, dry.kept) == (3, 7)
    assert _snaps(fleet) == snaps  # nothing removed

    rep = prune(fleet, keep_days=15, keep_last=2)
    assert (rep.removed, rep.kept, rep.dry_run) == (3, 7, False)
    after = _snaps(fleet)
    g1, g2 = snaps["gpu-01"], snaps["gpu-02"]
    assert after["gpu-01"] == [g1[0], g1[1], g1[3], g1[4]]  # day 20 gone
    assert after["gpu-02"] == [g2[1], g2[3], g2[4]]  # day 0 and day 20 gone
    with fleet.db.session() as s:
        # collection results survive, unlinked from the removed snapshots
        assert s.scalar(select(func.count(CollectionResult.id))) == 10
        latest = set(s.scalars(select(Host.latest_snapshot_id)))
    assert latest == {g1[4], g2[4]}
    # a second prune has nothing left to do; keeping none is refused
    assert prune(fleet, keep_days=15, keep_last=2).removed == 0
    with pytest.raises(ConfigError, match="--keep-last 0"):
        prune(fleet, keep_days=1, keep_last=0)
    with pytest.raises(ConfigError, match="--keep-days"):
        prune(fleet, keep_days=float("nan"), keep_last=1)
