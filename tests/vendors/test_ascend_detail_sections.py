"""The per-NPU detail sections of the Ascend plugin (issue 15) on real captures: ``npu-smi
info -t board|usages|common -i N`` (once per NPU) and ``hccn_tool -i L -optical -g`` (per
chip), framed as the collection script's ``npu_each`` frames them, read into the records.

Where a test needs a table that leaves a value unknown (``NA``) the real table is edited in
that one cell and says so; every other byte is as captured."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from tests.vendors.ascend_captures import section, tool_output

from gpufleet.collect.assemble import assemble_facts
from gpufleet.collect.bundle import Section
from gpufleet.domain.accelerators import Accelerator
from gpufleet.domain.checks import CHECKS, CheckContext, CheckStatus
from gpufleet.domain.spec import ExpectedSpec
from gpufleet.errors import ParseError
from gpufleet.lab.fleet import LabHost
from gpufleet.lab.renderers import render_sections
from gpufleet.vendors.huawei import plugin as ascend
from gpufleet.vendors.huawei.hccn import parse_optical

B3 = "ms-swift_NPU-support_npu-smi_info_8x910B3.txt"
MAPPING_910B = "gpustack_test_npu_smi_910B_info-m.txt"
KG_BEFORE = "mind-cluster_kg_parse_npu_info_before.txt"
KG_AFTER = "mind-cluster_kg_parse_npu_info_after.txt"
USAGES_910B = "gpustack_test_npu_smi_910B_info-t-usages.txt"
COMMON_910B = "gpustack_test_npu_smi_910B_info-t-common.txt"
NOW = datetime(2026, 12, 3, tzinfo=UTC)

# the B3 table's NPU 0 rows: metrics as captured, and the cells a test blanks to NA
_NPU0_METRICS = "| 101.8       43                0    / 0             |"
_NPU0_NA_METRICS = "| NA          NA                0    / 0             |"
_NPU0_HBM = "3318 / 65536"
_NPU0_NO_HBM = "0    / 0    "


def _framed(npu: int, text: str, rc: int = 0) -> str:
    """One answer as ``npu_each`` frames it (NPU ``npu``, chip 0, logic id ``npu``)."""
    return f"== npu {npu} chip 0 logic {npu} ==\n{text}\n== rc {rc} ==\n"


def _read(**sections: str) -> dict[int, Accelerator]:
    outputs = {
        "npu_smi_info": tool_output(B3),
        "npu_smi_mapping": tool_output(MAPPING_910B),
        **sections,
    }
    return {a.index: a for a in ascend.parse_sections(outputs).accelerators}


def test_the_script_runs_the_detail_views_once_per_npu_and_optical_per_chip() -> None:
    names = {s.name: s.command for s in ascend.COLLECTOR.sections}
    assert names["npu_smi_board"] == "npu_each board"
    assert names["npu_smi_usages"] == "npu_each usages"
    assert names["npu_smi_common"] == "npu_each common"
    assert names["hccn_optical"] == "npu_each -optical"
    functions = next(s.functions for s in ascend.COLLECTOR.sections if s.functions)
    assert 'board|usages|common) $TO npu-smi info -t "$1" -i "$n" ;;' in functions


def test_board_gives_firmware_and_pci_device_id_missing_sections_leave_them_unknown() -> None:
    board = section(KG_BEFORE, "-i 0 -t board")  # 910A card: fw 7.1.0.7.220, 0x19E5:0xD801
    npus = _read(npu_smi_board=_framed(0, board))
    assert npus[0].firmware == {"firmware": "7.1.0.7.220", "software": "23.0.5"}
    assert npus[0].pci_device_id == "d801"
    # NPU 1 got no board answer: unknown, nothing invented
    assert npus[1].firmware == {} and npus[1].pci_device_id is None
    plain = _read()
    assert plain[0].firmware == {} and plain[0].pci_device_id is None


def test_board_of_a_vanished_card_fails_closed_naming_the_command_and_npu() -> None:
    gone = section(KG_AFTER, "-i 0 -t board")  # "Invalid card id." / "Error parameter of -i"
    with pytest.raises(ParseError, match=r"^npu-smi info -t board -i 0.*Invalid card id"):
        _read(npu_smi_board=_framed(0, gone))
    board = section(KG_BEFORE, "-i 0 -t board")
    with pytest.raises(ParseError, match=r"^npu-smi info -t board -i 0: exited 2"):
        _read(npu_smi_board=_framed(0, board, rc=2))
    # NPU 0's answer framed as NPU 3's: the tool answered for another card
    with pytest.raises(ParseError, match=r"^npu-smi info -t board -i 3: answered for NPU 0"):
        _read(npu_smi_board=_framed(3, board))
    foreign = board.replace("0x19E5", "0x10DE")
    with pytest.raises(ParseError, match=r"PCI Vendor ID 10de is not Huawei's"):
        _read(npu_smi_board=_framed(0, foreign))


def test_usages_fill_hbm_only_where_the_table_shows_none() -> None:
    usages = tool_output(USAGES_910B)  # HBM Capacity 32768 MB, usage rate 0 %
    npus = _read(npu_smi_usages=_framed(0, usages))
    assert (npus[0].memory_total_mib, npus[0].memory_used_mib) == (65536, 3318)  # the table's
    # the table edited to show no HBM for NPU 0: -t usages' capacity and rate fill it
    table = tool_output(B3).replace(_NPU0_HBM, _NPU0_NO_HBM, 1)
    outputs = {
        "npu_smi_info": table,
        "npu_smi_mapping": tool_output(MAPPING_910B),
        "npu_smi_usages": _framed(0, usages),
    }
    filled = {a.index: a for a in ascend.parse_sections(outputs).accelerators}
    assert (filled[0].memory_total_mib, filled[0].memory_used_mib) == (32768, 0)
    assert filled[1].memory_total_mib == 65536  # its own table row
    # the 910A bundle's -t usages: HBM Capacity 31129 MB
    outputs["npu_smi_usages"] = _framed(0, section(KG_BEFORE, "-i 0 -t usages"))
    a910 = {a.index: a for a in ascend.parse_sections(outputs).accelerators}
    assert (a910[0].memory_total_mib, a910[0].memory_used_mib) == (31129, 0)
    del outputs["npu_smi_usages"]  # no -t usages: the table's (DDR) 0 / 0, as before
    assert ascend.parse_sections(outputs).accelerators[0].memory_total_mib == 0


def test_common_fills_temperature_and_power_the_table_prints_as_na() -> None:
    common = tool_output(COMMON_910B)  # chip 0: 46 C, 69.0 W; the mcu block is skipped
    npus = _read(npu_smi_common=_framed(0, common))
    assert (npus[0].temperature_c, npus[0].power_w) == (43.0, 101.8)  # the table's
    table = tool_output(B3).replace(_NPU0_METRICS, _NPU0_NA_METRICS, 1)
    outputs = {"npu_smi_info": table, "npu_smi_mapping": tool_output(MAPPING_910B)}
    unknown = ascend.parse_sections(outputs).accelerators[0]
    assert (unknown.temperature_c, unknown.power_w) == (None, None)  # nothing invented
    outputs["npu_smi_common"] = _framed(0, common)
    filled = ascend.parse_sections(outputs).accelerators[0]
    assert (filled.temperature_c, filled.power_w) == (46.0, 69.0)


def test_common_and_usages_garbage_fail_closed_naming_the_command_and_npu() -> None:
    common = tool_output(COMMON_910B)
    with pytest.raises(ParseError, match=r"^npu-smi info -t common -i 0: NPU 0: Temperature"):
        _read(npu_smi_common=_framed(0, common.replace(": 46", ": hot")))
    with pytest.raises(ParseError, match=r"^npu-smi info -t usages -i 2: answered for NPU 0"):
        _read(npu_smi_usages=_framed(2, tool_output(USAGES_910B)))
    with pytest.raises(ParseError, match=r"^npu-smi info -t common -i 0: exited 1"):
        _read(npu_smi_common=_framed(0, "", rc=1))
    with pytest.raises(ParseError, match=r"Chip ID is not a number: 'NA'"):
        chip_na = tool_output(USAGES_910B).replace(
            "Chip ID                        : 0", "Chip ID : NA"
        )
        _read(npu_smi_usages=_framed(0, chip_na))


def test_optical_module_state_becomes_error_counters() -> None:
    optical = section(KG_BEFORE, "-optical -g")  # "not present", Rx LOS/LoL 0xff, Tx 0x0
    npus = _read(hccn_optical=_framed(0, optical) + _framed(1, "Error: no port\n", rc=1))
    assert [(c.name, c.count) for c in npus[0].error_counters] == [
        ("optical_module_absent", 1),
        ("optical_tx_los_lanes", 0),
        ("optical_rx_los_lanes", 8),
        ("optical_tx_lol_lanes", 0),
        ("optical_rx_lol_lanes", 8),
    ]
    assert npus[1].error_counters == ()  # the tool failed for that port: unknown
    bad = optical.replace("Rx Los Flag          : 0xff", "Rx Los Flag          : lots")
    with pytest.raises(
        ParseError, match=r"^hccn_tool -i 0 -optical -g: Rx Los Flag is not a hex lane mask"
    ):
        _read(hccn_optical=_framed(0, bad))


def test_optical_flags_and_presence() -> None:
    opt = parse_optical(section(KG_BEFORE, "-optical -g"))
    assert (opt.tx_los_flag, opt.rx_los_flag, opt.tx_lol_flag, opt.rx_lol_flag) == (
        0,
        0xFF,
        0,
        0xFF,
    )
    present = parse_optical(section(KG_BEFORE, "-optical -g").replace("not present", "present"))
    assert present.present is True and present.counters()[0].count == 0
    with pytest.raises(ParseError, match="unknown module presence 'maybe'"):
        parse_optical(section(KG_BEFORE, "-optical -g").replace("not present", "maybe"))


def test_temperature_check_judges_a_temperature_only_common_reports() -> None:
    """The lab 910B3 host with NPU 0's table temperature edited to NA: ``-t common`` (46 C,
    NPU 0's capture replayed) supplies it, and the temperature check names the NPU."""
    sections = render_sections(LabHost(name="n1", model="ascend-910b3-8x", serial_salt=2))
    info = sections["npu_smi_info"]
    assert _NPU0_METRICS in info.stdout
    edited = Section(
        info.name, info.stdout.replace(_NPU0_METRICS, _NPU0_NA_METRICS, 1), info.stderr, info.rc
    )
    facts = assemble_facts({**sections, "npu_smi_info": edited}, NOW, "n1")
    npu0 = next(a for a in facts.accelerators if a.index == 0)
    assert npu0.temperature_c == 46.0 and npu0.power_w == 69.0
    spec = ExpectedSpec(gpu_count=8, gpu_model="910B3", gpu_memory_mib=65536)
    r = CHECKS["accelerator_temperature"](facts, CheckContext(now=NOW, spec=spec), {"max_c": 45})
    assert r.status is CheckStatus.FAIL
    assert r.message == "huawei #0 (0000:c1:00.0) 46 C > 45 C"
