"""A mixed fleet's accelerators outside gpufleet (issue 15), on real captures: Kubernetes
labels and extended resources, Slurm GRES lines, Ansible groups and group variables, drift
of the Ascend stack against a baseline."""

from __future__ import annotations

from pathlib import Path

from tests.vendors.ascend_captures import section, tool_output

from gpufleet.domain.accelerator_exports import (
    accelerator_labels,
    extended_resources,
    gres_of,
    model_counts,
    short_model,
    vendor_label_keys,
)
from gpufleet.domain.accelerators import AcceleratorInventory, Vendor, inventories_of
from gpufleet.domain.ansible import InventoryHost, host_vars, inventory
from gpufleet.domain.drift import DriftItem, diff_against_baseline
from gpufleet.domain.facts import FACTS_VERSION, HostFacts
from gpufleet.domain.k8s import (
    MANAGED_ANNOTATION,
    DesiredNode,
    cross_check,
    kubectl_script,
    plan_node,
)
from gpufleet.domain.labels import is_valid_label_key, is_valid_label_value
from gpufleet.domain.slurm import NodeDef, node_features, node_line, render_gres_conf
from gpufleet.domain.spec import Baseline
from gpufleet.domain.states import HostState
from gpufleet.service.hosts.vendor_exports import EXPORTS
from gpufleet.testing import NOW, make_facts
from gpufleet.vendors.amd import plugin as amd
from gpufleet.vendors.huawei import plugin as ascend
from gpufleet.vendors.huawei.npu_smi import parse_npu_smi_info

CAPTURED = Path(__file__).resolve().parents[1] / "fixtures" / "captured"
B3 = "ms-swift_NPU-support_npu-smi_info_8x910B3.txt"  # 8x 910B3, npu-smi 24.1.rc1
V22 = "gpustack_ai-server_atlas-800-training-server_model-9010_version-6.0.RC1.txt"  # 8x 910A
KG = "mind-cluster_kg_parse_npu_info_after.txt"  # a 910B host's version.info files
MI100 = "telegraf_mi100_rocm571.json"  # 6x Instinct MI100, driver 6.2.4
MI100_B = "telegraf_mi100_rocm602.json"  # 4x Instinct MI100, driver 6.3.6
MI250 = "wandb_gpu_amd_test_rocm-smi_rocm5_mi250.json"  # 2x INSTINCT MI250


def ascend_910b3() -> AcceleratorInventory:
    """The 8x910B3 table with the driver/firmware/CANN versions of a real 910B host."""
    return ascend.parse_sections({
        "npu_smi_info": tool_output(B3),
        "ascend_driver_version": section(KG, "driver/version.info"),
        "ascend_firmware_version": section(KG, "firmware/version.info"),
        "ascend_cann_version": section(KG, "ascend_toolkit_install.info"),
    })


def amd_inventory(name: str) -> AcceleratorInventory:
    return amd.parse_sections({"rocm_smi_json": (CAPTURED / "amd" / name).read_text()})


def host_facts(inv: AcceleratorInventory) -> HostFacts:
    """Facts of a host whose only accelerators are ``inv``'s (no nvidia-smi)."""
    return HostFacts(facts_version=FACTS_VERSION, collected_at=NOW,
                     accelerators=inv.accelerators,
                     accelerator_versions={inv.vendor: inv.versions})


def _valid(labels: dict[str, str]) -> None:
    for k, v in labels.items():
        assert is_valid_label_key(k), k
        assert is_valid_label_value(v), (k, v)


def test_short_models_of_every_vendor() -> None:
    assert short_model("NVIDIA H100 80GB HBM3") == "h100"
    assert short_model("910B3") == "910b3"
    assert short_model("INSTINCT MI250") == "mi250"
    assert short_model("Radeon Instinct MI50 32GB") == "mi50"
    assert short_model("unknown") is None and short_model(None) is None


