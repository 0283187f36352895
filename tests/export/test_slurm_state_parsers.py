"""Issue 26 parsers on real Slurm 22.05 captures (tests/fixtures/captured/slurm): reservations
(``scontrol show reservation -o``), GRES in use (``sinfo --json``), jobs on a node
(``squeue``); and the pure reservation planner."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpufleet.collect.slurm_state import gres_gpus, parse_node_gres, parse_squeue
from gpufleet.domain.slurm_reservations import (
    ResAction,
    Reservation,
    WantedReservation,
    expand_hostlist,
    foreign_holds,
    parse_reservations,
    plan_reservations,
)
from gpufleet.errors import ParseError
from gpufleet.service.core.fleet import Fleet

CAPTURED = Path(__file__).parent.parent / "fixtures" / "captured" / "slurm"


def test_reservations_capture() -> None:
    res = parse_reservations((CAPTURED / "scontrol-show-reservation-22.05.txt").read_text())
    assert [r.name for r in res] == ["gpufleet-lease-7", "foreign", "acct-res"]
    lease, foreign, acct = res
    assert lease.lease_id == 7 and foreign.lease_id is None
    assert lease.nodes == ("gpu-01",) and lease.users == ("nobody", "root")
    assert lease.state == "INACTIVE" and "IGNORE_JOBS" in lease.flags
    assert lease.start == datetime(2026, 12, 5, 14, 1, 56).astimezone(UTC)
    assert acct.users == () and acct.accounts == ("root",)
    assert parse_reservations(
        (CAPTURED / "scontrol-show-reservation-22.05-none.txt").read_text()) == []


def test_reservation_line_without_its_fields_is_a_parse_error() -> None:
    with pytest.raises(ParseError, match="no StartTime, EndTime"):
        parse_reservations("ReservationName=x Nodes=gpu-01 State=ACTIVE\n")
    with pytest.raises(ParseError, match="time"):
        parse_reservations("ReservationName=x StartTime=soon EndTime=later Nodes=a State=X\n")


def test_hostlists() -> None:
    assert expand_hostlist("gpu-[01-03,05],cpu-1") == (
        "gpu-01", "gpu-02", "gpu-03", "gpu-05", "cpu-1")
    assert expand_hostlist("(null)") == ()
    with pytest.raises(ParseError):
        expand_hostlist("gpu-[01-")


def test_gres_in_use_capture() -> None:
    nodes = {n.name: n for n in parse_node_gres(
        (CAPTURED / "sinfo-22.05-gres-used.json").read_text())}
    assert {n: (x.gpus, x.used, x.free, x.partitions) for n, x in nodes.items()} == {
        "gpu-01": (8, 0, 8, ("gpu",)), "gpu-02": (8, 0, 8, ("gpu",)),
        "gpu-03": (8, 3, 5, ("gpu",))}
    assert nodes["gpu-03"].gpu_type == "h100" and nodes["gpu-03"].schedulable
    # an older capture (a drained-then-resumed node) reads too
    assert len(parse_node_gres((CAPTURED / "sinfo-22.05.json").read_text())) == 3


def test_gres_strings() -> None:
    assert gres_gpus("gpu:h100:3(IDX:0,2-3),npu:910b:2", "n") == (3, "h100")
    assert gres_gpus("N/A", "n") == (0, "")
    with pytest.raises(ParseError, match="GRES 'gpu:h100:x'"):
        gres_gpus("gpu:h100:x", "node gpu-01")
    with pytest.raises(ParseError, match="no gres/gres_used"):
        parse_node_gres('{"nodes": [{"name": "a", "state": "idle"}]}')


def test_squeue_lines() -> None:
    (j,) = parse_squeue("5|root|RUNNING|2026-12-05T14:07:19|gpu-03\n")
    assert str(j) == "job 5 (root, running, ends 2026-12-05T14:07:19)"
    assert parse_squeue("") == []
    with pytest.raises(ParseError, match=r"5 '\|' columns"):
        parse_squeue("5 root RUNNING\n")


NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def _res(name: str, nodes: tuple[str, ...], users: tuple[str, ...] = ("alice",),
         end: datetime = NOW + timedelta(hours=2)) -> Reservation:
    return Reservation(name, NOW - timedelta(minutes=5), end, nodes, users, (), "ACTIVE")


def test_plan_creates_updates_deletes_only_gpufleets() -> None:
    wanted = [
        WantedReservation(1, ("gpu-01",), ("alice",), NOW, NOW + timedelta(hours=2)),
        WantedReservation(2, ("gpu-02",), ("bob",), NOW, NOW + timedelta(hours=3)),
        WantedReservation(3, ("gpu-03",), ("carol",), NOW + timedelta(hours=5),
                          NOW + timedelta(hours=6)),
    ]
    existing = [
        _res("gpufleet-lease-1", ("gpu-01",)),  # matches
        _res("gpufleet-lease-2", ("gpu-02",), ("bob",)),  # renewed: end moved
        _res("gpufleet-lease-9", ("gpu-04",)),  # its lease ended
        _res("admin", ("gpu-05",)),  # someone else's: never touched
    ]
    plan = plan_reservations(wanted, existing, NOW)
    assert [(c.action, c.name) for c in plan] == [
        (ResAction.UPDATE, "gpufleet-lease-2"), (ResAction.CREATE, "gpufleet-lease-3"),
        (ResAction.DELETE, "gpufleet-lease-9")]
    assert set(plan[0].fields) == {"EndTime"}
    assert plan[1].fields["StartTime"] != "now" and plan[1].fields["Users"] == "carol"
    assert foreign_holds(existing, ["gpu-05", "gpu-01"], NOW) == {
        "gpu-05": "Slurm reservation admin (alice, 2026-12-05T11:55:00+00:00 to "
                  "2026-12-05T14:00:00+00:00, active)"}
    # ended reservations hold nothing
    assert foreign_holds(existing, ["gpu-05"], NOW + timedelta(hours=3)) == {}


def test_plan_carries_the_leases_account_and_corrects_a_hand_edit() -> None:
    end = NOW + timedelta(hours=2)
    wanted = [WantedReservation(1, ("gpu-01",), ("alice",), NOW, end, ("proj-a",)),
              WantedReservation(2, ("gpu-02",), ("bob",), NOW, end)]
    (create, _) = plan_reservations(wanted, [], NOW)
    assert create.fields["Accounts"] == "proj-a" and create.fields["Users"] == "alice"
    existing = [Reservation("gpufleet-lease-1", NOW, end, ("gpu-01",), ("alice",), ("ops",)),
                Reservation("gpufleet-lease-2", NOW, end, ("gpu-02",), ("bob",), ("ops",))]
    a, b = plan_reservations(wanted, existing, NOW)
    assert (a.action, dict(a.fields), a.why) == (
        ResAction.UPDATE, {"Accounts": "proj-a"}, "accounts ops -> proj-a")
    assert (b.action, dict(b.fields)) == (ResAction.UPDATE, {"Accounts-": "ops"})  # taken off
    same = Reservation("gpufleet-lease-1", NOW, end, ("gpu-01",), ("alice",), ("proj-a",))
    assert plan_reservations(wanted[:1], [same], NOW) == []


def test_gres_values_of_the_wrong_type_are_parse_errors() -> None:
    with pytest.raises(ParseError, match="gres is not a string"):
        parse_node_gres('{"nodes": [{"name": "a", "gres": 8, "gres_used": "", "state": "idle"}]}')
    with pytest.raises(ParseError, match="state_flags is not a list"):
        parse_node_gres('{"nodes": [{"name": "a", "gres": "", "gres_used": "", '
                        '"state": "idle", "state_flags": 3}]}')


def test_an_account_scontrol_cannot_take_is_refused_before_placement(fleet: Fleet) -> None:
    from gpufleet.domain.placement import Request
    from gpufleet.errors import ConfigError
    from gpufleet.service.allocation.allocation import allocate

    for bad in ("a b", "a,b", "a=b", ""):
        with pytest.raises(ConfigError, match="--account"):
            allocate(fleet, Request(hosts=1), owner="o", purpose="p",
                     duration=timedelta(hours=1), account=bad)
