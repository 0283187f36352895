"""Campaign planning (pure): canary first, waves by cumulative share, spread across racks and
pools, skipped hosts with their reasons; the loaded-driver judgement; halting."""

from __future__ import annotations

import pytest

from gpufleet.domain.campaign import (
    AllocatedPolicy,
    Candidate,
    Limits,
    WaveSize,
    driver_problem,
    parse_share,
    parse_waves,
    plan_campaign,
    progress_bar,
    should_halt,
)
from gpufleet.domain.states import HostState
from gpufleet.errors import ConfigError

A = HostState.AVAILABLE


def _fleet(racks: dict[str, int], pool: str = "p") -> list[Candidate]:
    out = []
    for rack, n in racks.items():
        out += [Candidate(f"{rack}-h{i:02d}", A, rack, pool) for i in range(n)]
    return out


def test_waves_are_cumulative_shares_and_the_last_takes_the_rest() -> None:
    plan = plan_campaign(
        _fleet({"r1": 10, "r2": 10, "r3": 10, "r4": 10}),
        canary=1,
        waves=parse_waves("10%,25%,100%"),
        limits=Limits(max_rack_share=1.0, pool_floor=0.0),
    )
    sizes = [len(w) for w in plan.waves]
    assert sizes == [1, 4, 6, 29]  # 39 after the canary: ceil(3.9)=4, ceil(9.75)=10 -> +6
    assert len(set(plan.hosts)) == 40 and not plan.skipped


def test_canary_and_waves_spread_across_racks_and_never_take_a_whole_rack() -> None:
    plan = plan_campaign(
        _fleet({"r1": 4, "r2": 4, "r3": 2}),
        canary=2,
        waves=[WaveSize(percent=100)],
        limits=Limits(max_rack_share=0.5, pool_floor=0.0),
    )
    assert {h.split("-")[0] for h in plan.waves[0]} == {"r1", "r2"}  # canary: two racks
    for wave in plan.waves:
        for rack, size in (("r1", 4), ("r2", 4), ("r3", 2)):
            assert sum(1 for h in wave if h.startswith(rack)) <= size // 2
    assert sorted(plan.hosts) == sorted(c.name for c in _fleet({"r1": 4, "r2": 4, "r3": 2}))
    assert plan.notes and "rack/pool limits" in plan.notes[0]


def test_pool_floor_limits_what_one_wave_takes_from_a_pool() -> None:
    hosts = [Candidate(f"h{i}", A, f"r{i}", "small") for i in range(4)]
    plan = plan_campaign(hosts, canary=0, waves=parse_waves("100%"),
                         limits=Limits(max_rack_share=1.0, pool_floor=0.75))
    assert [len(w) for w in plan.waves] == [0, 1, 1, 1, 1]  # 25% of 4 at a time


def test_skipped_hosts_and_why() -> None:
    hosts = [
        Candidate("a", A, "r1"),
        Candidate("q", HostState.QUARANTINED, "r1", fault="gpu_lost"),
        Candidate("m", HostState.MAINTENANCE, "r1", status_reason="RMA 42 (bob)"),
        Candidate("l", HostState.ALLOCATED, "r2"),
        Candidate("v", HostState.VALIDATING, "r2"),
    ]
    plan = plan_campaign(hosts, canary=1, waves=parse_waves("100%"))
    why = {k.host: k.reason for k in plan.skipped}
    assert why["q"] == "quarantined (gpu_lost): skipped"
    assert why["m"] == "in maintenance by someone else: RMA 42 (bob): skipped, not taken over"
    assert why["v"].startswith("validating: not taken")
    assert plan.waiting == ["l"] and "l" in plan.waves[-1]  # waits for its lease, last wave
    skip = plan_campaign(hosts, canary=1, waves=parse_waves("100%"),
                         policy=AllocatedPolicy.SKIP)
    assert {k.host: k.reason for k in skip.skipped}["l"] == "allocated: skipped by policy"
    assert "l" not in skip.hosts


@pytest.mark.parametrize("bad", ["", "10%,5%", "0%", "150%", "x", "2.5"])
def test_bad_waves_are_refused(bad: str) -> None:
    with pytest.raises(ConfigError, match="--waves"):
        parse_waves(bad)


def test_shares() -> None:
    assert parse_share("50%", "--pool-floor") == 0.5
    with pytest.raises(ConfigError, match="--pool-floor"):
        parse_share("50", "--pool-floor")


def test_loaded_driver_must_be_the_target_and_have_changed() -> None:
    assert driver_problem("535.1", "570.2", "570.2") is None
    assert driver_problem("535.1", "535.1", "570.2") == (
        "loaded driver 535.1, target 570.2 (the old driver is still loaded)"
    )
    assert driver_problem("535.1", None, "570.2") is not None  # fail closed
    assert driver_problem("535.1", "535.1", None) is None  # no driver pinned: nothing to judge


def test_halting() -> None:
    assert should_halt(1, 5, canary=True)
    assert not should_halt(0, 0, canary=True)
    assert not should_halt(1, 1, canary=False) and should_halt(2, 1, canary=False)
    assert progress_bar(1, 4, width=8) == "[##......]"
