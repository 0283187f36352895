from __future__ import annotations

from collections.abc import Callable

from gpufleet.domain.drift import DriftItem, DriftSummary, diff_against_baseline, summarize_drift
from gpufleet.domain.facts import HostFacts, OsRelease
from gpufleet.domain.spec import Baseline

Facts = Callable[..., HostFacts]


def test_clean_host_has_no_drift(facts: HostFacts, baseline: Baseline) -> None:
    assert diff_against_baseline(facts, baseline) == []


def test_every_field(facts_factory: Facts, baseline: Baseline) -> None:
    f = facts_factory(
        os=OsRelease(id="ubuntu", version_id="24.04", pretty_name="Ubuntu 24.04 LTS"),
        kernel="6.8.0-40-generic",
        smi={"driver_version": "535.154.05", "cuda_version": "12.2"},
        gpu={1: {"vbios_version": "96.00.74.00.0B"}, 2: {"vbios_version": "96.00.74.00.0B"},
             3: {"vbios_version": "96.00.61.00.01"}},
        sysctls={"vm.swappiness": "60", "net.ipv4.tcp_rmem": "4096 87380   16777216"},
    )
    assert diff_against_baseline(f, baseline) == [
        DriftItem("os_image", "Ubuntu 22.04.4 LTS", "Ubuntu 24.04 LTS"),
        DriftItem("kernel", "5.15.0-105-generic", "6.8.0-40-generic"),
        DriftItem("driver", "550.90.07", "535.154.05"),
        DriftItem("cuda", "12.4", "12.2"),
        DriftItem("vbios", "96.00.89.00.01", "96.00.74.00.0B"),
        DriftItem("vbios", "96.00.89.00.01", "96.00.61.00.01"),
        DriftItem("sysctl.vm.swappiness", "10", "60"),
    ]


def test_unknown_facts_are_not_drift(facts_factory: Facts, baseline: Baseline) -> None:
    f = facts_factory(nvidia_smi=None, kernel=None, os=None, sysctls={})
    assert diff_against_baseline(f, baseline) == []


def test_summary_groups_and_describes() -> None:
    old = DriftItem("driver", "550.90.07", "535.154.05")
    items = {
        "gpu-01": [old],
        "gpu-02": [old, DriftItem("kernel", "5.15.0-105-generic", "5.15.0-91-generic")],
        "gpu-03": [old],
        "gpu-04": [DriftItem("driver", "550.90.07", "550.54.15")],
        "gpu-05": [DriftItem("sysctl.vm.swappiness", "10", None)],
        "gpu-06": [],
    }
    summary = summarize_drift(items)
    assert summary[0] == DriftSummary("driver", "535.154.05", "550.90.07",
                                      ["gpu-01", "gpu-02", "gpu-03"])
    assert [s.describe() for s in summary] == [
        "driver 535.154.05 on 3 hosts, baseline 550.90.07",
        "driver 550.54.15 on 1 host, baseline 550.90.07",
        "kernel 5.15.0-91-generic on 1 host, baseline 5.15.0-105-generic",
        "sysctl.vm.swappiness unset on 1 host, baseline 10",
    ]
    assert summarize_drift({}) == []


def test_pinned_toolkit_and_fabric_manager(facts_factory: Facts, baseline: Baseline) -> None:
    pinned = baseline.model_copy(update={"container_toolkit": "1.17.3",
                                         "fabric_manager": "550.90.07"})
    ok = facts_factory(container_toolkit="1.17.3", fabricmanager_version="550.90.07")
    assert [i for i in diff_against_baseline(ok, pinned)
            if i.field in ("container_toolkit", "fabric_manager")] == []
    # Not installed is drift when the baseline pins it.
    missing = facts_factory(container_toolkit=None, fabricmanager_version="535.129.03")
    items = {i.field: i for i in diff_against_baseline(missing, pinned)}
    assert items["container_toolkit"] == DriftItem("container_toolkit", "1.17.3", None)
    assert items["fabric_manager"] == DriftItem("fabric_manager", "550.90.07", "535.129.03")
