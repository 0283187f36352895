from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

import pytest
from tests.domain.conftest import DCGM_L2

from gpufleet.collect.active import parse_gpu_burn, parse_nccl_tests
from gpufleet.domain.checks import CHECKS, ActiveEvidence, CheckStatus
from gpufleet.domain.evidence import NcclResult
from gpufleet.domain.facts import HostFacts, XidEvent
from gpufleet.domain.health import Fault, Health
from gpufleet.domain.profiles import Decision, evaluate, load_profiles
from gpufleet.domain.spec import Baseline, BaselineStatus, ExpectedSpec
from gpufleet.domain.states import Event
from gpufleet.domain.xid import XidPolicy
from gpufleet.errors import ConfigError
from gpufleet.lab.captures import captures_dir

Facts = Callable[..., HostFacts]
ALL = {"training-nvl-domain", "training-multinode", "training-single", "inference", "test"}
#: The profiles of the nodes that are not GPU nodes (issue 26 item 9): never judge a GPU host.
NODES = {"cpu", "storage"}
#: What a clean H100 HGX host can pass: every profile but the one that needs a multi-node
#: NVLink domain (GB200/GB300 NVL72; its fabric reports no cluster).
HGX = ALL - {"training-nvl-domain"}


def test_packaged_profiles_load_and_reference_known_checks() -> None:
    profiles = load_profiles()
    assert set(profiles) == ALL | NODES
    assert {n for n, p in profiles.items() if p.role == "gpu"} == ALL
    for profile in profiles.values():
        assert set(profile.checks) <= set(CHECKS)
    multinode = profiles["training-multinode"].checks
    assert {"ib_ports", "nvlink", "nccl"} <= set(multinode)
    assert not multinode["nvlink"].get("advisory")
    assert "ib_ports" not in profiles["inference"].checks
    assert "ib_ports" not in profiles["training-single"].checks
    # test is the most lenient: everything it binds, every other profile binds too.
    binding = {n: {c for c, p in prof.checks.items() if not p.get("advisory")}
               for n, prof in profiles.items()}
    for name in ALL - {"test"}:
        assert binding["test"] <= binding[name], name


