"""Slurm decisions and node definitions as pure data (gpufleet.domain.slurm)."""

from __future__ import annotations

import pytest

from gpufleet.collect.nvidia_smi import parse_nvidia_smi_text
from gpufleet.domain.facts import HostFacts
from gpufleet.domain.gpu_health import GpuFaultPolicy, evaluate_gpus
from gpufleet.domain.profiles import load_profiles
from gpufleet.domain.slurm import (
    DEFAULT_GPU_FILES,
    ActionKind,
    NodeDef,
    SlurmNode,
    decide,
    drain_reason,
    gpu_minors,
    gres_line,
    gres_type,
    minor_ranges,
    node_features,
    node_line,
    plan,
    reason_code,
    render_gres_conf,
    sanitize_feature,
    slurm_signal,
    usable_gpus,
)
from gpufleet.domain.spec import ExpectedSpec
from gpufleet.domain.states import HostState
from gpufleet.domain.xid import XidPolicy
from gpufleet.lab.captures import captures_dir
from gpufleet.testing import NOW

Q = HostState.QUARANTINED
OURS = "gpufleet:quarantined:fatal_xid Xid 79 on GPU 3"


def idle(name: str = "n1", **kw: object) -> SlurmNode:
    return SlurmNode(name, "idle", **kw)  # type: ignore[arg-type]


def drained(reason: str, name: str = "n1", state: str = "idle") -> SlurmNode:
    return SlurmNode(name, state, frozenset({"DRAIN"}), reason)


def test_quarantined_host_is_drained_with_a_prefixed_stable_reason() -> None:
    reason = drain_reason(Q, "fatal_xid", "Xid 79 on GPU 3\n(fell off)")
    assert reason == "gpufleet:quarantined:fatal_xid Xid 79 on GPU 3 (fell off)"
    d = decide(idle(), Q, reason)
    assert d.action is ActionKind.DRAIN and d.reason == reason


@pytest.mark.parametrize("state", [HostState.MAINTENANCE, HostState.VALIDATING,
                                   HostState.RECLAIMING, HostState.ENROLLED, HostState.RETIRED])
def test_hosts_not_ready_are_drained(state: HostState) -> None:
    assert decide(idle(), state, drain_reason(state, None, None)).action is ActionKind.DRAIN


def test_renamed_check_text_keeps_the_node_ours_and_it_is_resumed() -> None:
    # the drain was set by an older gpufleet whose check had another name: the code decides
    old = drained("gpufleet:quarantined:fatal_xid check 'xid-fatal-v1' failed")
    assert reason_code(old.reason) == "quarantined:fatal_xid"
    now = drain_reason(Q, "fatal_xid", "xid_policy: Xid 79")
    assert decide(old, Q, now).action is ActionKind.NONE  # same code: no churn
    assert decide(old, HostState.AVAILABLE, None).action is ActionKind.RESUME


def test_a_new_code_replaces_our_reason_but_never_theirs() -> None:
    ours = drained(OURS)
    maint = drain_reason(HostState.MAINTENANCE, None, "PSU swap")
    d = decide(ours, HostState.MAINTENANCE, maint)
    assert d.action is ActionKind.DRAIN and d.reason == "gpufleet:maintenance PSU swap"
    theirs = drained("admin: fan noise")
    assert decide(theirs, HostState.MAINTENANCE, maint).action is ActionKind.NONE


def test_someone_elses_drain_is_never_resumed() -> None:
    for reason in ("admin: fan noise", "gpufleet fixed it", " gpufleet:x", "GPUFLEET:q"):
        d = decide(drained(reason), HostState.AVAILABLE, None)
        assert d.action is ActionKind.NONE, reason


def test_rebooting_or_revalidating_host_stays_drained() -> None:
    node = drained("gpufleet:quarantined:gpu_lost GPU 3 lost", state="down")
    for state in (HostState.VALIDATING, HostState.RECLAIMING):
        d = decide(node, state, drain_reason(state, None, "reboot by remediation"))
        assert d.action is ActionKind.DRAIN  # reason moves to the new code, still drained
        assert d.reason and d.reason.startswith("gpufleet:" + str(state))
    assert slurm_signal(node) is None  # down under our own drain: expected, no alarm
    assert decide(node, HostState.ALLOCATED, None).action is ActionKind.RESUME


def test_slurms_own_drains_are_signals_not_resumed() -> None:
    gres = drained("gres/gpu count reported lower than configured (7 < 8)", state="idle")
    d = decide(gres, HostState.AVAILABLE, None)
    assert d.action is ActionKind.NONE
    assert d.signal is not None and d.signal.critical and "7 < 8" in d.signal.message
    fail = SlurmNode("n1", "down", frozenset({"DRAIN"}), "NODE_FAIL")
    assert decide(fail, HostState.AVAILABLE, None).signal is not None
    down = SlurmNode("n1", "down", frozenset(), "Not responding")
    assert (sig := slurm_signal(down)) is not None and not sig.critical
    assert slurm_signal(idle()) is None
    assert slurm_signal(drained("admin: fan noise")) is None  # a person's drain: no alarm