def test_ascend_host_labels_beside_gpufleets_own() -> None:
    invs = inventories_of(host_facts(ascend_910b3()))
    labels = accelerator_labels(invs, EXPORTS)
    assert labels == {
        "gpufleet.io/accelerator.vendor": "huawei",
        "gpufleet.io/accelerator.model": "910b3",
        "gpufleet.io/accelerator.count": "8",
        "accelerator": "huawei-Ascend910",
        "accelerator-type": "module-910b-8",
        "node.kubernetes.io/npu.chip.name": "910B3",
    }
    _valid(labels)
    assert vendor_label_keys(invs, EXPORTS) == {
        "accelerator", "accelerator-type", "node.kubernetes.io/npu.chip.name"}
    assert extended_resources(invs, EXPORTS) == {"huawei.com/Ascend910": 8}


def test_amd_host_labels_node_labeller_names() -> None:
    invs = inventories_of(host_facts(amd_inventory(MI100)))
    labels = accelerator_labels(invs, EXPORTS)
    assert labels == {
        "gpufleet.io/accelerator.vendor": "amd",
        "gpufleet.io/accelerator.model": "mi100",
        "gpufleet.io/accelerator.count": "6",
        "amd.com/gpu.device-id": "738c",
        "amd.com/gpu.product-name": "AMD_Instinct_MI100",
        "amd.com/gpu.vram": "32G",
        "amd.com/gpu.driver-version": "6.2.4",
    }
    _valid(labels)
    assert extended_resources(invs, EXPORTS) == {"amd.com/gpu": 6}


def test_nvidia_host_gets_only_gpufleets_accelerator_labels() -> None:
    invs = inventories_of(make_facts())
    labels = accelerator_labels(invs, EXPORTS)
    assert labels == {
        "gpufleet.io/accelerator.vendor": "nvidia",
        "gpufleet.io/accelerator.model": "h100",
        "gpufleet.io/accelerator.count": "8",
    }
    assert vendor_label_keys(invs, EXPORTS) == frozenset()
    assert extended_resources(invs, EXPORTS) == {"nvidia.com/gpu": 8}
    assert accelerator_labels(inventories_of(HostFacts(
        facts_version=FACTS_VERSION, collected_at=NOW)), EXPORTS) == {}


def test_a_host_with_two_vendors_is_mixed() -> None:
    facts = make_facts().model_copy(update={
        "accelerators": amd_inventory(MI250).accelerators,
        "accelerator_versions": {Vendor("amd"): amd_inventory(MI250).versions},
    })
    invs = inventories_of(facts)
    labels = accelerator_labels(invs, EXPORTS)
    assert labels["gpufleet.io/accelerator.vendor"] == "mixed"
    assert labels["gpufleet.io/accelerator.model"] == "mixed"
    assert labels["gpufleet.io/accelerator.count"] == "10"
    assert labels["amd.com/gpu.product-name"] == "AMD_INSTINCT_MI250_MCM_OAM_AC_MBA"
    assert extended_resources(invs, EXPORTS) == {"nvidia.com/gpu": 8, "amd.com/gpu": 2}
    assert model_counts(invs) == {("nvidia", "NVIDIA H100 80GB HBM3"): 8,
                                  ("amd", "INSTINCT MI250"): 2}


