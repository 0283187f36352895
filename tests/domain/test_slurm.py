"""Slurm decisions and node definitions as pure data (gpufleet.domain.slurm)."""

from __future__ import annotations

import pytest

from gpufleet.domain.slurm import (
    ActionKind,
    NodeDef,
    SlurmNode,
    decide,
    drain_reason,
    gres_type,
    node_features,
    node_line,
    plan,
    reason_code,
    render_gres_conf,
    sanitize_feature,
    slurm_signal,
)
from gpufleet.domain.states import HostState

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
    n = NodeDef("gpu-01", 224, 2_000_000, "h100", 8, ("h100", "ib"))
    assert node_line(n) == ("NodeName=gpu-01 CPUs=224 RealMemory=2000000 Gres=gpu:h100:8 "
                            "Features=h100,ib")
    # unknown facts are left out rather than guessed
    assert node_line(NodeDef("x", None, None, None, 0)) == "NodeName=x"
    gres = render_gres_conf([n, NodeDef("cpu-1", 8, 1000, None, 0)], "/dev/nvidia[0-{last}]")
    assert "NodeName=gpu-01 Name=gpu Type=h100 File=/dev/nvidia[0-7]" in gres
    assert "cpu-1" not in gres and "AutoDetect=off" in gres