def test_plan_leaves_unknown_nodes_alone_and_sorts() -> None:
    nodes = [idle("b"), drained(OURS, "a"), idle("zz")]
    decisions = plan(nodes, {"a": (HostState.AVAILABLE, None), "b": (Q, "ecc_uncorrectable")},
                     {"b": "2 uncorrectable ECC errors"})
    assert [(d.node, d.action) for d in decisions] == [
        ("a", ActionKind.RESUME), ("b", ActionKind.DRAIN), ("zz", ActionKind.NONE)]
    assert decisions[1].reason == (
        "gpufleet:quarantined:ecc_uncorrectable 2 uncorrectable ECC errors")
    assert decisions[2].why == "not a gpufleet host"


def test_features_are_sanitised_to_slurms_charset() -> None:
    labels = {
        "gpufleet.io/fabric": "ib", "gpufleet.io/nvlink": "true",
        "gpufleet.io/validated.training-multinode": "true",
        "gpufleet.io/validated.Inference (fp8)": "true",
        "gpufleet.io/pool": "Team A,prod", "gpufleet.io/rack": "r12|b",
    }
    feats = node_features(labels, gres_type("NVIDIA H100 80GB HBM3"))
    assert feats == ("h100", "ib", "nvlink", "validated_inference_fp8",
                     "validated_training-multinode", "pool_team_a_prod", "rack_r12_b")
    for f in feats:
        assert not set(f) & set(",&|[]()*:= ")
    assert node_features({"gpufleet.io/fabric": "none"}, None) == ()
    assert sanitize_feature("--(x)--") == "x" and sanitize_feature("!!!") == ""


def test_gres_type_from_product_names() -> None:
    assert gres_type("NVIDIA A100-SXM4-80GB") == "a100"
    assert gres_type("Tesla V100-PCIE-32GB") == "v100"
    assert gres_type("NVIDIA GeForce RTX 4090") == "4090"
    assert gres_type(None) is None and gres_type("NVIDIA") is None


def test_node_and_gres_lines() -> None:
    n = NodeDef("gpu-01", 224, 2_000_000, "h100", 8, ("h100", "ib"), gpu_minors=tuple(range(8)))
    assert node_line(n) == ("NodeName=gpu-01 CPUs=224 RealMemory=2000000 Gres=gpu:h100:8 "
                            "Features=h100,ib")
    # unknown facts are left out rather than guessed
    assert node_line(NodeDef("x", None, None, None, 0)) == "NodeName=x"
    gres = render_gres_conf([n, NodeDef("cpu-1", 8, 1000, None, 0)], "/dev/nvidia[0-{last}]")
    assert "NodeName=gpu-01 Name=gpu Type=h100 File=/dev/nvidia[0-7]" in gres
    assert "cpu-1" not in gres and "AutoDetect=off" in gres
    # Minor numbers not collected: a count, never a range guessed from it.
    unknown = NodeDef("gpu-02", None, None, "h100", 8)
    assert gres_line(unknown, DEFAULT_GPU_FILES) == "NodeName=gpu-02 Name=gpu Type=h100 Count=8"


EDITED = (captures_dir() / "nvidia-smi-q"
          / "EDITED_gpu2-unknown-error_gpud_nvidia-smi-query.535.154.05.out.0.txt")


def test_gres_files_are_the_minors_of_the_usable_gpus() -> None:
    """A real 8-GPU capture whose device minors are not the indices (3,2,1,0,7,6,5,4), EDITED
    so GPU 2 (minor 1) reads "Unknown Error". On main 84be469 gres.conf said
    File=/dev/nvidia[0-6] for the 7 usable GPUs: /dev/nvidia1 (the bad GPU) in, nvidia7 out."""
    report = parse_nvidia_smi_text(EDITED.read_text(), str(EDITED))
    facts = HostFacts(collected_at=NOW, hostname="gpu-4090", nvidia_smi=report)
    assert [g.minor_number for g in facts.gpus] == [3, 2, 1, 0, 7, 6, 5, 4]
    verdict = evaluate_gpus(facts, ExpectedSpec(gpu_count=8), None, load_profiles(),
                            XidPolicy.load_default(), NOW, gpu_fault=GpuFaultPolicy.PARTIAL)
    assert [u.index for u in verdict.unusable] == [2]
    gpus = usable_gpus(facts, [u.as_json() for u in verdict.unusable])
    node = NodeDef("gpu-4090", None, None, gres_type(gpus[0].product_name), len(gpus),
                   gpu_minors=gpu_minors(gpus))
    assert gres_line(node, DEFAULT_GPU_FILES) == (
        "NodeName=gpu-4090 Name=gpu Type=4090 File=/dev/nvidia[0,2-7]")
    # The older template form reads the same way.
    assert gres_line(node, "/dev/nvidia[0-{last}]") == gres_line(node, DEFAULT_GPU_FILES)
    assert node_line(node) == "NodeName=gpu-4090 Gres=gpu:4090:7"
    # Even before validation marked it, a GPU in an error state is not offered.
    assert [g.minor_number for g in usable_gpus(facts, None)] == [3, 2, 0, 7, 6, 5, 4]
    assert minor_ranges([5, 1, 2, 3, 9]) == "1-3,5,9" and minor_ranges([]) == ""