def test_slurm_gres_per_vendor() -> None:
    npu = gres_of(inventories_of(host_facts(ascend_910b3())), EXPORTS, skip=(Vendor.NVIDIA,))
    assert [(g.spec(), g.files) for g in npu] == [("npu:910b3:8", "/dev/davinci[0-7]")]
    a910 = ascend.to_inventory(parse_npu_smi_info(tool_output(V22)))
    assert [g.spec() for g in gres_of([a910], EXPORTS)] == ["npu:910a:8"]
    mi = gres_of(inventories_of(host_facts(amd_inventory(MI250))), EXPORTS)
    assert [(g.spec(), g.files) for g in mi] == [("gpu:mi250:2", None)]
    # NVIDIA GPUs are written by the existing path (--gpu-files); skipped here
    assert gres_of(inventories_of(make_facts()), EXPORTS, skip=(Vendor.NVIDIA,)) == []

    node = NodeDef("npu-01", 192, 1_500_000, None, 0, node_features({}, None, npu),
                   tuple(npu))
    assert node_line(node) == (
        "NodeName=npu-01 CPUs=192 RealMemory=1500000 Gres=npu:910b3:8 Features=910b3")
    amd_node = NodeDef("mi-01", 128, None, None, 0, (), tuple(mi))
    gpu_node = NodeDef("gpu-01", 224, None, "h100", 8, ("h100",), gpu_minors=tuple(range(8)))
    conf = render_gres_conf([gpu_node, node, amd_node], "/dev/nvidia[0-{last}]")
    assert conf.splitlines()[2:] == [
        "NodeName=gpu-01 Name=gpu Type=h100 File=/dev/nvidia[0-7]",
        "NodeName=npu-01 Name=npu Type=910b3 File=/dev/davinci[0-7]",
        "NodeName=mi-01 Name=gpu Type=mi250 Count=2",
    ]


def _ih(name: str, facts: HostFacts) -> InventoryHost:
    from gpufleet.service.exports.ansible import _accelerators

    return InventoryHost(name=name, address=name, port=22, user=None, key_file=None,
                         vars={}, state=HostState.AVAILABLE, pool=None, rack=None,
                         profiles=[], facts=facts, baseline_name=None, baseline=None,
                         **_accelerators(facts))


def test_ansible_groups_by_vendor_and_model_with_their_versions() -> None:
    npu = host_facts(ascend_910b3())
    hosts = [
        _ih("npu-01", npu), _ih("npu-02", npu),
        _ih("mi-01", host_facts(amd_inventory(MI100))),
        _ih("mi-02", host_facts(amd_inventory(MI100_B))),
        _ih("gpu-01", make_facts()),
    ]
    inv = inventory(hosts)
    assert inv["npu_910b"] == {
        "hosts": ["npu-01", "npu-02"],
        "vars": {
            "accelerator_vendor": "huawei",
            "accelerator_driver_version": "23.0.7",
            "accelerator_firmware_version": "7.1.0.11.220",
            "accelerator_runtime": "cann",
            "accelerator_runtime_version": "7.0.T10",
        },
    }
    # the MI100 hosts run different drivers: not a group variable, each host keeps its own
    assert inv["gpu_mi100"] == {"hosts": ["mi-01", "mi-02"],
                                "vars": {"accelerator_vendor": "amd"}}
    hv = inv["_meta"]["hostvars"]
    assert hv["mi-01"]["accelerator_driver_version"] == "6.2.4"
    assert hv["mi-02"]["accelerator_driver_version"] == "6.3.6"
    assert "accelerator_driver_version" not in hv["npu-01"]  # the group says it
    assert (hv["npu-01"]["accelerator_count"], hv["npu-01"]["accelerator_model"]) == (8, "910b3")
    assert inv["gpu_h100"]["vars"] == {
        "accelerator_vendor": "nvidia",
        "accelerator_driver_version": "550.90.07",
        "accelerator_runtime": "cuda",
        "accelerator_runtime_version": "12.4",
    }
    assert "gpu_h100" in inv["all"]["children"] and "npu_910b" in inv["all"]["children"]
    # --host NAME (no group around it): the host's own values
    assert host_vars(hosts[0])["accelerator_runtime_version"] == "7.0.T10"


def test_drift_of_the_ascend_stack_against_a_baseline() -> None:
    facts = host_facts(ascend_910b3())
    same = Baseline(name="npu", driver="23.0.7", accelerator_firmware="7.1.0.11.220",
                    runtime="7.0.T10")
    assert diff_against_baseline(facts, same) == []
    # the same host's nnae package is 8.0.RC3: a baseline moving CANN there shows drift
    newer = same.model_copy(update={"runtime": "8.0.RC3", "driver": "24.1.rc2"})
    assert diff_against_baseline(facts, newer) == [
        DriftItem("driver", "24.1.rc2", "23.0.7"),
        DriftItem("runtime", "8.0.RC3", "7.0.T10"),
    ]
    # AMD: the driver is compared, the ROCm version is not in rocm-smi's JSON (not drift)
    mi = host_facts(amd_inventory(MI100))
    assert diff_against_baseline(mi, Baseline(name="mi", driver="6.3.6", runtime="6.1")) == [
        DriftItem("driver", "6.3.6", "6.2.4")]


