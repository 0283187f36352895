"""``npu-smi`` parsers on real captures across npu-smi 20.x .. 24.x (issue 15)."""

from __future__ import annotations

import pytest
from tests.vendors.ascend_captures import section, tool_output

from gpufleet.domain.accelerators import Health
from gpufleet.errors import ParseError
from gpufleet.vendors.huawei.npu_smi import (
    ChipMapping,
    ChipUsage,
    parse_board,
    parse_chip_usages,
    parse_health_status,
    parse_key_values,
    parse_npu_smi_info,
    parse_npu_smi_mapping,
    parse_npu_smi_topo,
)

B3 = "ms-swift_NPU-support_npu-smi_info_8x910B3.txt"
RC2 = "gpustack_ai-server_atlas-800-training-server_model-9010_version-24.1.RC2.txt"
V22 = "gpustack_ai-server_atlas-800-training-server_model-9010_version-6.0.RC1.txt"
V20 = "gpustack_ai-server_atlas-800-inference-server_model-3000_version-1.0.0-1.0.10.txt"
V21 = "gpustack_ai-server_atlas-800-inference-server_model-3000_version-1.0.11-1.0.15.txt"
KG_BEFORE = "mind-cluster_kg_parse_npu_info_before.txt"
KG_AFTER = "mind-cluster_kg_parse_npu_info_after.txt"


def test_info_24x_910b3_a2_layout() -> None:
    info = parse_npu_smi_info(tool_output(B3))
    assert (info.tool_version, info.version) == ("24.1.rc1.b030", "24.1.rc1.b030")
    assert len(info.chips) == 8
    assert {c.name for c in info.chips} == {"910B3"}
    assert all(c.health is Health.OK for c in info.chips)
    c0 = info.chips[0]
    assert (c0.npu_id, c0.chip_id, c0.device_id) == (0, 0, None)
    assert c0.bus_id == "0000:c1:00.0"
    assert (c0.power_w, c0.temperature_c) == (101.8, 43)
    assert (c0.hbm_used_mb, c0.hbm_total_mb) == (3318, 65536)
    assert (c0.memory_used_mb, c0.memory_total_mb) == (0, 0)
    assert (c0.hugepages_used, c0.hugepages_total) == (0, 0)
    assert [c.temperature_c for c in info.chips] == [43, 39, 40, 40, 45, 44, 45, 44]
    assert info.chips[7].bus_id == "0000:42:00.0"
    assert info.chips[7].hbm_used_mb == 3315


def test_info_24x_warning_npus_and_process_table_skipped() -> None:
    info = parse_npu_smi_info(tool_output(RC2))
    assert info.version == "24.1.RC2"
    assert len(info.chips) == 8  # the 32 process rows after the devices are not chips
    warn = [c.npu_id for c in info.chips if c.health is Health.WARNING]
    assert warn == [3, 7]
    assert info.chips[3].power_w == 206.9
    assert info.chips[3].memory_total_mb == 15039
    assert info.chips[0].hugepages_total == 1232
    assert info.chips[0].hbm_total_mb == 32768


def test_info_22x_910a() -> None:
    info = parse_npu_smi_info(tool_output(V22))
    assert info.version == "22.0.3.1"
    assert [c.name for c in info.chips] == ["910A"] * 8
    assert [c.bus_id for c in info.chips][:2] == ["0000:61:00.0", "0000:db:00.0"]
    assert info.chips[3].power_w == 191.7


def test_info_20x_four_310_chips_on_one_card() -> None:
    info = parse_npu_smi_info(tool_output(V20))
    assert info.tool_version == "20.2.0"
    assert [(c.npu_id, c.chip_id, c.device_id) for c in info.chips] == [
        (215, 0, 0),
        (215, 1, 1),
        (215, 2, 2),
        (215, 3, 3),
    ]
    assert {c.name for c in info.chips} == {"310"}
    assert all(c.hbm_total_mb is None and c.hugepages_total is None for c in info.chips)
    assert [c.temperature_c for c in info.chips] == [56, 57, 57, 55]
    assert info.chips[0].memory_total_mb == 8192


def test_info_21x_hugepages_without_hbm() -> None:
    info = parse_npu_smi_info(tool_output(V21))
    assert info.version == "21.0.4.B030"
    assert [c.device_id for c in info.chips] == [3, 4, 5, 6]
    assert [(c.hugepages_used, c.hugepages_total) for c in info.chips] == [(0, 970)] * 4
    assert [c.memory_used_mb for c in info.chips] == [2703, 2867, 2867, 2867]
    assert info.chips[1].bus_id == "0000:8a:00.0"


