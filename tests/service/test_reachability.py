"""Reachability policy on a simulated lab fleet (the lab's ``unreachable`` transport fault),
both databases: the minutes bound acts before the attempts bound; a leased host gets the
alarm but keeps its lease (its state untouched); enrolled hosts are only counted; a host that
answers again ends its run. Fails on 84be469 (nothing is counted or acted on)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from gpufleet.domain.placement import Request
from gpufleet.inventory import load_inventory
from gpufleet.lab.fleet import create_fleet, write_inventory
from gpufleet.service.allocation import allocation
from gpufleet.service.core.alarms import list_alarms
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.collect import collect
from gpufleet.service.hosts.enroll import enroll
from gpufleet.service.hosts.validate import validate
from gpufleet.service.views.hosts import show_host
from gpufleet.store.repo import host_by_name
from gpufleet.testing import FakeClock


def _lab(fleet: Fleet, d: Path, faults: dict[str, list[str]]) -> None:
    lf = create_fleet(3, models=["h100-8x"], faults=faults, now=fleet.now())
    lf.save(d)
    write_inventory(lf, d / "inventory.ini", transport="sim", lab_dir=d)


def _run(fleet: Fleet, name: str) -> tuple[int, object]:
    with fleet.db.session() as s:
        h = host_by_name(s, name)
        return h.unreachable_attempts, h.unreachable_since


def _open(fleet: Fleet, name: str) -> list[str]:
    return [a.message for a in list_alarms(fleet, name) if a.kind == "host-unreachable"]


def test_minutes_bound_leased_hosts_and_recovery(fleet: Fleet, tmp_path: Path) -> None:
    clock = fleet.clock
    assert isinstance(clock, FakeClock)
    fleet.settings.unreachable_attempts = 5
    fleet.settings.unreachable_minutes = 10.0
    d = tmp_path / "lab"
    d.mkdir()
    _lab(fleet, d, {})
    enroll(fleet, load_inventory(d / "inventory.ini"))
    assert [v.state for v in validate(fleet).verdicts] == ["available"] * 3
    lease = allocation.allocate(fleet, Request(hosts=1), owner="a", purpose="p",
                                duration=timedelta(hours=5), selector="gpu-03")
    assert lease.lease is not None

    _lab(fleet, d, {"gpu-02": ["unreachable"], "gpu-03": ["unreachable"]})
    start = fleet.now()
    collect(fleet)
    assert _run(fleet, "gpu-02") == (1, start) and _run(fleet, "gpu-01") == (0, None)
    clock.advance(minutes=5)
    collect(fleet)  # 2 of 5 attempts, 5 of 10 minutes: not yet
    assert show_host(fleet, "gpu-02").view.state == "available" and not _open(fleet, "gpu-02")
    clock.advance(minutes=6)
    collect(fleet)  # 11 minutes since the first failure: acted on
    v = show_host(fleet, "gpu-02").view
    assert (v.state, v.fault) == ("validating", "unreachable")
    (msg,) = _open(fleet, "gpu-02")
    assert "3 failed contacts since" in msg
    assert "no BMC configured; recommended: escalate (check the machine" in msg
    # the leased host: one alarm, the lease runs on, its state and fault untouched
    v3 = show_host(fleet, "gpu-03").view
    assert (v3.state, v3.fault) == ("allocated", None) and len(_open(fleet, "gpu-03")) == 1
    assert show_host(fleet, "gpu-01").view.state == "available"

    _lab(fleet, d, {})
    collect(fleet)
    assert _run(fleet, "gpu-02") == (0, None) and _run(fleet, "gpu-03") == (0, None)
    assert not _open(fleet, "gpu-02") and not _open(fleet, "gpu-03")
    assert show_host(fleet, "gpu-02").view.state == "validating"
    assert show_host(fleet, "gpu-03").view.state == "allocated"


def test_an_enrolled_host_never_reached_is_only_counted(fleet: Fleet, tmp_path: Path) -> None:
    d = tmp_path / "lab"
    d.mkdir()
    _lab(fleet, d, {"gpu-01": ["unreachable"]})
    enroll(fleet, load_inventory(d / "inventory.ini"))
    for _ in range(3):
        collect(fleet)
    assert _run(fleet, "gpu-01")[0] == 3 and not _open(fleet, "gpu-01")
    assert show_host(fleet, "gpu-01").view.state == "enrolled"
