"""Leases through the service on SQLite and PostgreSQL: allocate, reserve, renew, release,
expiry policy, hooks, expected-back times and capacity, on a validated lab fleet."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select
from tests.labproof import prove_lab

from gpufleet.domain.events import EventKind
from gpufleet.domain.leases import OnExpiry
from gpufleet.domain.placement import Request
from gpufleet.errors import ConfigError, InvalidTransition, NotFound
from gpufleet.lab.demo import enroll_lab
from gpufleet.service.allocation import allocation, capacity, leases
from gpufleet.service.background.sweeper import sweep
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts import operations
from gpufleet.service.hosts.validate import validate
from gpufleet.service.views.hosts import list_hosts, show_host
from gpufleet.store.tables import Event, Lease, LeaseHost
from gpufleet.testing import FakeClock


def lab(fleet: Fleet, tmp_path: Path, n: int = 6) -> None:
    """``n`` validated 8x H100 hosts, four per rack (gpu-01..04 in r01, the rest in r02)."""
    fl = enroll_lab(fleet, tmp_path / "lab", n, models=["h100-8x"], faults={})
    prove_lab(fleet, fl, tmp_path)  # training-multinode asks for proof (issue 24 item 5)
    validate(fleet)


def states(fleet: Fleet) -> dict[str, str]:
    return {v.name: v.state for v in list_hosts(fleet)}


def test_allocate_multinode_lands_in_one_rack_records_uuids_and_owner(
    fleet: Fleet, tmp_path: Path
) -> None:
    lab(fleet, tmp_path)
    req = Request(gpus=16, model="H100", profile="training-multinode")
    got = allocation.allocate(
        fleet, req, owner="team-a", purpose="llm", duration=timedelta(hours=72)
    )
    assert got.lease is not None and got.placement is not None
    # rack r02 holds 2 free hosts, r01 holds 4: the smaller block is used, r01 stays whole
    assert got.lease.hosts == ["gpu-05", "gpu-06"]
    assert got.lease.gpus == 16 and got.lease.owner == "team-a" and got.lease.actor == "pytest"
    assert all(len(u) == 8 and u[0].startswith("GPU-") for u in got.lease.gpu_uuids.values())
    assert got.lease.ends_at - got.lease.starts_at == timedelta(hours=72)
    st = states(fleet)
    assert st["gpu-05"] == st["gpu-06"] == "allocated" and st["gpu-01"] == "available"
    # the same request again fits only in r01 now
    again = allocation.allocate(
        fleet, req, owner="team-b", purpose="x", duration=timedelta(hours=1)
    )
    assert again.lease is not None and again.lease.hosts == ["gpu-01", "gpu-02"]


def test_refusal_explains_with_counts_and_when_capacity_frees(fleet: Fleet, tmp_path: Path) -> None:
    lab(fleet, tmp_path)
    allocation.allocate(
        fleet, Request(hosts=4), owner="a", purpose="p", duration=timedelta(hours=5)
    )
    operations.maintenance_on(fleet, "gpu-05", "PSU", eta=fleet.now() + timedelta(days=2))
    got = allocation.allocate(
        fleet, Request(gpus=16, model="H100"), owner="b", purpose="q", duration=timedelta(hours=1)
    )
    assert got.lease is None and got.refusal is not None
    msg = got.refusal.message
    assert "6 of 6 hosts match the model H100" in msg
    assert "4 are allocated until" in msg and "1 are in maintenance (back by" in msg
    assert "8 GPUs allocatable, 8 missing" in msg
    assert got.refusal.counts["state_allocated"] == 4
    assert {h["host"] for h in got.refusal.held} >= {"gpu-01", "gpu-05"}


def test_reservation_is_honoured_then_becomes_a_lease_at_its_start(
    fleet: Fleet, tmp_path: Path, clock: FakeClock
) -> None:
    lab(fleet, tmp_path, n=2)
    start = fleet.now() + timedelta(hours=10)
    res = allocation.allocate(
        fleet,
        Request(hosts=2),
        owner="a",
        purpose="later",
        start=start,
        duration=timedelta(hours=4),
    )
    assert res.lease is not None and res.lease.state == "reserved"
    assert states(fleet)["gpu-01"] == "available"  # held for the window only
    # a lease overlapping the window is refused; one ending before it fits
    clash = allocation.allocate(
        fleet, Request(hosts=1), owner="b", purpose="x", duration=timedelta(hours=11)
    )
    assert clash.lease is None and clash.refusal is not None
    assert "reserved or leased in that window" in clash.refusal.message
    short = allocation.allocate(
        fleet, Request(hosts=1), owner="b", purpose="x", duration=timedelta(hours=9)
    )
    assert short.lease is not None
    # a second reservation of the same window is never double-booked
    twice = allocation.allocate(
        fleet,
        Request(hosts=1),
        owner="c",
        purpose="y",
        start=start + timedelta(hours=1),
        duration=timedelta(hours=1),
    )
    assert twice.lease is None
    # capacity at the window shows the hosts as reserved
    at = capacity.capacity(fleet, at=start + timedelta(minutes=1))
    assert at.totals["reserved"] == 16 and at.totals["free"] == 0
    clock.advance(hours=9, minutes=30)
    sweep(fleet)  # the 9 h lease expires (release policy): its host goes to reclaiming
    clock.advance(hours=1)
    assert leases.show_lease(fleet, short.lease.id).state == "released"
    # gpu-0x of the short lease is reclaiming (or beyond, when reclaim checks are installed):
    # the reservation waits for it rather than taking it
    touched = sweep(fleet)
    lease = leases.show_lease(fleet, res.lease.id)
    if lease.state == "reserved":
        assert "waiting for" in (lease.reason or "")
        assert touched == [] or set(touched) <= {"gpu-01", "gpu-02"}
    with fleet.db.session() as s:
        kinds = [e.kind for e in s.scalars(select(Event).order_by(Event.id))]
    assert EventKind.LEASE_RESERVED in kinds and EventKind.LEASE_EXPIRED in kinds


def test_reservation_starts_on_the_sweep(fleet: Fleet, tmp_path: Path, clock: FakeClock) -> None:
    lab(fleet, tmp_path, n=2)
    res = allocation.allocate(
        fleet,
        Request(gpus=8),
        owner="a",
        purpose="later",
        start=fleet.now() + timedelta(hours=1),
        duration=timedelta(hours=4),
    )
    assert res.lease is not None
    clock.advance(hours=1)
    assert sweep(fleet) == res.lease.hosts
    assert leases.show_lease(fleet, res.lease.id).state == "active"
    assert states(fleet)[res.lease.hosts[0]] == "allocated"


def _lease_events(fleet: Fleet, lease_id: int) -> list[str]:
    """The lease events of ``lease_id`` in the audit log, oldest first."""
    with fleet.db.session() as s:
        kinds = [k for k in EventKind if k.value.startswith("lease-")]
        rows = s.scalars(select(Event).where(Event.kind.in_(kinds)).order_by(Event.id))
        return [EventKind(e.kind).value for e in rows if (e.data or {}).get("lease") == lease_id]


def test_renew_release_and_notify_policy_in_the_audit_log(
    fleet: Fleet, tmp_path: Path, clock: FakeClock
) -> None:
    lab(fleet, tmp_path, n=2)
    pool = show_host(fleet, "gpu-01").view.pool
    assert pool is not None
    leases.set_policy(fleet, pool, OnExpiry.NOTIFY, timedelta(days=3))
    with pytest.raises(ConfigError, match="at most 3d"):
        allocation.allocate(
            fleet, Request(hosts=1), owner="a", purpose="p", duration=timedelta(days=4)
        )
    got = allocation.allocate(
        fleet, Request(hosts=1), owner="a", purpose="p", duration=timedelta(hours=2)
    )
    assert got.lease is not None
    lid = got.lease.id
    assert [lease.id for lease in leases.expiring(fleet, timedelta(hours=3))] == [lid]
    assert leases.expiring(fleet, timedelta(hours=1)) == []
    clock.advance(hours=3)
    sweep(fleet)
    sweep(fleet)  # notified once
    assert _lease_events(fleet, lid).count("lease-expired") == 1
    assert states(fleet)[got.lease.hosts[0]] == "allocated"  # notify keeps the hosts
    renewed = leases.renew(fleet, lid, duration=timedelta(hours=24))
    assert renewed.ends_at == fleet.now() + timedelta(hours=24) and renewed.notified_at is None
    out = leases.release(fleet, lid, "done")
    assert out.reclaiming == got.lease.hosts and out.lease.state == "released"
    with pytest.raises(InvalidTransition):
        leases.release(fleet, lid)
    with fleet.db.session() as s:
        ev = s.scalars(
            select(Event).where(Event.kind == EventKind.TRANSITION).order_by(Event.id.desc())
        ).all()
        assert any(e.data.get("to") == "reclaiming" and e.data.get("lease") == lid for e in ev)
        assert not s.scalar(select(LeaseHost.holding).where(LeaseHost.lease_id == lid))
        assert s.get(Lease, lid) is not None
    assert _lease_events(fleet, lid) == [
        "lease-granted",
        "lease-expired",
        "lease-renewed",
        "lease-released",
    ]


def test_alarmed_and_unvalidated_hosts_are_not_candidates(fleet: Fleet, tmp_path: Path) -> None:
    lab(fleet, tmp_path, n=2)
    from gpufleet.domain.events import AlarmKind, AlarmSeverity
    from gpufleet.service.core.alarms import raise_alarm
    from gpufleet.store.repo import host_by_name

    with fleet.db.session() as s:
        raise_alarm(
            s, fleet, host_by_name(s, "gpu-01"), AlarmKind.OTHER, AlarmSeverity.WARNING, "x"
        )
    got = allocation.allocate(
        fleet, Request(hosts=2), owner="a", purpose="p", duration=timedelta(hours=1)
    )
    assert got.refusal is not None and "1 have an open alarm" in got.refusal.message
    # a profile the site does not define is a typo, not "no host validated for it" (issue 29)
    with pytest.raises(NotFound, match="no profile named 'no-such-profile'"):
        allocation.allocate(
            fleet,
            Request(gpus=8, profile="no-such-profile"),
            owner="a",
            purpose="p",
            duration=timedelta(hours=1),
        )


def test_eta_on_maintenance_and_quarantine_shows_in_summary_capacity_and_host(
    fleet: Fleet, tmp_path: Path
) -> None:
    lab(fleet, tmp_path, n=2)
    back = fleet.now() + timedelta(days=3)
    operations.maintenance_on(fleet, "gpu-01", "swap fan", eta=back)
    assert show_host(fleet, "gpu-01").view.eta == back
    with pytest.raises(InvalidTransition):
        operations.set_eta(fleet, "gpu-02", back)  # available: nothing to come back from
    from gpufleet.service.views.summary import fleet_summary

    assert fleet_summary(fleet).back == [
        {"host": "gpu-01", "state": "maintenance", "eta": back.isoformat()}
    ]
    cap = capacity.capacity(fleet)
    assert cap.back == [{"host": "gpu-01", "state": "maintenance", "gpus": 8, "eta": back}]
    operations.maintenance_off(fleet, "gpu-01")
    assert show_host(fleet, "gpu-01").view.eta is None


def test_capacity_check_counts_headroom(fleet: Fleet, tmp_path: Path) -> None:
    lab(fleet, tmp_path, n=3)
    ok = capacity.check(fleet, gpus=16, model="H100", profile="inference", headroom=0.5)
    assert ok.ok and ok.needed == 24 and ok.allocatable == 24 and ok.missing == 0
    allocation.allocate(
        fleet, Request(hosts=1), owner="a", purpose="p", duration=timedelta(hours=6)
    )
    short = capacity.check(fleet, gpus=16, model="H100", profile="inference", headroom=0.5)
    assert not short.ok and short.missing == 8 and short.allocatable == 16
    assert short.held and short.held[0]["state"] == "allocated"
    assert short.frees and short.frees[0]["gpus"] == 8
