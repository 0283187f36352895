"""Issue 27 item 7 (pure): ``--unit rack`` plans (waves of whole racks, trays in slot order,
trays left out for a host's reasons, a leased tray holding its whole rack back) and the rack's
version drift finding (not judged while a change window is open)."""

from __future__ import annotations

from gpufleet.domain.campaign import AllocatedPolicy, Candidate, parse_waves
from gpufleet.domain.campaign_racks import plan_racks
from gpufleet.domain.fabric import FabricOutcome, HostFabric, TrayPosition
from gpufleet.domain.racks import TrayMember, version_drift
from gpufleet.domain.states import HostState

A = HostState.AVAILABLE


def _racks(n: int, trays: int = 4) -> dict[str, list[str]]:
    # slot order is not name order: the planner keeps the order it is given
    return {f"R{r}": [f"r{r}-t{i}" for i in reversed(range(trays))] for r in range(n)}


def _cands(racks: dict[str, list[str]], **states: HostState) -> list[Candidate]:
    return [Candidate(t, states.get(t.replace("-", "_"), A), None, "p")
            for trays in racks.values() for t in trays]


def test_waves_are_whole_racks_in_slot_order() -> None:
    racks = _racks(4)
    plan = plan_racks([*_cands(racks), Candidate("loose", A)], racks, canary=1,
                      waves=parse_waves("50%,100%"))
    assert plan.waves[0] == racks["R0"]
    assert [len(w) for w in plan.waves] == [4, 8, 4]  # pool floor 50%: 2 of 4 racks a wave
    assert sorted(t for w in plan.waves for t in w) == sorted(
        t for trays in racks.values() for t in trays)
    assert plan.racks == racks
    assert [(k.host, k.reason.split(" (")[0]) for k in plan.skipped] == [("loose", "in no rack")]


def test_a_quarantined_tray_is_left_out_and_its_rack_goes() -> None:
    racks = _racks(2)
    plan = plan_racks(_cands(racks, r1_t2=HostState.QUARANTINED), racks, canary=1,
                      waves=parse_waves("100%"))
    assert [k.host for k in plan.skipped] == ["r1-t2"]
    assert plan.racks["R1"] == ["r1-t3", "r1-t1", "r1-t0"]


def test_a_leased_tray_holds_its_rack_back_or_leaves_it_out() -> None:
    racks = _racks(2)
    cands = _cands(racks, r0_t1=HostState.ALLOCATED)
    wait = plan_racks(cands, racks, canary=1, waves=parse_waves("100%"))
    assert wait.waves[0] == racks["R1"] and wait.waves[-1] == racks["R0"]
    assert wait.waiting == racks["R0"]
    skip = plan_racks(cands, racks, canary=1, waves=parse_waves("100%"),
                      policy=AllocatedPolicy.SKIP)
    assert skip.hosts == racks["R1"]
    assert {k.host for k in skip.skipped} == set(racks["R0"])
    assert all("r0-t1 allocated" in k.reason or k.host == "r0-t1" for k in skip.skipped)


def _tray(host: str, driver: str, vbios: str = "97.00.1", state: str = "available") -> TrayMember:
    fabric = HostFabric(FabricOutcome.OK, (), "", False, False, (), "R", "d", "d.2",
                        TrayPosition(1, 0, 1))
    return TrayMember(host, fabric, 4, "GB200", state=state, driver=driver, firmware=(vbios,))


def test_version_drift_names_each_version_and_waits_for_the_window() -> None:
    same = [_tray(f"t{i}", "580.95.05") for i in range(3)]
    assert version_drift(same) is None
    mixed = [*same, _tray("t3", "580.173.02", vbios="97.00.2")]
    found = version_drift(mixed)
    assert found is not None and found.kind == "version_drift"
    assert "driver 580.95.05 on 3 (t0, t1, t2); 580.173.02 on 1 (t3)" in found.message
    assert "firmware 97.00.1 on 3" in found.message
    assert found.data["driver"] == {"580.95.05": ["t0", "t1", "t2"], "580.173.02": ["t3"]}
    assert version_drift([*mixed[:3], _tray("t3", "580.173.02", state="maintenance")]) is None
