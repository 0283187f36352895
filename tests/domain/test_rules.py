"""Health rules (issue 10 item 3): the shipped policy, overlays, and the anti-flap machinery
(consecutive observations, grace after boot, counts within a window, one finding clearing
another, topology-aware suppression), evaluated on plain samples."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from gpufleet.domain.rules import (
    Action,
    GpuSample,
    HostSample,
    PortSample,
    RulePolicy,
    Severity,
    XidSeen,
    evaluate_host,
    fleet_medians,
    same_pci,
)
from gpufleet.domain.xid import XidPolicy
from gpufleet.errors import ConfigError

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
POLICY = RulePolicy.load_default()
XIDS = XidPolicy.load_default()
H100 = "NVIDIA H100 80GB HBM3"


def gpu(index: int = 0, **kw: object) -> GpuSample:
    base = GpuSample(
        index=index,
        uuid=f"GPU-{index}",
        model=H100,
        pci_bus_id=f"00000000:{0x19 + index:02X}:00.0",
        temperature_c=60,
        power_w=630,
        sm_clock_mhz=1980,
        utilization_gpu_pct=100,
        ecc_volatile_uncorrectable=0,
        pcie_width=16,
        pcie_width_max=16,
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def sample(minutes: int, gpus: list[GpuSample] | None = None, **kw: object) -> HostSample:
    s = HostSample(at=T0 + timedelta(minutes=minutes), gpus=tuple(gpus or [gpu()]), uptime_s=1e6)
    return replace(s, **kw)  # type: ignore[arg-type]


def rules_of(history: list[HostSample], **medians: float) -> list[tuple[str, Severity, Action]]:
    meds = {(H100, k): v for k, v in medians.items()}
    return sorted(
        (f.rule, f.severity, f.action) for f in evaluate_host(POLICY, history, meds, XIDS)
    )


def test_shipped_policy_is_versioned_and_uses_the_ladder() -> None:
    assert POLICY.version.startswith("2026.")
    assert {r.action for r in POLICY.rules if r.action} <= set(Action)
    assert POLICY.rule("xid-64").action is Action.RESEAT_OR_REPLACE  # RMA, per the issue


def test_temperature_needs_two_sweeps_in_a_row_and_clears_the_warm_rule() -> None:
    hot = [gpu(temperature_c=92)]
    assert rules_of([sample(0), sample(5, hot)]) == []  # one observation: not yet
    assert rules_of([sample(0, hot), sample(5, hot)]) == [
        ("gpu-temperature", Severity.CRITICAL, Action.ESCALATE)
    ]  # the warm warning is cleared by the critical one on the same GPU
    warm = [gpu(temperature_c=86)]
    assert rules_of([sample(0, warm), sample(5, warm), sample(10, warm)]) == [
        ("gpu-temperature-warm", Severity.WARNING, Action.NONE)
    ]


def test_xid_defaults_come_from_the_catalog_and_count_in_a_window() -> None:
    x79 = XidSeen(79, "PCI:0000:1a:00", T0)
    got = evaluate_host(POLICY, [sample(0, [gpu(0), gpu(1)], xids=(x79,))], {}, XIDS)
    (f,) = got
    assert (f.rule, f.action, f.gpu_index) == ("xid-79", Action.REBOOT, 1)  # RESTART_BM
    # Out of the window (an hour later, no new line): cleared.
    assert rules_of([sample(0, xids=(x79,)), sample(61)]) == []
    # Xid 74 needs three within the hour, and only on NVLink hosts.
    x74 = tuple(XidSeen(74, "PCI:0000:19:00", T0 + timedelta(minutes=i)) for i in range(3))
    assert rules_of([sample(0, xids=x74, nvlink=True)])[0][0] == "xid-nvlink"
    assert rules_of([sample(0, xids=x74, nvlink=False)]) == []  # PCIe GPUs: suppressed
    assert rules_of([sample(0, xids=x74[:2], nvlink=True)]) == []


def test_grace_after_boot_suppresses_link_rules() -> None:
    def port(downed: int) -> tuple[PortSample, ...]:
        return (PortSample("mlx5_0/1", "ACTIVE", {"link_downed": downed}),)

    history = [sample(0, ports=port(0)), sample(5, ports=port(2))]
    assert rules_of(history) == [("ib-link-downed", Severity.CRITICAL, Action.ESCALATE)]
    booting = [replace(s, uptime_s=120.0) for s in history]
    assert rules_of(booting) == []
    # A counter reset (reboot) counts from zero, not as a negative increase.
    assert rules_of([sample(0, ports=port(5)), sample(5, ports=port(0))]) == []


def test_grace_after_a_driver_reload_without_a_reboot() -> None:
    def port(downed: int) -> tuple[PortSample, ...]:
        return (PortSample("mlx5_0/1", "ACTIVE", {"link_downed": downed}),)

    up_for_days = [
        replace(sample(0, ports=port(0)), uptime_s=9e5),
        replace(sample(5, ports=port(2)), uptime_s=9e5 + 300),
    ]
    assert rules_of(up_for_days) == [("ib-link-downed", Severity.CRITICAL, Action.ESCALATE)]
    reloaded = [replace(s, driver_age_s=60.0) for s in up_for_days]  # modprobe a minute ago
    assert reloaded[-1].settled_s == 60.0 and rules_of(reloaded) == []
    settled = [replace(s, driver_age_s=901.0) for s in up_for_days]  # past the 900 s grace
    assert rules_of(settled) == [("ib-link-downed", Severity.CRITICAL, Action.ESCALATE)]
    assert replace(up_for_days[-1], uptime_s=None).settled_s is None


def test_straggler_against_the_fleet_median_of_the_same_model() -> None:
    fleet = [sample(0, [gpu(i) for i in range(8)]) for _ in range(3)]
    slow = sample(0, [gpu(0), gpu(1, sm_clock_mhz=1100, power_w=300)])
    medians = fleet_medians([*fleet, slow], POLICY.rules)
    assert medians[(H100, "sm_clock_mhz")] == 1980
    got = evaluate_host(POLICY, [slow], medians, XIDS)
    assert [(f.rule, f.gpu_index) for f in got] == [("straggler-clocks", 1)]  # clears power
    idle = sample(0, [gpu(1, sm_clock_mhz=300, utilization_gpu_pct=0)])
    assert evaluate_host(POLICY, [idle], medians, XIDS) == []  # not under load
    brake = sample(0, [gpu(2, sm_clock_mhz=1100, reasons=frozenset({"hw_power_brake_slowdown"}))])
    got = evaluate_host(
        POLICY, [brake, replace(brake, at=T0 + timedelta(minutes=5))], medians, XIDS
    )
    assert [f.rule for f in got] == ["hw-power-brake"]


def test_gpu_query_failure_is_not_healthy_and_not_a_finding() -> None:
    s = HostSample(at=T0, gpus=None)
    assert evaluate_host(POLICY, [s], {}, XIDS) == []


def test_overlay_changes_a_rule_by_id_adds_one_and_refuses_nonsense() -> None:
    site = POLICY.merged(
        "rules:\n"
        "  - {id: gpu-temperature, value: 80, consecutive: 1}\n"
        "  - {id: ecc-correctable-rate, enabled: false}\n"
        "  - {id: fan-stuck, kind: threshold, metric: fan_pct, op: '<', value: 5,"
        " severity: warning, action: reseat_or_replace}\n",
        source="site.yaml",
    )
    assert site.version == f"{POLICY.version}+site"
    assert site.rule("gpu-temperature").value == 80
    assert site.rule("gpu-temperature").severity is Severity.CRITICAL  # kept
    assert not site.rule("ecc-correctable-rate").enabled
    assert rules_of([sample(0)]) == []
    got = evaluate_host(site, [sample(0, [gpu(temperature_c=82, fan_pct=0)])], {}, XIDS)
    assert sorted(f.rule for f in got) == ["fan-stuck", "gpu-temperature"]
    with pytest.raises(ConfigError, match=r"site.yaml:2: rule 'x'.*metric"):
        POLICY.merged("rules:\n  - {id: x, kind: threshold, severity: info}\n", source="site.yaml")
    with pytest.raises(ConfigError, match="clears unknown"):
        POLICY.merged("rules:\n  - {id: gpu-temperature, clears: [nope]}\n")


def test_same_pci_reads_both_spellings() -> None:
    assert same_pci("PCI:0000:19:00", "00000000:19:00.0")
    assert not same_pci("PCI:0000:1a:00", "00000000:19:00.0")
    assert not same_pci(None, "00000000:19:00.0")
