"""The inspection probe's ``fabric`` part and the multi-node NVLink health rules (issue 27
item 3) on lab GB200 rack trays (the real GB200 tray capture, EDITED per tray and fault:
lab/racks.py, tests/fixtures/captured/nvidia-smi-xml/PROVENANCE.md)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from gpufleet.collect.inspect import FABRIC_FIELDS, parse_probe, probe_script
from gpufleet.domain.rules import HostSample, RulePolicy, evaluate_host
from gpufleet.domain.samples import FABRIC_CONDITIONS
from gpufleet.domain.xid import XidPolicy
from gpufleet.lab.probe import render_probe
from gpufleet.lab.racks import create_racks
from gpufleet.service.health.inspect_store import REASON_BITS

AT = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
POLICY = RulePolicy.load_default()
XIDS = XidPolicy.load_default()
FLEET = create_racks("gb200-nvl72", 1, faults={
    "nvl01-t03": ["fabric-route-unhealthy"],
    "nvl01-t04": ["fabric-not-started"],
    "nvl01-t05": ["fabric-insufficient-resources"],
})


def sample(host: str, at: datetime = AT) -> HostSample:
    r = parse_probe(render_probe(FLEET.host(host), probe_script()), at)
    assert r.problems == ()
    return r.sample


def findings(host: str, uptime_s: float = 864000.0, sweeps: int = 2) -> dict[str, set[int]]:
    history = [
        replace(sample(host, AT - timedelta(minutes=sweeps - 1 - i)), uptime_s=uptime_s)
        for i in range(sweeps)
    ]
    out: dict[str, set[int]] = {}
    for f in evaluate_host(POLICY, history, {}, XIDS):
        out.setdefault(f.rule, set()).add(f.gpu_index if f.gpu_index is not None else -1)
    return out


def test_the_probe_asks_for_the_fabric_apart_from_the_gpu_query() -> None:
    script = probe_script()
    assert "echo '@@probe fabric'" in script
    assert f"--query-gpu={','.join(FABRIC_FIELDS)} " in script


def test_healthy_tray_has_no_fabric_condition_and_no_finding() -> None:
    s = sample("nvl01-t01")
    assert s.gpus is not None and len(s.gpus) == 4
    assert all(not (g.reasons & FABRIC_CONDITIONS) for g in s.gpus)
    assert not any(r.startswith("nvl-") for r in findings("nvl01-t01"))


def test_route_unhealthy_raises_one_rack_scoped_finding() -> None:
    s = sample("nvl01-t03")
    assert s.gpus is not None
    flagged = [g.index for g in s.gpus if "nvl_fabric_rack" in g.reasons]
    assert len(flagged) == 1  # the fault GPU, as the mock-NVML capture shows it
    found = findings("nvl01-t03", sweeps=1)  # at once: no consecutive sweeps needed
    assert found == {"nvl-fabric-rack": set(flagged)}  # it clears nvl-fabric-failed


def test_fabric_not_started_fails_only_after_the_boot_grace() -> None:
    assert findings("nvl01-t04") == {"nvl-fabric-failed": {0, 1, 2, 3}}
    assert findings("nvl01-t04", uptime_s=120.0) == {}  # still registering after boot
    assert findings("nvl01-t04", sweeps=1) == {}  # seen once: not yet


def test_insufficient_resources_fails() -> None:
    assert findings("nvl01-t05") == {"nvl-fabric-failed": {0, 1, 2, 3}}


def test_a_driver_refusing_the_fabric_fields_is_no_failure() -> None:
    text = render_probe(FLEET.host("nvl01-t03"), probe_script())
    head, _, rest = text.partition("@@probe fabric\n")
    refused = head + "@@probe fabric\n@@rc 2\n" + rest[rest.index("@@probe kmsg"):]
    r = parse_probe(refused, AT)
    assert r.problems == () and r.sample.gpus is not None
    assert all(not (g.reasons & FABRIC_CONDITIONS) for g in r.sample.gpus)


def test_fabric_conditions_are_stored_with_the_sample() -> None:
    """The store keeps GPU reasons as bits (service/health/inspect_store.py): each condition has
    its own bit, so the rules see it again when they read the history back."""
    bits = [REASON_BITS[c] for c in sorted(FABRIC_CONDITIONS)]
    assert len(set(bits)) == len(bits) == 3
    assert not set(bits) & {b for k, b in REASON_BITS.items() if k not in FABRIC_CONDITIONS}
    rules = {r.id: r for r in POLICY.rules}
    assert {rules[i].metric for i in ("nvl-fabric-rack", "nvl-fabric-failed",
                                      "nvl-fabric-restricted")} == FABRIC_CONDITIONS


def test_restricted_fabric_warns_after_two_sweeps() -> None:
    from gpufleet.domain.samples import GpuSample

    def s(at: datetime) -> HostSample:
        g = GpuSample(index=0, reasons=frozenset({"nvl_fabric_restricted"}))
        return HostSample(at=at, gpus=(g,), uptime_s=864000.0)

    assert evaluate_host(POLICY, [s(AT)], {}, XIDS) == []
    found = evaluate_host(POLICY, [s(AT - timedelta(minutes=1)), s(AT)], {}, XIDS)
    assert [(f.rule, f.severity.value) for f in found] == [("nvl-fabric-restricted", "warning")]
