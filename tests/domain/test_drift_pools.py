"""Issue 26: a pool compared with its baseline (domain.drift.pool_drift) and pins given on
top of a host's values (domain.pins.overlay_pins)."""

from __future__ import annotations

from gpufleet.domain.drift import DriftItem, pool_drift
from gpufleet.domain.pins import PinChange, overlay_pins, pins_given


def test_pool_drift_groups_hosts_by_value_and_by_the_baseline_they_follow() -> None:
    new = [DriftItem("driver", "550.90.07", "570.86.15"), DriftItem("cuda", "12.4", "12.8")]
    against = {"a": [], "b": list(new), "c": list(new), "d": [DriftItem("sysctl.x", "1", None)]}
    p = pool_drift("train", "b-old", against, {"a": "b-old", "b": "b-new", "c": "b-new",
                                               "d": "b-old"})
    assert p.drifts and p.hosts == ["a", "b", "c", "d"]
    assert p.matching == ["a"] and p.on_other == {"b-new": ["b", "c"]}
    assert [(f.field, f.matching, f.others) for f in p.fields] == [
        ("driver", 2, {"570.86.15": ["b", "c"]}),
        ("cuda", 2, {"12.8": ["b", "c"]}),
        ("sysctl.x", 3, {"unset": ["d"]}),
    ]
    assert p.describe() == (
        "pool train: baseline b-old; 1 of 4 hosts match it; 2 follow b-new (b, c); "
        "driver 550.90.07 (baseline) on 2 hosts, 570.86.15 on 2; "
        "cuda 12.4 (baseline) on 2 hosts, 12.8 on 2; sysctl.x 1 (baseline) on 3 hosts, unset on 1"
    )


def test_a_pool_on_its_baseline_does_not_drift() -> None:
    p = pool_drift("p", "b", {"a": [], "b": []}, {"a": "b", "b": "b"})
    assert not p.drifts and p.matching == ["a", "b"] and p.fields == []


def test_pins_given_go_on_top_of_the_host_values() -> None:
    host = {"driver": "550.90.07", "cuda": "12.4", "kernel": "5.15.0-105-generic",
            "sysctls": {"vm.swappiness": "10", "kernel.numa_balancing": "0"}}
    given = pins_given({"driver": "570.86.15", "cuda": None, "kernel": "5.15.0-105-generic",
                        "sysctls": {"vm.swappiness": "1"}, "vbios": []})
    assert set(given) == {"driver", "kernel", "sysctls"}
    values, changes = overlay_pins(host, given)
    assert values["driver"] == "570.86.15" and values["cuda"] == "12.4"
    assert values["sysctls"] == {"vm.swappiness": "1", "kernel.numa_balancing": "0"}
    assert changes == [
        PinChange("driver", "--driver", "550.90.07", "570.86.15"),
        PinChange("sysctls", "--sysctl", {"vm.swappiness": "10", "kernel.numa_balancing": "0"},
                  {"vm.swappiness": "1", "kernel.numa_balancing": "0"}),
    ]
