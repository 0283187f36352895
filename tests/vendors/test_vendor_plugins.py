"""Ascend and AMD plugins on real captures: inventory, vendor-convention labels, checks."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.vendors.accelerator_judge import judge
from tests.vendors.ascend_captures import bundle_sections, section, tool_output

from gpufleet.collect.pci import parse_lspci
from gpufleet.domain.accelerators import Health, LinkState
from gpufleet.domain.labels import is_valid_label_key, is_valid_label_value
from gpufleet.domain.spec import ExpectedSpec
from gpufleet.domain.vendors import plugin
from gpufleet.errors import ParseError
from gpufleet.vendors.amd import plugin as amd
from gpufleet.vendors.huawei import plugin as ascend
from gpufleet.vendors.huawei.hccn import parse_link, parse_link_stat
from gpufleet.vendors.huawei.npu_smi import (
    parse_health_status,
    parse_npu_smi_info,
    parse_npu_smi_mapping,
)

AMD = Path(__file__).resolve().parents[1] / "fixtures" / "captured" / "amd"
B3 = "ms-swift_NPU-support_npu-smi_info_8x910B3.txt"
V22 = "gpustack_ai-server_atlas-800-training-server_model-9010_version-6.0.RC1.txt"
V20 = "gpustack_ai-server_atlas-800-inference-server_model-3000_version-1.0.0-1.0.10.txt"
RC2 = "gpustack_ai-server_atlas-800-training-server_model-9010_version-24.1.RC2.txt"
KG_BEFORE = "mind-cluster_kg_parse_npu_info_before.txt"
KG_AFTER = "mind-cluster_kg_parse_npu_info_after.txt"
W0_AFTER = "mind-cluster_st_testcase_worker-0_npu_info_after.txt"


def _valid(labels: dict[str, str]) -> None:
    assert labels
    for k, v in labels.items():
        assert is_valid_label_key(k), k
        assert is_valid_label_value(v), (k, v)


def test_the_registry_serves_the_plugins_modules() -> None:
    huawei, amd_ = plugin("huawei"), plugin("amd")
    assert (huawei, amd_) == (ascend.PLUGIN, amd.PLUGIN)
    assert huawei.collector is not None and huawei.collector.primary == "npu_smi_info"
    assert huawei.collector.read is ascend.parse_sections
    assert amd_.collector is not None and amd_.collector.primary == "rocm_smi_json"
    assert "rocm_smi_json" in amd.SECTIONS and "npu_smi_info" in ascend.SECTIONS


def test_ascend_910b3_host_inventory_with_versions() -> None:
    outputs = {
        "npu_smi_info": tool_output(B3),
        "ascend_driver_version": section(KG_AFTER, "driver/version.info"),
        "ascend_firmware_version": section(KG_AFTER, "firmware/version.info"),
        "ascend_cann_version": section(KG_AFTER, "ascend_toolkit_install.info"),
    }
    inv = ascend.parse_sections(outputs)
    assert inv.count == 8
    assert inv.models() == ["910B3"]
    assert [a.index for a in inv.accelerators] == list(range(8))
    a0 = inv.accelerators[0]
    assert (a0.memory_total_mib, a0.memory_used_mib) == (65536, 3318)  # HBM, not DDR
    assert (a0.temperature_c, a0.power_w, a0.health) == (43.0, 101.8, Health.OK)
    v = inv.versions
    assert (v.driver, v.firmware, v.runtime, v.tool) == (
        "23.0.7",
        "7.1.0.11.220",
        "7.0.T10",
        "24.1.rc1.b030",
    )


def test_ascend_labels_910b3_volcano_conventions() -> None:
    inv = ascend.to_inventory(parse_npu_smi_info(tool_output(B3)))
    labels = ascend.labels(inv)
    assert labels == {
        "accelerator": "huawei-Ascend910",
        "accelerator-type": "module-910b-8",
        "node.kubernetes.io/npu.chip.name": "910B3",
    }
    _valid(labels)
    assert ascend.resource_name("910B3") == "huawei.com/Ascend910"


def test_ascend_labels_910a_and_310() -> None:
    a910 = ascend.labels(ascend.to_inventory(parse_npu_smi_info(tool_output(V22))))
    assert a910 == {
        "accelerator": "huawei-Ascend910",
        "accelerator-type": "module",
        "node.kubernetes.io/npu.chip.name": "910A",
    }
    inv310 = ascend.to_inventory(parse_npu_smi_info(tool_output(V20)))
    assert [a.index for a in inv310.accelerators] == [0, 1, 2, 3]
    a310 = ascend.labels(inv310)
    # no accelerator-type: the convention for a 4-chip 310 card is not known here
    assert a310 == {"accelerator": "huawei-Ascend310", "node.kubernetes.io/npu.chip.name": "310"}
    _valid(a910)
    _valid(a310)
    assert ascend.resource_name("310") == "huawei.com/Ascend310"
    assert ascend.resource_name("310P3") == "huawei.com/Ascend310P"


def test_ascend_mapping_numbers_multichip_npus_and_its_absence_is_an_error() -> None:
    # 24.x layout prints no Device column: two chips of one NPU need -m to be numbered
    text = tool_output(RC2)
    info = parse_npu_smi_info(text)
    twin = type(info)(info.tool_version, info.version, (info.chips[0], info.chips[0]))
    with pytest.raises(ParseError, match="npu-smi info -m"):
        ascend.to_inventory(twin)
    mapping = parse_npu_smi_mapping(tool_output("gpustack_test_npu_smi_910B_info-m.txt"))
    inv = ascend.to_inventory(info, mapping)
    assert [a.index for a in inv.accelerators] == list(range(8))


def test_health_check_alarm_with_error_codes_and_warnings() -> None:
    info = parse_npu_smi_info(tool_output(B3))
    alarm = parse_health_status(section(KG_AFTER, "-c 0 -t health"))
    inv = ascend.to_inventory(info, health={0: alarm})
    assert inv.accelerators[0].health is Health.ALARM
    status, message = judge("accelerator_health", inv.accelerators)
    assert status == "fail"
    assert message == ("huawei #0 (0000:c1:00.0) alarm [A4025021 8C03A000 8C084E00]: "
                       "8C03A000 RestartNPUCodes -> reset_gpu")
    assert judge("accelerator_health", ascend.to_inventory(info).accelerators)[0] == "pass"
    warn = ascend.to_inventory(parse_npu_smi_info(tool_output(RC2))).accelerators
    assert judge("accelerator_health", warn) == (
        "warn", "huawei #3 (0000:01:00.0) warning; huawei #7 (0000:02:00.0) warning"
    )


def test_count_and_lspci_checks_npu_missing_from_the_bus() -> None:
    inv = ascend.to_inventory(parse_npu_smi_info(tool_output(V22)))  # 8x 910A
    before = parse_lspci(section(KG_BEFORE, "lspci | grep acce"))
    after = parse_lspci(section(KG_AFTER, "lspci | grep acce"))
    assert ascend.npus_on_bus(before) == 8
    assert ascend.npus_on_bus(after) == 7  # 61:00.0 fell off the bus
    npus = inv.accelerators
    assert judge("gpu_count", npus, pci=before)[0] == "pass"
    assert judge("gpu_count", npus, pci=after) == (
        "fail", "huawei tool sees 8 accelerators, expected 7"
    )
    assert judge("gpu_count", npus, ExpectedSpec(gpu_count=8))[0] == "pass"
    assert judge("gpu_count", npus, ExpectedSpec(gpu_count=16)) == (
        "fail", "huawei tool sees 8 accelerators, expected 16"
    )


def test_links_check_ports_down_after_the_job() -> None:
    last = {
        int(cmd.split(" -i ")[1].split()[0]): parse_link_stat(out).last_state
        for cmd, out in bundle_sections(W0_AFTER)
        if cmd.endswith("-link_stat -g")
    }
    info = parse_npu_smi_info(tool_output(B3))  # 8 NPUs to carry the job's port states
    status, message = judge("accelerator_links", ascend.to_inventory(info, ports=last).accelerators)
    assert status == "fail"
    assert message.startswith("roce port of huawei #0") and "roce port of huawei #3" in message
    assert message.count(" down") == 2
    up = {i: s for i, s in last.items() if i not in (0, 3)}
    assert judge("accelerator_links", ascend.to_inventory(info, ports=up).accelerators)[0] == "pass"


@pytest.mark.parametrize(
    ("name", "count", "expected"),
    [
        (
            "telegraf_mi100_rocm571.json",
            6,
            {
                "amd.com/gpu.device-id": "738c",
                "amd.com/gpu.product-name": "AMD_Instinct_MI100",
                "amd.com/gpu.vram": "32G",
                "amd.com/gpu.driver-version": "6.2.4",
            },
        ),
        (
            "telegraf_mi100_rocm602.json",
            4,
            {
                "amd.com/gpu.device-id": "738c",
                "amd.com/gpu.product-name": "AMD_Instinct_MI100",
                "amd.com/gpu.vram": "32G",
                "amd.com/gpu.driver-version": "6.3.6",
            },
        ),
        (
            "wandb_gpu_amd_test_rocm-smi_rocm6_mi250.json",
            1,
            {
                "amd.com/gpu.device-id": "740c",
                "amd.com/gpu.product-name": "AMD_INSTINCT_MI250_MCM_OAM_AC_MBA",
                "amd.com/gpu.driver-version": "6.2.4",
            },
        ),
        (
            "telegraf_vega-20-WKS-GL-XE.json",
            1,
            {
                "amd.com/gpu.device-id": "66a1",
                "amd.com/gpu.product-name": "Radeon_Instinct_MI50_32GB",
                "amd.com/gpu.vram": "32G",
                "amd.com/gpu.driver-version": "5.9.17",
            },
        ),
    ],
)
def test_amd_node_labeller_labels(name: str, count: int, expected: dict[str, str]) -> None:
    inv = amd.parse_sections({"rocm_smi_json": (AMD / name).read_text()})
    assert inv.count == count
    labels = amd.labels(inv)
    assert labels == expected
    _valid(labels)


def test_amd_inventory_mi250_counters_and_checks() -> None:
    inv = amd.parse_sections(
        {"rocm_smi_json": (AMD / "wandb_gpu_amd_test_rocm-smi_rocm5_mi250.json").read_text()}
    )
    a0 = inv.accelerators[0]
    assert (a0.serial, a0.uuid) == ("PCB052715-0065", "0x719d230578348e8c")
    assert a0.error_counters[0].name == "pcie_replay" and a0.error_counters[0].count == 147
    assert (a0.temperature_c, a0.power_w, a0.power_limit_w) == (35.0, 89.0, 560.0)
    assert a0.firmware["VBIOS"] == "113-D65209-073"
    assert judge("gpu_count", inv.accelerators, ExpectedSpec(gpu_count=8))[0] == "fail"
    with pytest.raises(ParseError, match="section missing"):
        amd.parse_sections({})


def test_roce_ports_in_the_inventory() -> None:
    down = parse_link(tool_output("gpustack_test_npu_smi_910B_hccn_tool-link-g_DOWN.txt"))
    ports = {i: LinkState.UP for i in range(8)} | {5: down}
    inv = ascend.to_inventory(parse_npu_smi_info(tool_output(B3)), ports=ports)
    assert inv.accelerators[5].links[0].kind == "roce"
    assert sum(ln.kind == "roce" for a in inv.accelerators for ln in a.links) == 8
    status, message = judge("accelerator_links", inv.accelerators)
    assert (status, message.count(" down")) == ("fail", 1)
    assert message.startswith("roce port of huawei #5")
    bare = ascend.to_inventory(parse_npu_smi_info(tool_output(B3))).accelerators
    assert judge("accelerator_links", bare) == ("skip", "no accelerator network ports reported")


def test_amd_topology_links_in_the_inventory() -> None:
    inv = amd.parse_sections({"rocm_smi_json": (AMD / "telegraf_mi100_rocm571.json").read_text()})
    links = inv.accelerators[2].links
    assert [(ln.kind, ln.peer) for ln in links] == [("pcie", p) for p in ("0", "1", "3", "4", "5")]
    assert {ln.state for ln in links} == {LinkState.UNKNOWN}