@pytest.mark.parametrize(
    ("mutate", "line", "why"),
    [
        (lambda t: "\n".join(t.splitlines()[:8]) + "\n", 8, "truncated"),
        (lambda t: t.replace("| 0000:C2:00.0  |", "| 0000:C2:00.0 "), 11, "cells"),
        (lambda t: t.replace("101.8       43", "hot         43"), 7, "Power(W)"),
        (lambda t: t.replace("| 2     910B3", "garbage here"), 13, "not part of"),
        (lambda t: "", None, "empty"),
    ],
)
def test_info_bad_input_names_source_and_line(mutate: object, line: int | None, why: str) -> None:
    assert callable(mutate)
    with pytest.raises(ParseError) as e:
        parse_npu_smi_info(mutate(tool_output(B3)), source="npu-smi info@h1")
    assert e.value.source == "npu-smi info@h1"
    assert e.value.line == line
    assert why in e.value.message


def test_mapping_910b_mcu_rows_and_310p_noncontiguous() -> None:
    rows = parse_npu_smi_mapping(tool_output("gpustack_test_npu_smi_910B_info-m.txt"))
    assert len(rows) == 16
    npus = [r for r in rows if not r.is_mcu]
    assert [r.logic_id for r in npus] == list(range(8))
    assert rows[1] == ChipMapping(npu_id=0, chip_id=1, logic_id=None, name="Mcu")
    p310 = parse_npu_smi_mapping(tool_output("gpustack_test_npu_smi_310P_info-m.txt"))
    p = [r for r in p310 if not r.is_mcu]
    assert [(r.npu_id, r.logic_id) for r in p] == [
        (1, 0),
        (1, 1),
        (2, 2),
        (2, 3),
        (4, 4),
        (4, 5),
        (5, 6),
        (5, 7),
    ]


def test_mapping_tab_indented_910a_in_a_bundle() -> None:
    rows = parse_npu_smi_mapping(section(KG_BEFORE, "npu-smi info -m"))
    assert [r.name for r in rows] == ["Ascend 910A"] * 8
    assert rows[7].npu_id == 7


def test_mapping_garbage_line() -> None:
    text = tool_output("gpustack_test_npu_smi_910B_info-m.txt") + "7 x\n"
    with pytest.raises(ParseError) as e:
        parse_npu_smi_mapping(text)
    assert e.value.line == 18


def test_empty_npu_smi_info_in_bundle_is_an_error() -> None:
    # the before-bundle recorded "npu-smi info" with an empty body
    with pytest.raises(ParseError, match="empty"):
        parse_npu_smi_info(section(KG_BEFORE, "/usr/local/bin/npu-smi info"))


def test_health_ok_and_alarm_with_error_codes() -> None:
    ok = parse_health_status(section(KG_BEFORE, "-c 0 -t health"))
    assert (ok.health, ok.error_codes, ok.information) == (Health.OK, (), "")
    alarm = parse_health_status(section(KG_AFTER, "-c 0 -t health"))
    assert alarm.health is Health.ALARM
    assert alarm.error_codes == ("A4025021", "8C03A000", "8C084E00")
    assert alarm.information.splitlines() == [
        "ascend_monitor adda heart beat lost error",
        "node type=process-manager, sensor type=General Software, "
        "event state=The process start failed or exit abnormally",
        "node type=adda, sensor type=Heartbeat Sensor, event state=Heartbeat Lost.",
    ]


def test_health_garbage() -> None:
    with pytest.raises(ParseError) as e:
        parse_health_status("Health Status : Fine\n", source="health@h2")
    assert "Fine" in e.value.message and e.value.source == "health@h2"


def test_board_card_and_chip() -> None:
    card = parse_key_values(section(KG_BEFORE, "-i 0 -t board"), "board")[0]
    assert card["Software Version"] == "23.0.5"
    assert card["Firmware Version"] == "7.1.0.7.220"
    assert (card["PCI Vendor ID"], card["PCI Device ID"]) == ("0x19E5", "0xD801")
    chip = parse_key_values(section(KG_BEFORE, "-c 0 -t board"), "board")[0]
    assert chip["Chip Name"] == "910A"
    assert chip["PCIe Bus Info"] == "0000:61:00.0"