def _node(labels: dict[str, str], allocatable: dict[str, str]) -> dict[str, object]:
    return {"metadata": {"name": "npu-01", "labels": labels},
            "status": {"allocatable": allocatable,
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def test_k8s_sync_owns_vendor_labels_only_when_told_and_removes_only_its_own() -> None:
    invs = inventories_of(host_facts(ascend_910b3()))
    labels = {"gpufleet.io/state": "available", **accelerator_labels(invs, EXPORTS)}
    desired = DesiredNode("npu-01", "npu-01", labels, [],
                          vendor_keys=vendor_label_keys(invs, EXPORTS))
    # an admin labelled the node by hand, as Volcano's docs say, with a stale type
    node = _node({"accelerator": "huawei-Ascend910", "accelerator-type": "card"}, {})
    p = plan_node(desired, node, own_nvidia=False)  # vendor labels not owned: left alone
    assert not any(k in p.set_labels for k in ("accelerator", "accelerator-type"))
    assert p.set_labels["gpufleet.io/accelerator.model"] == "910b3"
    p = plan_node(desired, node, own_nvidia=False, own_vendor=True)
    assert {k: v for k, v in p.set_labels.items() if not k.startswith("gpufleet.io/")} == {
        "accelerator-type": "module-910b-8",
        "node.kubernetes.io/npu.chip.name": "910B3",
    }
    node["metadata"]["labels"] |= p.set_labels  # type: ignore[index]
    node["metadata"]["annotations"] = {MANAGED_ANNOTATION: p.managed}  # type: ignore[index]
    assert plan_node(desired, node, own_nvidia=False, own_vendor=True).empty
    # the host's NPUs are gone from the facts: gpufleet removes the vendor labels it set,
    # and no one else's
    node["metadata"]["labels"]["team"] = "npu"  # type: ignore[index]
    gone = DesiredNode("npu-01", "npu-01", {"gpufleet.io/state": "available"}, [])
    r = plan_node(gone, node, own_nvidia=False, own_vendor=True)
    assert set(r.remove_labels) >= {"accelerator", "accelerator-type",
                                    "node.kubernetes.io/npu.chip.name"}
    assert "team" not in r.remove_labels
    script = kubectl_script([desired], own_nvidia=False, own_vendor=True)
    assert "accelerator-type=module-910b-8" in script


def test_k8s_cross_check_per_vendor_resource() -> None:
    invs = inventories_of(host_facts(ascend_910b3()))
    res = extended_resources(invs, EXPORTS)
    ok = _node({}, {"huawei.com/Ascend910": "8"})
    assert cross_check("npu-01", "npu-01", HostState.AVAILABLE, None, ok, res) == []
    short = _node({}, {"huawei.com/Ascend910": "7", "nvidia.com/gpu": "0"})
    [f] = cross_check("npu-01", "npu-01", HostState.AVAILABLE, None, short, res)
    assert f.message == ("node npu-01: allocatable huawei.com/Ascend910 is 7, gpufleet "
                         "validated 8 accelerators on npu-01")
    assert f.data == {"allocatable": "7", "validated": 8, "resource": "huawei.com/Ascend910"}
    # an NVIDIA host is checked as before
    nv = extended_resources(inventories_of(make_facts()), EXPORTS)
    [g] = cross_check("gpu-01", "gpu-01", HostState.AVAILABLE, 8, _node({}, {}), nv)
    assert g.message == ("node gpu-01: allocatable nvidia.com/gpu is absent, gpufleet "
                         "validated 8 GPUs on gpu-01")
