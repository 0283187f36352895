"""The vendor-neutral meaning of a vendor plugin's inspection (issue 24 item 3): the policy's
``device`` rules are validated at load, a tool that reports no health (rocm-smi) is no fault,
an Alarm, a warning and a port down are."""

from __future__ import annotations

import pytest

from gpufleet.domain.accelerators import (
    Accelerator,
    AcceleratorInventory,
    Health,
    Link,
    LinkState,
    Vendor,
)
from gpufleet.domain.device_health import (
    DeviceFault,
    device_faults,
    device_findings,
    device_ports,
    device_samples,
)
from gpufleet.domain.rules import RulePolicy
from gpufleet.errors import ConfigError

POLICY = RulePolicy.load_default()


def _inv(vendor: str, *accs: Accelerator) -> AcceleratorInventory:
    return AcceleratorInventory(vendor=Vendor(vendor), accelerators=accs)


def test_the_shipped_device_rules_and_their_scopes() -> None:
    rules = {r.id: r for r in POLICY.rules if r.kind == "device"}
    assert {i: (r.metric, r.scope, r.severity.value) for i, r in rules.items()} == {
        "accelerator-unhealthy": ("unhealthy", "gpu", "critical"),
        "accelerator-warning": ("warning", "gpu", "warning"),
        "accelerator-link-down": ("link-down", "port", "critical"),
    }


@pytest.mark.parametrize(
    ("row", "says"),
    [
        ("{id: x, kind: device, metric: nosuch, severity: warning}", "metric is one of"),
        (
            "{id: x, kind: device, metric: unhealthy, consecutive: 2, severity: warning}",
            "consecutive: 1",
        ),
        ("{id: x, kind: device, metric: link-down, scope: gpu, severity: warning}", "a port"),
    ],
)
def test_a_device_rule_the_engine_cannot_judge_is_refused(row: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        POLICY.merged(f"rules: [{row}]", source="site.yaml")


def test_a_site_overlay_changes_a_device_rule() -> None:
    site = POLICY.merged(
        "rules: [{id: accelerator-unhealthy, severity: warning, action: escalate}]", source="s"
    )
    alarm = DeviceFault("huawei", "unhealthy", "huawei 910B3 #3: health alarm", 3)
    (f,) = device_findings(site, [alarm])
    assert (f.rule, f.severity.value, f.action.value, f.gpu_index) == (
        "accelerator-unhealthy",
        "warning",
        "escalate",
        3,
    )
    off = POLICY.merged("rules: [{id: accelerator-unhealthy, enabled: false}]", source="s")
    assert device_findings(off, [alarm]) == []


def test_unknown_health_is_no_fault_but_alarm_warning_and_a_down_port_are() -> None:
    amd = _inv("amd", Accelerator(vendor=Vendor("amd"), index=0, model="Instinct MI100"))
    assert device_faults(amd) == ()
    npu = _inv(
        "huawei",
        Accelerator(
            vendor=Vendor("huawei"),
            index=0,
            model="910B3",
            health=Health.ALARM,
            error_codes=("A4025021",),
            links=(Link("roce", None, LinkState.DOWN), Link("hccs", "1", LinkState.UNKNOWN)),
        ),
        Accelerator(vendor=Vendor("huawei"), index=1, model="910B3", health=Health.WARNING),
    )
    got = [(f.kind, f.index, f.subject) for f in device_faults(npu)]
    assert got == [
        ("unhealthy", 0, None),
        ("warning", 1, None),
        ("link-down", 0, "huawei:0/roce"),
    ]
    # a peer link (HCCS) is no port sample; the RoCE port is
    assert [(p.name, p.state) for p in device_ports(npu)] == [("huawei:0/roce", "DOWN")]
    assert [g.index for g in device_samples(npu)] == [0, 1]
