"""Kunlunxin ``xpu_smi`` parser and plugin on the real captures (issue 28): the 4.x sections
(K200 with its dual-device cards, R300 with VIDEO) and the 5.x box (P800) with concrete
values, header drift and garbage refused naming ``xpu_smi``, the line and the columns, the
inventory (logical devices apart from physical cards), the exports, group and PCI identity.

Every test here fails on main 3f67bc2 (no ``gpufleet.vendors.kunlunxin``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.collect.pci import parse_lspci
from gpufleet.domain.accelerator_exports import Gres, extended_resources, gres_of
from gpufleet.domain.accelerators import Health, Vendor, accelerators_on_bus, inventory_group
from gpufleet.domain.vendors import plugin
from gpufleet.errors import ParseError
from gpufleet.service.hosts.vendor_exports import EXPORTS
from gpufleet.vendors.kunlunxin.plugin import (
    COLLECTOR,
    INSPECTOR,
    PLUGIN,
    labels,
    parse_sections,
    physical_cards,
)
from gpufleet.vendors.kunlunxin.xpu_smi import BOX_HEADER, TABLES, parse_xpu_smi

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "captured" / "kunlunxin"
K200 = "paddle-inference-demo_xpu_smi_k200_x86.txt"
R300 = "paddle-docs_xpu_smi_r300.txt"
P800 = "ernie_xpu_smi_p800_8x.txt"
LSPCI = "paddlenlp_xpu_llama_lspci_r300.txt"


def _read(name: str) -> str:
    return (FIX / name).read_text(encoding="utf-8")


# ---- concrete values from each capture


def test_k200_two_devices_per_card_share_address_and_serial() -> None:
    smi = parse_xpu_smi(_read(K200))
    assert (smi.format, smi.runtime, smi.driver, smi.processes) == ("xpu_smi-4", "4.0", "4.0", 0)
    assert [d.index for d in smi.devices] == [0, 1, 2, 3]
    assert [d.bus_id for d in smi.devices] == [
        "0000:06:00.0", "0000:06:00.0", "0001:03:00.0", "0001:03:00.0"]
    assert [d.serial for d in smi.devices] == [
        "0200210302000998", "0200210302000998", "0200210202001104", "0200210202001104"]
    assert [d.inode for d in smi.devices] == [f"/dev/xpu{i}" for i in range(4)]
    assert [(d.memory_used_mib, d.l3_used_mib) for d in smi.devices] == [
        (504, 14), (504, 14), (0, 0), (0, 0)]
    assert {(d.model, d.memory_total_mib, d.l3_total_mib, d.utilisation_pct, d.video)
            for d in smi.devices} == {("K200", 8064, 16, 0, None)}
    assert smi.devices[0].temperature_c is None  # 4.x prints no temperature


def test_r300_video_section_and_runtime_4_31() -> None:
    smi = parse_xpu_smi(_read(R300))
    assert (smi.format, smi.runtime, smi.driver) == ("xpu_smi-4", "4.31", "4.0")
    assert [(d.index, d.bus_id) for d in smi.devices] == [
        (0, "0000:53:00.0"), (1, "0000:56:00.0")]
    # the serial as its source anonymised it (PROVENANCE: EDITED upstream), read as printed
    assert {(d.model, d.serial, d.memory_total_mib, d.l3_total_mib) for d in smi.devices} == {
        ("R300", "02Kxxx", 32768, 63)}
    assert {(v.decoder_pct, v.encoder_pct, v.imgproc_pct)
            for d in smi.devices if (v := d.video)} == {(0, 0, 0)}
    assert all(d.video is not None for d in smi.devices)


def test_p800_box_with_temperature_power_ecc_and_modes() -> None:
    smi = parse_xpu_smi(_read(P800))
    assert (smi.format, smi.driver, smi.runtime, smi.processes) == (
        "xpu-smi-5", "5.0.21.21", "5.0.21", None)
    assert [d.bus_id[5:7] for d in smi.devices] == ["03", "05", "63", "65", "83", "85", "a3", "a5"]
    assert [d.temperature_c for d in smi.devices] == [37, 41, 36, 36, 40, 40, 39, 40]
    assert [d.power_w for d in smi.devices] == [88, 90, 89, 89, 88, 90, 90, 87]
    assert {(d.model, d.power_cap_w, d.memory_total_mib, d.l3_total_mib, d.ecc_uncorrectable)
            for d in smi.devices} == {("P800 OAM", 400, 98304, 96, 0)}
    d = smi.devices[0]
    assert (d.persistence, d.fan, d.perf, d.compute_mode, d.sriov_mode) == (
        None, None, None, "Default", "Disabled")
    assert (d.serial, d.inode) == (None, None)


def test_every_format_and_table_of_the_captures_is_known_and_tested() -> None:
    seen = {parse_xpu_smi(_read(n)).format for n in (K200, R300, P800)}
    assert seen == {"xpu_smi-4", "xpu-smi-5"}
    titles = {ln.strip() for n in (K200, R300) for ln in _read(n).splitlines()
              if ln.startswith("  ") and ln.strip().isupper()}
    assert titles == set(TABLES)
    assert len(BOX_HEADER) == 3


# ---- header drift and garbage


def test_an_unknown_4x_header_is_refused_naming_tool_line_and_columns() -> None:
    text = _read(K200).replace("| UseRate |", "| Health  |", 1)
    with pytest.raises(ParseError) as e:
        parse_xpu_smi(text)
    assert (e.value.source, e.value.line, e.value.column) == ("xpu_smi", 5, 1)
    assert "unknown DEVICES table header" in e.value.message
    assert "INODE | Health | L3" in e.value.message


def test_an_unknown_5x_header_is_refused_naming_tool_line_and_columns() -> None:
    text = _read(P800).replace("| XPU-Util  Compute M. |", "| XPU-Util  MIG M.     |", 1)
    with pytest.raises(ParseError) as e:
        parse_xpu_smi(text)
    assert (e.value.source, e.value.line, e.value.column) == ("xpu_smi", 5, 1)
    assert "unknown table header" in e.value.message and "XPU-Util MIG M." in e.value.message


@pytest.mark.parametrize(
    ("name", "old", "new", "line", "what"),
    [
        (K200, "|     0 % | 14", "|     x % | 14", 7, "UseRate"),
        (K200, "| 0000:06:00.0 | K200  | 0200210302000998 | /dev/xpu1", "| 06:00 | K200  | "
         "0200210302000998 | /dev/xpu1", 8, "PCI Addr"),
        (K200, "/dev/xpu2 ", "/dev/gpu2 ", 9, "INODE"),
        (K200, "504 / 8064 MB", "504 / 8064 GB", 7, "Memory"),
        (K200, "|     1 | 0000", "|     0 | 0000", 8, "listed twice"),
        (R300, "|     1 |  R300 | 0 %", "|     7 |  R300 | 0 %", 15, "VIDEO: DevID 7"),
        (P800, " 37C ", " hotC ", 10, "Fan Temp Perf Pwr:Usage/Cap"),
        (P800, "88W / 400W", "88 W / 400W", 10, "Fan Temp Perf"),
        (P800, "|                    0 |\n| N/A   41C", "|                 lots |\n| N/A   41C",
         13, "Volatile Uncorr. ECC"),
        (P800, "00000000:05:00.0", "00000000:05:00", 13, "Bus-Id"),
    ],
)
def test_a_garbage_row_is_refused_naming_the_line(
    name: str, old: str, new: str, line: int, what: str
) -> None:
    text = _read(name)
    assert old in text
    with pytest.raises(ParseError) as e:
        parse_xpu_smi(text.replace(old, new, 1))
    assert (e.value.source, e.value.line) == ("xpu_smi", line)
    assert what in e.value.message


def test_a_cut_or_foreign_answer_is_refused() -> None:
    p800 = _read(P800)
    with pytest.raises(ParseError, match="cut short"):
        parse_xpu_smi(p800[: p800.index("\n\n") + 1])  # without the Processes box
    k200 = _read(K200)
    with pytest.raises(ParseError, match="no PROCESSES section: the output was cut short"):
        parse_xpu_smi(k200[: k200.index("  PROCESSES")])
    with pytest.raises(ParseError, match="neither xpu_smi format") as e:
        parse_xpu_smi("xpu_smi: error while loading shared libraries: libxpuml.so\n")
    assert e.value.line == 1
    with pytest.raises(ParseError, match="empty output"):
        parse_xpu_smi("\n")


# ---- the plugin


def test_inventory_counts_logical_devices_and_keeps_the_cards_apart() -> None:
    inv = parse_sections({"xpu_smi": _read(K200)})
    assert inv.vendor == Vendor("kunlunxin") and inv.count == 4
    assert physical_cards(inv) == 2  # two K200 cards, two devices each
    a = inv.accelerators[3]
    assert (a.index, a.model, a.bus_id, a.serial, a.memory_total_mib, a.memory_used_mib) == (
        3, "K200", "0001:03:00.0", "0200210202001104", 8064, 0)
    assert (a.health, a.temperature_c, a.error_counters) == (Health.UNKNOWN, None, ())
    assert (inv.versions.driver, inv.versions.runtime) == ("4.0", "4.0")
    assert inventory_group(inv) == "xpu_k200"
    assert gres_of([inv], EXPORTS) == [Gres("xpu", "k200", 4, "/dev/xpu[0-3]")]
    assert extended_resources([inv], EXPORTS) == {"kunlunxin.com/xpu": 4}
    assert labels(inv) == {}
    r300 = parse_sections({"xpu_smi": _read(R300)})
    assert (r300.count, physical_cards(r300)) == (2, 2)


def test_p800_inventory_has_temperature_power_and_the_ecc_counter() -> None:
    inv = parse_sections({"xpu_smi": _read(P800)})
    assert inv.count == 8 and physical_cards(inv) == 8
    a = inv.accelerators[1]
    assert (a.model, a.bus_id, a.temperature_c, a.power_w, a.power_limit_w) == (
        "P800 OAM", "0000:05:00.0", 41.0, 90.0, 400.0)
    assert [(c.name, c.count) for c in a.error_counters] == [("ecc_uncorrectable", 0)]
    assert (inv.versions.driver, inv.versions.runtime) == ("5.0.21.21", "5.0.21")
    assert inventory_group(inv) == "xpu_p800_oam"
    assert gres_of([inv], EXPORTS) == [Gres("xpu", "p800", 8, "/dev/xpu[0-7]")]


def test_an_inode_that_is_not_the_devid_node_is_refused() -> None:
    with pytest.raises(ParseError, match="DevID 1: INODE /dev/xpu7 is not /dev/xpu1"):
        parse_sections({"xpu_smi": _read(K200).replace("/dev/xpu1 ", "/dev/xpu7 ", 1)})
    with pytest.raises(ParseError, match="section missing"):
        parse_sections({})


def test_plugin_identity_sections_and_pci_class() -> None:
    assert plugin("kunlunxin") is PLUGIN
    assert (PLUGIN.pci_vendor_id, PLUGIN.lspci_name) == ("1d22", "Baidu Technology")
    assert PLUGIN.pci_classes == ("0780", "Communication controller")
    assert (PLUGIN.exports.gres_name, PLUGIN.exports.runtime) == ("xpu", "xre")
    (sec,) = COLLECTOR.sections
    assert (sec.name, sec.command, sec.tool) == ("xpu_smi", "xpu_smi_any", "xpu_smi")
    assert "$TO xpu_smi" in sec.functions and "$TO xpu-smi" in sec.functions
    assert INSPECTOR.inspect_sections == COLLECTOR.sections


def test_r300_communication_controllers_count_on_the_bus() -> None:
    """lspci's database lacks vendor 1d22 ("Device 1d22:3684"): the id and the class
    (Communication controller) make them Kunlunxin XPUs, not an unread vendor."""
    plain = parse_lspci((FIX.parent / "lspci" / LSPCI).read_text(), source="lspci")
    assert accelerators_on_bus(plain) == {Vendor("kunlunxin"): 8}
    nn = parse_lspci("0000:53:00.0 Communication controller [0780]: Device [1d22:3684]\n")
    assert accelerators_on_bus(nn) == {Vendor("kunlunxin"): 1}