def test_user_overlay_merges_adds_and_removes() -> None:
    user = """
profiles:
  inference:
    checks:
      xid: {window_hours: 6}
      persistence_mode: false
  burn-in:
    description: long soak
    extends: training-single
    checks:
      gpu_burn: {require: true}
"""
    profiles = load_profiles(user)
    assert profiles["inference"].checks["xid"] == {"window_hours": 6}
    assert "persistence_mode" not in profiles["inference"].checks
    # Descendants see the overlaid parent.
    assert "persistence_mode" not in profiles["training-single"].checks
    assert profiles["burn-in"].checks["gpu_burn"] == {"require": True}
    assert profiles["burn-in"].description == "long soak"
    assert "nvlink" in profiles["burn-in"].checks


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("profiles:\n  p:\n    checks:\n      gpu_cnt: {}\n",
         "profile 'p': unknown check 'gpu_cnt'"),
        ("profiles:\n  p:\n    checks:\n      xid: {window: 3}\n",
         "profile 'p': check 'xid': unknown parameter 'window'"),
        ("profiles:\n  p:\n    checks:\n      xid: {window_hours: soon}\n",
         "profile 'p': check 'xid': parameter 'window_hours' must be int or float"),
        ("profiles:\n  p:\n    checks:\n      retired_pages: {threshold: true}\n",
         "check 'retired_pages': parameter 'threshold' must be int"),
        ("profiles:\n  p:\n    checks:\n      xid: {now: 1}\n",
         "check 'xid': parameter 'now' is reserved"),
        ("profiles:\n  p:\n    checks:\n      xid: [1]\n", "parameters must be a mapping"),
        ("profiles:\n  p:\n    extends: nope\n", "profile 'p': extends unknown profile 'nope'"),
        ("profiles:\n  a: {extends: b}\n  b: {extends: a}\n", "'extends' cycle"),
        ("profiles:\n  p: {check: {}}\n", "profile 'p': unknown key(s) check"),
        ("profiles: [1]\n", "expected a top-level 'profiles' mapping"),
        ("profiles: {p: {checks: {xid: {}}\n", "invalid YAML"),
    ],
)
def test_invalid_profiles_name_profile_and_check(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_profiles(text, source="site.yaml")
    assert message in str(info.value)


def test_empty_user_file_is_fine() -> None:
    assert set(load_profiles("")) == ALL | NODES


# ------------------------------------------------------------------------ evaluate


def test_clean_host_available_for_every_profile(
    facts: HostFacts, spec: ExpectedSpec, baseline: Baseline, now: datetime,
    proof: ActiveEvidence,
) -> None:
    out = evaluate(facts, spec, baseline, load_profiles(), None, now, evidence=proof)
    assert out.decision is Decision.AVAILABLE
    assert out.event is Event.VALIDATION_PASSED
    assert out.profiles_passed == HGX
    assert out.results["nvl_fabric[training-nvl-domain]"].status is CheckStatus.FAIL
    assert out.faults == set() and out.health is Health.OK and out.reasons == []


def test_training_profiles_need_proof(
    facts: HostFacts, spec: ExpectedSpec, baseline: Baseline, now: datetime
) -> None:
    """Issue 24 item 5: no active test ever ran, so no training profile (on main 84be469 the
    clean host was training-multinode with dcgm_diag, nccl and gpu_burn all `skip`)."""
    since = ActiveEvidence(since="the driver change on 2026-12-01")
    out = evaluate(facts, spec, baseline, load_profiles(), None, now, evidence=since)
    assert out.decision is Decision.AVAILABLE
    assert out.profiles_passed == {"inference", "test"}
    assert out.profiles["training-single"].reasons == [
        "dcgm_diag: no DCGM diag at level 1 or deeper or gpu-burn result since the driver "
        "change on 2026-12-01 (required)"
    ]
    assert out.profiles["training-multinode"].reasons == [
        "dcgm_diag: no DCGM diag at level 2 or deeper result since the driver change on "
        "2026-12-01 (required)",
        "nccl: no NCCL all-reduce result since the driver change on 2026-12-01 (required)",
    ]


def test_training_single_takes_gpu_burn_multinode_wants_dcgm_level_2(
    facts: HostFacts, spec: ExpectedSpec, baseline: Baseline, now: datetime,
    proof: ActiveEvidence,
) -> None:
    burn = parse_gpu_burn(
        (captures_dir() / "active/superbench_gpu_burn.excerpt.log").read_text()
    )
    out = evaluate(facts, spec, baseline, load_profiles(), None, now,
                   evidence=ActiveEvidence(gpu_burn=burn, nccl=proof.nccl))
    assert out.profiles_passed == {"inference", "test", "training-single"}
    assert out.profiles["training-multinode"].reasons[0].startswith(
        "dcgm_diag: no DCGM diag at level 2")
    # A level-1 diag (or one whose level nobody recorded) is not enough for multinode.
    assert proof.dcgm_diag is not None
    for level in (1, None):
        shallow = proof.dcgm_diag.model_copy(update={"level": level})
        out = evaluate(facts, spec, baseline, load_profiles(), None, now,
                       evidence=ActiveEvidence(dcgm_diag=shallow, nccl=proof.nccl))
        assert out.profiles_passed == {"inference", "test", "training-single"}, level
        assert "level 2 required" in out.profiles["training-multinode"].reasons[0]


def test_nccl_below_the_model_floor_is_not_multinode(
    facts: HostFacts, spec: ExpectedSpec, baseline: Baseline, now: datetime,
    proof: ActiveEvidence,
) -> None:
    """The real 8x A100 all_reduce_perf run (235 GB/s peak) meets the A100 floor but is far
    below what an H100 SXM host must reach."""
    a100 = parse_nccl_tests(
        (captures_dir() / "active/superbench_nccl_allreduce.log").read_text()
    )
    ev = ActiveEvidence(dcgm_diag=proof.dcgm_diag, nccl=a100)
    out = evaluate(facts, spec, baseline, load_profiles(), None, now, evidence=ev)
    assert "training-multinode" not in out.profiles_passed
    assert out.profiles["training-multinode"].reasons == [
        "nccl: NCCL all-reduce peak busbw 235.26 GB/s below the H100 SXM5 floor 315 GB/s"
    ]
    a100_host = facts.model_copy(update={"nvidia_smi": facts.nvidia_smi.model_copy(update={
        "gpus": [g.model_copy(update={"product_name": "NVIDIA A100-SXM4-80GB"})
                 for g in facts.gpus]})}) if facts.nvidia_smi else facts
    a100_spec = spec.model_copy(update={"gpu_model": "A100"})
    out = evaluate(a100_host, a100_spec, None, load_profiles(), None, now, evidence=ev)
    assert out.results["nccl"].status is CheckStatus.PASS
    assert out.results["nccl"].message == (
        "NCCL all-reduce peak busbw 235.26 GB/s (floor 210 GB/s)")


def test_training_profiles_need_a_validated_baseline(
    facts: HostFacts, spec: ExpectedSpec, baseline: Baseline, now: datetime,
    proof: ActiveEvidence,
) -> None:
    """On main 84be469 a host without a baseline got every pin check `skip` and was still
    validated for training."""
    out = evaluate(facts, spec, None, load_profiles(), None, now, evidence=proof)
    assert out.profiles_passed == {"inference", "test"}
    assert out.profiles["training-single"].reasons == ["baseline: no baseline assigned"]
    assert out.profiles["training-multinode"].reasons == ["baseline: no baseline assigned"]
    draft = baseline.model_copy(update={"status": BaselineStatus.CANDIDATE})
    out = evaluate(facts, spec, draft, load_profiles(), None, now, evidence=proof)
    assert out.profiles["training-single"].reasons == [
        "baseline: baseline h100-2024q3 is candidate, validated required"]
    # A site that does not want it says so in its profiles file.
    relaxed = load_profiles("profiles:\n  training-single:\n    checks:\n      baseline: false\n")
    out = evaluate(facts, spec, None, relaxed, None, now, evidence=proof)
    assert "training-single" in out.profiles_passed


def test_each_check_runs_once_per_distinct_params(
    facts: HostFacts, spec: ExpectedSpec, baseline: Baseline, now: datetime
) -> None:
    profiles = load_profiles("profiles:\n  inference:\n    checks:\n      xid: {window_hours: 6}\n")
    out = evaluate(facts, spec, baseline, profiles, None, now)
    # One run for every check name, plus one for inference's different xid window, one
    # for each training profile's own dcgm_diag parameters and one for training-nvl-domain's
    # nvl_fabric (training-multinode's is test's without `advisory`: the same run).
    # (a GPU host's: the cpu/storage profiles' checks do not run on it)
    names = {c for p in profiles.values() if p.role == "gpu" for c in p.checks}
    assert len(out.results) == len(names) + 4
    assert "no_accelerators" not in out.results and "cpu" not in out.profiles
    assert out.profiles["inference"].checks["xid"] == "xid[inference]"
    assert out.profiles["test"].checks["xid"] == "xid"


def test_advisory_failure_does_not_fail_the_profile(
    facts_factory: Facts, spec: ExpectedSpec, baseline: Baseline, now: datetime
) -> None:
    f = facts_factory(gpu={4: {"persistence_mode": False}})
    out = evaluate(f, spec, baseline, load_profiles(), None, now)
    assert out.results["persistence_mode"].status is CheckStatus.FAIL
    assert out.profiles_passed == {"test"}
    assert out.decision is Decision.AVAILABLE


def test_no_profiles_stays_validating(
    facts: HostFacts, spec: ExpectedSpec, baseline: Baseline, now: datetime
) -> None:
    out = evaluate(facts, spec, baseline, {}, None, now)
    assert out.decision is Decision.STAY_VALIDATING and out.reasons == ["no profiles configured"]


def test_hardware_faults_are_configurable(
    facts_factory: Facts, spec: ExpectedSpec, baseline: Baseline, now: datetime
) -> None:
    f = facts_factory(fabricmanager_active=False)
    out = evaluate(f, spec, baseline, load_profiles(), None, now,
                   hardware_faults=frozenset({Fault.FABRICMANAGER_DOWN}))
    assert out.decision is Decision.QUARANTINE and out.health is Health.CRITICAL


def test_evidence_reaches_evidence_checks(
    facts: HostFacts, spec: ExpectedSpec, baseline: Baseline, now: datetime
) -> None:
    user = "profiles:\n  training-multinode:\n    checks:\n      nccl: {min_busbw_gbps: 300}\n"
    out = evaluate(facts, spec, baseline, load_profiles(user), None, now,
                   evidence=ActiveEvidence(dcgm_diag=DCGM_L2, nccl=NcclResult(
                       op="all_reduce", max_bus_bw_gbps=130.0, avg_bus_bw_gbps=120.0,
                       size_max_bytes=8 << 30)))
    assert out.profiles_passed == HGX - {"training-multinode"}
    assert out.faults == {Fault.DIAG_FAILED}
    assert out.health is Health.WARNING


# --------------------------------------------------------- the acceptance scenario


def test_pool_of_sixteen(
    facts_factory: Facts, spec: ExpectedSpec, baseline: Baseline, now: datetime,
    port_factory: Callable[..., object], proof: ActiveEvidence,
) -> None:
    """A: off-baseline driver; B: IB port down; C: GPU lost from the driver; D: Xid 79."""
    down_port = [port_factory(f"mlx5_{i}", f"0x{i}") for i in range(4)]
    down_port[2] = port_factory("mlx5_2", "0x2", state="Down", physical_state="Polling")
    xid79 = XidEvent(code=79, pci_address="PCI:0000:3a:00", time=now - timedelta(minutes=20),
                     message="NVRM: Xid (PCI:0000:3a:00): 79, pid=0, GPU has fallen off the bus.")
    hosts = {f"gpu-{i:02d}": facts_factory(hostname=f"gpu-{i:02d}") for i in range(16)}
    hosts["gpu-00"] = facts_factory(  # A (the fabric manager upgraded with the driver)
        smi={"driver_version": "535.154.05"}, fabricmanager_version="535.154.05"
    )
    hosts["gpu-01"] = facts_factory(ib_ports=down_port)  # B
    hosts["gpu-02"] = facts_factory(hidden_gpus={5})  # C
    hosts["gpu-03"] = facts_factory(xids=[xid79])  # D

    profiles = load_profiles()
    policy = XidPolicy.load_default()
    out = {
        h: evaluate(f, spec, baseline, profiles, policy, now, evidence=proof)
        for h, f in hosts.items()
    }

    a = out["gpu-00"]
    assert a.decision is Decision.STAY_VALIDATING and a.event is Event.VALIDATION_FAILED
    assert a.profiles_passed == set()
    assert [r.name for r in a.drift] == ["driver_version"]
    assert a.reasons == [
        "driver_version: drift from baseline h100-2024q3: driver 535.154.05, expected 550.90.07",
        # what training-nvl-domain needs and an HGX host is not (a fact, no fault)
        "nvl_fabric: not in a multi-node NVLink domain (required)",
    ]
    assert a.faults == set()

    b = out["gpu-01"]
    assert b.decision is Decision.AVAILABLE
    assert b.profiles_passed == {"inference", "training-single", "test"}
    assert b.faults == {Fault.IB_DOWN} and b.health is Health.WARNING
    assert "mlx5_2/1 (Down/Polling 400 Gb/s)" in b.profiles["training-multinode"].reasons[0]

    c = out["gpu-02"]
    assert c.decision is Decision.QUARANTINE and c.event is Event.HARDWARE_FAULT
    assert Fault.GPU_LOST in c.faults and c.health is Health.CRITICAL
    assert "driver sees 7 of 8 NVIDIA GPUs" in c.reasons[0]

    d = out["gpu-03"]
    assert d.decision is Decision.QUARANTINE
    assert d.faults == {Fault.FATAL_XID}
    assert d.reasons == [
        "xid: fatal Xid 79 (GPU_HAS_FALLEN_OFF_THE_BUS, RESTART_BM) x1 on PCI:0000:3a:00"
    ]

    for host in sorted(hosts)[4:]:
        assert out[host].decision is Decision.AVAILABLE, host
        assert out[host].profiles_passed == HGX, host


def test_host_without_fabric_is_not_a_multinode_training_host(
    facts: HostFacts, spec: ExpectedSpec, baseline: Baseline, now: datetime,
    proof: ActiveEvidence,
) -> None:
    # An inference box (no fabric expected) passes the single-host profiles only.
    no_fabric = spec.model_copy(update={"fabric": "none", "ib_ports": None})
    out = evaluate(facts, no_fabric, baseline, load_profiles(), None, now, evidence=proof)
    assert out.decision is Decision.AVAILABLE
    assert "training-multinode" not in out.profiles_passed
    assert {"inference", "training-single", "test"} <= out.profiles_passed
    assert out.profiles["training-multinode"].reasons == [
        "ib_ports: no high-speed fabric expected"]