def test_board_on_a_vanished_card_is_a_parse_error_at_line_1() -> None:
    # after the fault, npu-smi answers "Invalid card id." for the NPU missing from lspci
    with pytest.raises(ParseError) as e:
        parse_key_values(section(KG_AFTER, "-i 0 -t board"), "npu-smi info -t board")
    assert e.value.line == 1 and "Invalid card id" in e.value.message


def test_usages_and_common_chip_blocks() -> None:
    usages = parse_key_values(tool_output("gpustack_test_npu_smi_910B_info-t-usages.txt"), "usages")
    assert usages[0] == {"NPU ID": "0", "Chip Count": "1"}
    assert usages[1]["HBM Capacity(MB)"] == "32768"
    assert usages[1]["Chip ID"] == "0"  # after the chip's fields in -t usages
    common = parse_key_values(tool_output("gpustack_test_npu_smi_310P_info-t-common.txt"), "common")
    chips = [b for b in common if "Chip ID" in b]
    assert [(b["Chip ID"], b["Temperature(C)"]) for b in chips] == [("0", "60"), ("1", "59")]
    assert common[-1]["Chip Name"] == "mcu"
    c910 = parse_key_values(tool_output("gpustack_test_npu_smi_910B_info-t-common.txt"), "common")
    assert c910[1]["Aicore Count"] == "32"
    assert c910[1]["NPU Real-time Power(W)"] == "69.0"
    hbm = parse_key_values(section(KG_BEFORE, "-i 0 -t usages"), "usages")
    assert hbm[1]["HBM Capacity(MB)"] == "31129"


def test_topo_hccs_full_mesh() -> None:
    topo = parse_npu_smi_topo(tool_output("ms-swift_NPU-support_npu-smi_info_-t_topo_8x910B3.txt"))
    assert topo.npus == tuple(f"NPU{i}" for i in range(8))
    assert len(topo.links) == 56
    assert set(topo.links.values()) == {"HCCS"}
    assert topo.cpu_affinity["NPU0"] == "144-167"
    assert topo.cpu_affinity["NPU4"] == "0-23"


def test_topo_row_missing_a_cell() -> None:
    text = tool_output("ms-swift_NPU-support_npu-smi_info_-t_topo_8x910B3.txt")
    row1 = next(line for line in text.splitlines() if line.startswith("NPU1 "))
    bad = text.replace(row1, "NPU1       HCCS       X          144-167")
    with pytest.raises(ParseError) as e:
        parse_npu_smi_topo(bad)
    assert e.value.line == 3


def test_board_typed() -> None:
    board = parse_board(section(KG_BEFORE, "-i 0 -t board"))
    assert (board.npu_id, board.software_version, board.firmware_version) == (
        0,
        "23.0.5",
        "7.1.0.7.220",
    )
    assert (board.pci_vendor_id, board.pci_device_id) == ("19e5", "d801")
    assert board.bus_id == "0000:61:00.0"
    with pytest.raises(ParseError, match="PCI Device ID is not hex"):
        parse_board("NPU ID : 0\nPCI Device ID : D801\n")


def test_chip_usages_common_and_usages_views() -> None:
    c910 = parse_chip_usages(tool_output("gpustack_test_npu_smi_910B_info-t-common.txt"), "common")
    assert c910 == [
        ChipUsage(
            npu_id=0,
            chip_id=0,
            temperature_c=46,
            power_w=69.0,
            hbm_capacity_mb=None,
            hbm_usage_percent=0,
            aicore_count=32,
        )
    ]
    c310 = parse_chip_usages(tool_output("gpustack_test_npu_smi_310P_info-t-common.txt"), "common")
    assert [(c.npu_id, c.chip_id, c.temperature_c) for c in c310] == [(1, 0, 60), (1, 1, 59)]
    u310 = parse_chip_usages(tool_output("gpustack_test_npu_smi_310P_info-t-usages.txt"), "usages")
    assert [c.chip_id for c in u310] == [0, 1]
    u910 = parse_chip_usages(section(KG_BEFORE, "-i 0 -t usages"), "usages")
    assert [(c.chip_id, c.hbm_capacity_mb) for c in u910] == [(0, 31129)]


def test_chip_usages_count_mismatch_and_garbage() -> None:
    text = tool_output("gpustack_test_npu_smi_310P_info-t-common.txt")
    with pytest.raises(ParseError, match="Chip Count 3, 2 blocks"):
        parse_chip_usages(text.replace("Chip Count                     : 2", "Chip Count : 3"), "c")
    with pytest.raises(ParseError, match="Temperature\\(C\\) is not a number"):
        parse_chip_usages(text.replace(": 60", ": hot"), "c")
