"""Placement's per-rack summary (``store/placement_index.py``), SQLite and PostgreSQL.

* With the summary built, ``find_placement`` still places exactly what ``place`` over every
  host places (the varied fleet of ``test_candidates``, reservations in the window included:
  the summary over-counts those racks and placement re-plans on their real counts).
* Every kind of write through a session keeps it equal to a recomputation from the hosts:
  lifecycle transitions, profiles, an alarm opened and closed, a rack renamed, a new
  snapshot, a host added and deleted; a statement that names no hosts marks it stale.
* Fail closed: a summary corrupted behind the session's back (raw SQL) never yields a host
  that is not a candidate, and an over-counted rack is re-read, not trusted.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import select, text, update
from sqlalchemy.orm import Session
from tests.service.test_candidates import REQUESTS, _build

from gpufleet.domain.placement import Request, allocatable, place
from gpufleet.domain.states import Event, HostState
from gpufleet.service.allocation.candidates import find_placement, host_views
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.core.lifecycle import transition
from gpufleet.store.placement_index import FLEET, RACK, compute, read_summary, rebuild
from gpufleet.store.tables import Alarm, FactSnapshot, Host, PlacementRack


def _stored(s: Session) -> dict[str, list[list[Any]]]:
    rows = s.execute(
        select(PlacementRack.rack, PlacementRack.blocks).where(PlacementRack.scope == RACK)
    )
    return {rack: blocks for rack, blocks in rows if blocks}


def _in_step(fleet: Fleet) -> None:
    with fleet.db.session() as s:
        assert read_summary(s) is not None, "the summary was marked stale"
        want = {rack: blocks for rack, blocks in compute(s, None).items() if blocks}
        assert _stored(s) == want


def _same_as_every_host(fleet: Fleet) -> int:
    """find_placement == place over every host for every request (window now..+72h)."""
    now = fleet.now()
    placed = 0
    with fleet.db.session() as s:
        for req in REQUESTS:
            every, _ = host_views(
                s, req, None, now, now + timedelta(hours=72), now=now, candidates_only=False
            )
            got, _, _ = find_placement(s, req, None, now, now + timedelta(hours=72), now=now)
            assert got == place(req, every), req
            if got is not None:
                placed += 1
                ok = {h.name for h in every if allocatable(req, h)}
                assert set(got.hosts) <= ok
    return placed


def test_summary_placement_is_exact_and_every_write_keeps_it_in_step(fleet: Fleet) -> None:
    _build(fleet)  # raw inserts: no summary yet
    with fleet.db.session() as s:
        assert read_summary(s) is None
        req = Request(gpus=8)
        now = fleet.now()
        find_placement(s, req, None, now, now + timedelta(hours=1), now=now)  # asks a rebuild
    _in_step(fleet)  # built by that transaction's commit
    with fleet.db.session() as s:
        summary = read_summary(s)
        assert summary is not None and len(summary) >= 5
    assert _same_as_every_host(fleet) >= 9

    with fleet.db.session() as s:  # lifecycle writer: available -> maintenance
        h = s.scalars(
            select(Host).where(Host.state == HostState.AVAILABLE).order_by(Host.id)
        ).first()
        assert h is not None
        transition(s, fleet, h, Event.MAINTENANCE_ON, "test")
        first = h.id
    _in_step(fleet)
    with fleet.db.session() as s:  # profiles (what validation writes), then a rack rename
        hosts = list(
            s.scalars(
                select(Host).where(Host.state == HostState.AVAILABLE).order_by(Host.id).limit(3)
            )
        )
        hosts[0].profiles = ["inference"]
        hosts[1].rack = "r-new"
        hosts[2].expected = {"fabric": "roce"}
        moved = hosts[1].id
    _in_step(fleet)
    with fleet.db.session() as s:  # an alarm opened on an available host
        alarm = Alarm(
            host_id=moved,
            kind="other",
            severity="warning",
            opened_at=fleet.now(),
            message="t",
            data={},
        )
        s.add(alarm)
    _in_step(fleet)
    with fleet.db.session() as s:  # ... and closed
        a = s.scalars(select(Alarm).where(Alarm.host_id == moved)).one()
        a.closed_at = fleet.now()
    _in_step(fleet)
    with fleet.db.session() as s:  # a new snapshot with other GPUs
        h = s.get(Host, moved)
        assert h is not None
        snap = FactSnapshot(
            id=10_000,  # _build wrote explicit ids (PostgreSQL's sequence did not move)
            host_id=h.id,
            collected_at=fleet.now(),
            facts={},
            gpu_count=2,
            gpu_model="NVIDIA L4",
        )
        s.add(snap)
        s.flush()
        h.latest_snapshot_id = snap.id
    _in_step(fleet)
    with fleet.db.session() as s:  # a host removed
        h = s.get(Host, first)
        assert h is not None
        s.delete(h)
    _in_step(fleet)
    assert _same_as_every_host(fleet) >= 9

    # A host out of `available` whose snapshot and rack change (what a collection writes for
    # an enrolled or maintenance host: no refresh is needed), then back to `available`.
    with fleet.db.session() as s:
        h = s.get(Host, moved)
        assert h is not None
        transition(s, fleet, h, Event.MAINTENANCE_ON, "test")
    _in_step(fleet)
    with fleet.db.session() as s:
        h = s.get(Host, moved)
        assert h is not None and h.state == HostState.MAINTENANCE
        snap = FactSnapshot(
            id=10_001, host_id=h.id, collected_at=fleet.now(), facts={}, gpu_count=8,
            gpu_model="NVIDIA H100",
        )
        s.add(snap)
        s.flush()
        h.latest_snapshot_id = snap.id
        h.rack = "r-maint"
    _in_step(fleet)
    with fleet.db.session() as s:
        h = s.get(Host, moved)
        assert h is not None
        transition(s, fleet, h, Event.MAINTENANCE_OFF, "test")
        assert h.state == HostState.VALIDATING
    _in_step(fleet)
    with fleet.db.session() as s:
        h = s.get(Host, moved)
        assert h is not None
        transition(s, fleet, h, Event.VALIDATION_PASSED, "test")
        assert h.state == HostState.AVAILABLE
    _in_step(fleet)
    with fleet.db.session() as s:
        assert "r-maint" in {rack for rack, _ in read_summary(s) or []}
    assert _same_as_every_host(fleet) >= 9

    # A statement that changes a watched column without naming its hosts: the summary is
    # marked stale, placement reads every candidate and its commit rebuilds it.
    with fleet.db.session() as s:
        s.execute(
            update(Host)
            .where(Host.rack == "r1")
            .values(rack="r1b")
            .execution_options(synchronize_session=False)
        )
    with fleet.db.session() as s:
        assert read_summary(s) is None
        assert s.scalar(select(PlacementRack.rack).where(PlacementRack.scope == FLEET)) is None
    assert _same_as_every_host(fleet) >= 9  # exact path, then rebuilt at commit
    _in_step(fleet)


def test_a_summary_corrupted_behind_the_session_never_grants_a_non_candidate(
    fleet: Fleet,
) -> None:
    _build(fleet)
    with fleet.db.session() as s:
        rebuild(s)
    # Raw SQL (no session events): every rack claims 40 free 8-GPU H100 hosts validated for
    # everything, and the racks that really hold candidates claim none.
    fake = [["ib", 8, "NVIDIA H100 80GB HBM3", 81559, ["inference", "training-multinode"], 40]]
    with fleet.db.engine.begin() as c:
        racks = [r for (r,) in c.execute(text("SELECT rack FROM placement_racks"))]
        for i, rack in enumerate(sorted(racks)):
            c.execute(
                update(PlacementRack)
                .where(PlacementRack.rack == rack)
                .values(blocks=fake if i % 2 else [])
            )
    now = fleet.now()
    with fleet.db.session() as s:
        for req in REQUESTS:
            every, _ = host_views(
                s, req, None, now, now + timedelta(hours=72), now=now, candidates_only=False
            )
            ok = {h.name for h in every if allocatable(req, h)}
            got, _, _ = find_placement(s, req, None, now, now + timedelta(hours=72), now=now)
            if got is not None:
                assert set(got.hosts) <= ok, req
                assert sum(h.gpus for h in every if h.name in got.hosts) == got.gpus
            else:  # a refusal is only ever given on the exact counts
                assert place(req, every) is None, req


def test_the_summary_is_stamped_by_the_fleets_clock(fleet: Fleet) -> None:
    """Issue 25: ``Fleet.clock`` is the only clock; the summary rows the store writes on its
    own read it too (the fixture's clock is hand-moved, far from the wall clock)."""
    _build(fleet)
    fleet.clock.advance(days=400)  # type: ignore[attr-defined]
    with fleet.db.session() as s:
        rebuild(s)
    with fleet.db.session() as s:
        stamps = set(s.scalars(select(PlacementRack.refreshed_at)))
    assert stamps == {fleet.now()}
