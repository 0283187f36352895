"""Kubernetes node patches as pure data (domain/k8s.py): only gpufleet's keys are touched,
foreign labels and taints stay, values are sanitised one by one, gpufleet uncordons only its
own cordon, a second plan against the patched node is empty; the cross-checks."""

from __future__ import annotations

import copy
import json
import subprocess
from typing import Any

from gpufleet.domain.events import AlarmKind
from gpufleet.domain.k8s import (
    MANAGED_ANNOTATION,
    DesiredNode,
    Managed,
    cross_check,
    kubectl_script,
    node_name,
    plan_node,
)
from gpufleet.domain.labels import Taint
from gpufleet.domain.states import HostState

QUARANTINE = Taint("gpufleet.io/quarantined", "ecc-uncorrectable", "NoSchedule")
FOREIGN_TAINT = {"key": "dedicated", "value": "big-jobs", "effect": "NoSchedule"}


def _node(**kw: Any) -> dict[str, Any]:
    node: dict[str, Any] = {
        "metadata": {"name": "gpu-01", "labels": {"team": "llm", "gpufleet.io/state": "available",
                                                  "nvidia.com/gpu.product": "GFD-set"}},
        "spec": {"taints": [dict(FOREIGN_TAINT)]},
        "status": {"allocatable": {"nvidia.com/gpu": "8"},
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }
    for k, v in kw.items():
        node[k].update(v)
    return node


def _apply(node: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    """JSON merge patch (RFC 7386), as the API server applies it."""
    def merge(target: Any, patch: Any) -> Any:
        if not isinstance(patch, dict):
            return patch
        out = dict(target) if isinstance(target, dict) else {}
        for k, v in patch.items():
            if v is None:
                out.pop(k, None)
            else:
                out[k] = merge(out.get(k), v)
        return out
    return dict(merge(copy.deepcopy(node), body))


def test_quarantine_taints_and_cordons_leaving_foreign_keys_and_second_plan_is_empty() -> None:
    node = _node()
    desired = DesiredNode("gpu-01", "gpu-01", {"gpufleet.io/state": "quarantined"},
                          [QUARANTINE], cordon=True)
    p = plan_node(desired, node, own_nvidia=False)
    assert p.set_labels == {"gpufleet.io/state": "quarantined"}
    assert p.add_taints == [QUARANTINE] and p.cordon is True
    body = p.body()
    assert "team" not in body["metadata"]["labels"]
    assert "nvidia.com/gpu.product" not in body["metadata"]["labels"]  # not owned: untouched
    assert body["spec"]["taints"][0] == FOREIGN_TAINT
    after = _apply(node, body)
    assert after["metadata"]["labels"]["team"] == "llm"
    assert after["metadata"]["labels"]["nvidia.com/gpu.product"] == "GFD-set"
    assert FOREIGN_TAINT in after["spec"]["taints"]
    assert json.loads(after["metadata"]["annotations"][MANAGED_ANNOTATION])["cordoned"] is True
    again = plan_node(desired, after, own_nvidia=False)
    assert again.empty and again.body() == {} and again.diff() == []

    # Recovery: only gpufleet's taint goes, and its own cordon is lifted.
    back = DesiredNode("gpu-01", "gpu-01", {"gpufleet.io/state": "available"}, [], cordon=False)
    r = plan_node(back, after, own_nvidia=False)
    assert r.remove_taints == [QUARANTINE] and r.cordon is False
    healed = _apply(after, r.body())
    assert healed["spec"]["taints"] == [FOREIGN_TAINT]
    assert healed["spec"]["unschedulable"] is False
    assert plan_node(back, healed, own_nvidia=False).empty


def test_never_uncordons_or_untaints_what_someone_else_set() -> None:
    node = _node(spec={"unschedulable": True,
                       "taints": [dict(FOREIGN_TAINT),
                                  {"key": "node.kubernetes.io/unschedulable",
                                   "effect": "NoSchedule"}]})
    desired = DesiredNode("gpu-01", "gpu-01", {"gpufleet.io/state": "quarantined"},
                          [QUARANTINE], cordon=True)
    p = plan_node(desired, node, own_nvidia=False)
    assert p.cordon is None  # already cordoned by someone else: not claimed
    after = _apply(node, p.body())
    assert Managed.parse(after["metadata"]["annotations"][MANAGED_ANNOTATION]).cordoned is False
    back = DesiredNode("gpu-01", "gpu-01", {"gpufleet.io/state": "available"}, [])
    r = plan_node(back, after, own_nvidia=False)
    assert r.cordon is None
    healed = _apply(after, r.body())
    assert healed["spec"]["unschedulable"] is True
    assert {t["key"] for t in healed["spec"]["taints"]} == {
        "dedicated", "node.kubernetes.io/unschedulable"}


def test_a_bad_value_never_rejects_the_rest() -> None:
    desired = DesiredNode("gpu-01", "gpu-01", {
        "gpufleet.io/state": "available",
        "nvidia.com/gpu.product": "NVIDIA-TITAN-X-(Pascal)",  # GFD emitted this
        "gpufleet.io/bad key!": "x",
        "gpufleet.io/pool": "train a100/eu",
    }, [])
    p = plan_node(desired, _node(), own_nvidia=True)
    assert p.set_labels["nvidia.com/gpu.product"] == "NVIDIA-TITAN-X--Pascal"
    assert p.set_labels["gpufleet.io/pool"] == "train-a100-eu"
    assert p.skipped == ["gpufleet.io/bad key!: not a valid label key"]
    assert "gpufleet.io/state" not in p.set_labels  # unchanged


def test_nvidia_labels_removed_only_when_gpufleet_set_them() -> None:
    node = _node()
    # Owning nvidia.com/ but not having set gpu.product: a stale GFD label is not removed.
    p = plan_node(DesiredNode("gpu-01", "gpu-01", {"gpufleet.io/state": "available"}, []),
                  node, own_nvidia=True)
    assert "nvidia.com/gpu.product" not in p.remove_labels
    # Set by gpufleet (recorded), then no longer wanted: removed.
    d1 = DesiredNode("gpu-01", "gpu-01", {"gpufleet.io/state": "available",
                                          "nvidia.com/gpu.family": "ampere",
                                          "gpufleet.io/validated.inference": "true"}, [])
    n1 = _apply(node, plan_node(d1, node, own_nvidia=True).body())
    d2 = DesiredNode("gpu-01", "gpu-01", {"gpufleet.io/state": "available"}, [])
    p2 = plan_node(d2, n1, own_nvidia=True)
    assert p2.remove_labels == ["gpufleet.io/validated.inference", "nvidia.com/gpu.family"]
    assert "nvidia.com/gpu.product" not in p2.remove_labels
    assert plan_node(d2, _apply(n1, p2.body()), own_nvidia=True).empty


def test_cross_checks() -> None:
    healthy = _node()
    assert cross_check("gpu-01", "gpu-01", HostState.AVAILABLE, 8, healthy) == []
    zero = _node(status={"allocatable": {"nvidia.com/gpu": "0"}})
    [f] = cross_check("gpu-01", "gpu-01", HostState.AVAILABLE, 8, zero)
    assert f.kind is AlarmKind.K8S_GPUS_MISSING and "is 0" in f.message and "8" in f.message
    seven = _node(status={"allocatable": {"nvidia.com/gpu": "7"}})
    assert [x.kind for x in cross_check("h", "n", HostState.ALLOCATED, 8, seven)] == [
        AlarmKind.K8S_GPUS_MISSING]
    absent = _node(status={"allocatable": {}, "conditions": [{"type": "Ready",
                                                                "status": "False"}]})
    kinds = [x.kind for x in cross_check("h", "n", HostState.AVAILABLE, 8, absent)]
    assert kinds == [AlarmKind.K8S_GPUS_MISSING, AlarmKind.K8S_NODE_NOT_READY]
    # A quarantined host's node is expected to be broken: no alarm.
    assert cross_check("h", "n", HostState.QUARANTINED, 8, absent) == []


def test_node_name_template_and_unreadable_annotation() -> None:
    assert node_name("{short}", "gpu-01.dc1.example", "10.0.0.1") == "gpu-01"
    assert node_name("{name}", "gpu-01", "10.0.0.1") == "gpu-01"
    assert Managed.parse("not json") == Managed()
    assert Managed.parse('{"cordoned": "yes"}').cordoned is False


def test_kubectl_script_is_valid_sh_and_touches_only_gpufleet_keys() -> None:
    d = DesiredNode("gpu-01", "gpu-01", {"gpufleet.io/state": "quarantined",
                                         "team": "not-ours"}, [QUARANTINE], cordon=True)
    text = kubectl_script([d], own_nvidia=False)
    assert subprocess.run(["sh", "-n"], input=text, text=True, check=False).returncode == 0
    assert "kubectl label node gpu-01 --overwrite gpufleet.io/state=quarantined" in text
    assert "team" not in text
    assert "kubectl taint node gpu-01 --overwrite " \
           "gpufleet.io/quarantined=ecc-uncorrectable:NoSchedule" in text
    assert "kubectl cordon gpu-01" in text and "kubectl uncordon" not in text
