"""A mixed lab fleet (8x H100, 8x Ascend 910B3, 4x AMD MI100: hosts replaying real captures)
collected through the real pipeline, then read back by the exports side by side (issue 15),
on SQLite and PostgreSQL: Slurm GRES per vendor, Ansible groups by vendor and model with their
versions, drift of the Ascend stack against a pinned baseline, summary and capacity per
vendor and model (Kubernetes: tests/service/test_mixed_fleet_k8s.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.domain.drift import DriftItem
from gpufleet.domain.labels import is_valid_label_key, is_valid_label_value
from gpufleet.domain.spec import Baseline
from gpufleet.lab.demo import enroll_lab
from gpufleet.service.allocation.capacity import capacity
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.exports.ansible import inventory_list
from gpufleet.service.exports.slurm import slurm_config
from gpufleet.service.hosts import operations
from gpufleet.service.hosts.baselines import drift, save_baseline, set_pool_baseline
from gpufleet.service.hosts.validate import validate
from gpufleet.service.views.summary import fleet_summary, host_labels

MODELS = ["h100-8x", "ascend-910b3-8x", "mi100-4x"]  # gpu-01, gpu-02, gpu-03


def mixed_fleet(fleet: Fleet, d: Path) -> Fleet:
    """The three lab hosts (lab files in ``d``) enrolled, collected and validated."""
    enroll_lab(fleet, d, 3, models=MODELS, faults={}, now=fleet.now())
    validate(fleet)
    return fleet


@pytest.fixture
def mixed(fleet: Fleet, tmp_path: Path) -> Fleet:
    return mixed_fleet(fleet, tmp_path / "lab")


def test_slurm_gres_per_vendor_from_the_store(mixed: Fleet) -> None:
    conf, gres = slurm_config(mixed)
    nodes = {ln.split()[0]: ln for ln in conf.splitlines() if ln.startswith("NodeName=")}
    assert "# Needs GresTypes=gpu,npu" in conf.splitlines()
    assert " Gres=gpu:h100:8 " in nodes["NodeName=gpu-01"]
    assert " Gres=npu:910b3:8 Features=910b3," in nodes["NodeName=gpu-02"]
    assert " Gres=gpu:mi100:4 Features=mi100," in nodes["NodeName=gpu-03"]
    assert gres.splitlines()[2:] == [
        "NodeName=gpu-01 Name=gpu Type=h100 File=/dev/nvidia[0-7]",
        "NodeName=gpu-02 Name=npu Type=910b3 File=/dev/davinci[0-7]",
        "NodeName=gpu-03 Name=gpu Type=mi100 Count=4",
    ]


def test_ansible_groups_by_vendor_and_model_with_versions(mixed: Fleet) -> None:
    inv = inventory_list(mixed)
    # The lab inventory's groups of the same names (issue 26 item 5) add their own vars.
    assert inv["npu_910b"]["vars"]["gpufleet_pool"] == "train-910b"
    assert inv["lab"]["children"] == ["gpu_h100", "npu_910b", "gpu_mi100"]

    def ours(group: str) -> dict[str, object]:
        g = inv[group]
        return {"hosts": g["hosts"],
                "vars": {k: v for k, v in g["vars"].items() if k.startswith("accelerator_")}}

    assert ours("npu_910b") == {
        "hosts": ["gpu-02"],
        "vars": {
            "accelerator_vendor": "huawei",
            "accelerator_driver_version": "23.0.7",
            "accelerator_firmware_version": "7.1.0.11.220",
            "accelerator_runtime": "cann",
            "accelerator_runtime_version": "7.0.T10",
        },
    }
    assert ours("gpu_mi100") == {
        "hosts": ["gpu-03"],
        "vars": {"accelerator_vendor": "amd", "accelerator_driver_version": "6.3.6"},
    }
    assert inv["gpu_h100"]["hosts"] == ["gpu-01"]
    assert inv["gpu_h100"]["vars"]["accelerator_runtime"] == "cuda"
    hv = inv["_meta"]["hostvars"]
    assert (hv["gpu-02"]["accelerator_count"], hv["gpu-02"]["accelerator_model"]) == (8, "910b3")
    assert (hv["gpu-03"]["accelerator_count"], hv["gpu-03"]["accelerator_model"]) == (4, "mi100")


def test_drift_compares_the_ascend_stack_with_its_pools_baseline(mixed: Fleet) -> None:
    save_baseline(mixed, Baseline(name="npu-2024", driver="23.0.7",
                                  accelerator_firmware="7.1.0.11.220", runtime="8.0.RC3"))
    set_pool_baseline(mixed, "train-910b", "npu-2024")
    save_baseline(mixed, Baseline(name="mi-2024", driver="6.2.4"))
    set_pool_baseline(mixed, "train-mi100", "mi-2024")
    rep = drift(mixed)
    assert rep.by_host == {
        "gpu-02": [DriftItem("runtime", "8.0.RC3", "7.0.T10")],
        "gpu-03": [DriftItem("driver", "6.2.4", "6.3.6")],
    }
    assert [s.describe() for s in rep.summary] == [
        "driver 6.3.6 on 1 host, baseline 6.2.4",
        "runtime 7.0.T10 on 1 host, baseline 8.0.RC3",
    ]
    assert rep.no_baseline == ["gpu-01"]



def test_labels_summary_and_capacity_side_by_side(mixed: Fleet) -> None:
    labels = {hl.host: hl.labels for hl in host_labels(mixed)}
    assert {k: v for k, v in labels["gpu-02"].items()
            if k.startswith("gpufleet.io/accelerator") or "/" not in k or "npu" in k} == {
        "gpufleet.io/accelerator.vendor": "huawei",
        "gpufleet.io/accelerator.model": "910b3",
        "gpufleet.io/accelerator.count": "8",
        "accelerator": "huawei-Ascend910",
        "accelerator-type": "module-910b-8",
        "node.kubernetes.io/npu.chip.name": "910B3",
    }
    assert {k: v for k, v in labels["gpu-03"].items() if k.startswith("amd.com/")} == {
        "amd.com/gpu.device-id": "738c",
        "amd.com/gpu.product-name": "AMD_Instinct_MI100",
        "amd.com/gpu.vram": "32G",
        "amd.com/gpu.driver-version": "6.3.6",
    }
    assert labels["gpu-01"]["gpufleet.io/accelerator.model"] == "h100"
    assert not any(k.startswith("amd.com/") or k == "accelerator" for k in labels["gpu-01"])
    for host in labels.values():
        assert all(is_valid_label_key(k) and is_valid_label_value(v) for k, v in host.items())

    sm = fleet_summary(mixed)
    assert sm.accelerators == [
        {"vendor": "amd", "model": "Instinct MI100", "hosts": 1, "accelerators": 4,
         "available": 4},
        {"vendor": "huawei", "model": "910B3", "hosts": 1, "accelerators": 8, "available": 8},
        {"vendor": "nvidia", "model": "NVIDIA H100 80GB HBM3", "hosts": 1, "accelerators": 8,
         "available": 8},
    ]
    assert sm.gpus_per_profile_model["test"] == {
        "NVIDIA H100 80GB HBM3": 8, "huawei 910B3": 8, "amd Instinct MI100": 4}

    rep = capacity(mixed)
    test = {(r["vendor"], r["model"]): r["free"] for r in rep.rows if r["profile"] == "test"}
    assert test == {("nvidia", "H100 80GB HBM3"): 8, ("huawei", "huawei 910B3"): 8,
                    ("amd", "amd Instinct MI100"): 4}
    assert rep.totals["free"] == 20
    operations.maintenance_on(mixed, "gpu-02", "firmware upgrade")
    rep = capacity(mixed)
    npu = [(r["profile"], r["free"], r["maintenance"]) for r in rep.rows
           if r["vendor"] == "huawei"]
    assert npu == [("-", 0, 8)]  # profiles are dropped on leaving service
    assert rep.totals["maintenance"] == 8
