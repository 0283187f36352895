"""Hygon DCU parsers and plugin on the real captures (issue 28): the four hy-smi / DTK rocm-smi
table formats, DTK's ``rocm-smi --json``, header drift and garbage refused naming the tool and
line, the inventory, the exports, the group and the PCI class (Co-processor).

Every test here fails on main 84be469 (no Hygon plugin: ``gpufleet.vendors.hygon`` does not
exist)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.collect.pci import parse_lspci
from gpufleet.domain.accelerator_exports import Gres, extended_resources, gres_of
from gpufleet.domain.accelerators import (
    UNKNOWN_MODEL,
    Health,
    Vendor,
    accelerators_on_bus,
    inventory_group,
)
from gpufleet.domain.vendors import plugin
from gpufleet.errors import ParseError
from gpufleet.service.hosts.vendor_exports import EXPORTS
from gpufleet.vendors.hygon.hy_smi import HEADERS, parse_hy_smi, parse_rocm_smi_dtk_json
from gpufleet.vendors.hygon.plugin import (
    COLLECTOR,
    INSPECTOR,
    PLUGIN,
    labels,
    parse_sections,
)

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "captured" / "hygon"
ROCM40 = "paddle-inference-demo_dcu_rocm-smi_rocm4.0.1.txt"
DTK2310 = "paddle-docs_dcu_rocm-smi_dtk23.10.1_4dcu.txt"
DTK2404 = "paddlenlp_dcu_llama_hy-smi_dtk24.04.1_k100ai_4dcu.txt"
DTK2504 = "deepeval-skills_hy-smi_hcu_dec-enc_8x800w.txt"
JSON = "gpustack_hygon-gpu-24.04.3-rocm-smi.json"
LSPCI = "paddlenlp_dcu_install_lspci_k100ai.txt"


def _read(name: str) -> str:
    return (FIX / name).read_text(encoding="utf-8")


# ---- the four table formats, concrete values from each capture


def test_rocm_4_0_table_gpu_word_with_clocks_and_fan() -> None:
    smi = parse_hy_smi(_read(ROCM40), source="rocm-smi")
    assert (smi.format, smi.device_word) == ("rocm-4.0", "GPU")
    (d,) = smi.devices
    assert (d.index, d.temperature_c, d.power_w, d.power_cap_w) == (0, 42.0, 39.0, 290.0)
    assert (d.sclk_mhz, d.mclk_mhz, d.fan_pct) == (300.0, 1200.0, 20.78)
    assert (d.vram_used_pct, d.utilisation_pct, d.perf, d.mode) == (0.0, 0.0, "auto", None)
    assert d.decoder_pct is None and d.encoder_pct is None


def test_dtk_23_10_table_dcu_word_with_fan_no_mode() -> None:
    smi = parse_hy_smi(_read(DTK2310), source="rocm-smi")
    assert (smi.format, smi.device_word) == ("dtk-23.10", "DCU")
    assert [d.index for d in smi.devices] == [0, 1, 2, 3]
    assert [d.temperature_c for d in smi.devices] == [30.0, 30.0, 29.0, 29.0]
    assert [d.power_w for d in smi.devices] == [38.0, 41.0, 38.0, 39.0]
    assert {d.power_cap_w for d in smi.devices} == {280.0}
    assert {d.fan_pct for d in smi.devices} == {0.0}
    assert {d.mode for d in smi.devices} == {None}


def test_dtk_24_04_hy_smi_dcu_percent_and_mode_without_padding() -> None:
    smi = parse_hy_smi(_read(DTK2404))
    assert (smi.format, smi.device_word) == ("dtk-24.04", "DCU")
    assert [d.temperature_c for d in smi.devices] == [49.0, 48.0, 53.0, 49.0]  # upper-case C
    assert [d.power_w for d in smi.devices] == [118.0, 120.0, 116.0, 138.0]
    assert {d.power_cap_w for d in smi.devices} == {800.0}
    assert {d.mode for d in smi.devices} == {"Normal"}
    assert {d.fan_pct for d in smi.devices} == {None}


def test_dtk_25_04_hy_smi_hcu_with_decoder_and_encoder() -> None:
    smi = parse_hy_smi(_read(DTK2504))
    assert (smi.format, smi.device_word) == ("dtk-25.04", "HCU")
    assert len(smi.devices) == 8
    assert [d.vram_used_pct for d in smi.devices] == [98, 99, 98, 100, 0, 0, 0, 0]
    assert [d.temperature_c for d in smi.devices] == [43, 42, 37, 37, 43, 42, 38, 36]
    assert smi.devices[7].power_w == 135.0
    assert {(d.utilisation_pct, d.decoder_pct, d.encoder_pct) for d in smi.devices} == {
        (0.0, 0.0, 0.0)
    }


def test_every_header_variant_of_the_captures_is_known_and_tested() -> None:
    formats = {parse_hy_smi(_read(n)).format for n in (ROCM40, DTK2310, DTK2404, DTK2504)}
    assert formats == set(HEADERS)


# ---- header drift and garbage: a ParseError naming the tool, the line and the columns


def test_an_unknown_header_is_refused_naming_tool_line_and_columns() -> None:
    # the 25.04 table with one more column than any known format (a future hy-smi)
    text = _read(DTK2504).replace("Enc%      Mode", "Enc%      Mode     Ecc", 1)
    with pytest.raises(ParseError) as e:
        parse_hy_smi(text)
    err = e.value
    assert (err.source, err.line, err.column) == ("hy-smi", 3, 1)
    assert "unknown table header" in err.message
    assert "HCU Temp AvgPwr Perf PwrCap VRAM% HCU% Dec% Enc% Mode Ecc" in err.message


def test_a_renamed_column_is_refused_not_read_by_position() -> None:
    # DCU% renamed HCU% while the device word stays DCU: no known format says so
    text = _read(DTK2404).replace("DCU%", "HCU%", 1)
    with pytest.raises(ParseError, match="unknown table header") as e:
        parse_hy_smi(text)
    assert e.value.line == 3


@pytest.mark.parametrize(
    ("old", "new", "line", "what"),
    [
        ("49.0C    118.0W", "hot      118.0W", 4, "Temp: 'hot'"),
        ("118.0W", "118.0", 4, "AvgPwr: '118.0' is not a number in W"),
        ("2       53.0C", "x       53.0C", 6, "not a device index"),
        ("Normal\n3", "Normal extra\n3", 6, "row has 9 fields"),
        ("\n1   ", "\n\u00b2   ", 5, "not a device index"),  # isdigit() but not int()
        ("49.0C", "\u0664\u0669.0C", 4, "is not a number in c/C"),  # not ASCII digits
    ],
)
def test_a_garbage_row_is_refused_naming_the_line(old: str, new: str, line: int, what: str) -> None:
    text = _read(DTK2404)
    assert old in text
    with pytest.raises(ParseError) as e:
        parse_hy_smi(text.replace(old, new, 1))
    assert (e.value.source, e.value.line) == ("hy-smi", line)
    assert what in e.value.message


def test_a_cut_table_and_a_foreign_answer_are_refused() -> None:
    text = _read(DTK2404)
    with pytest.raises(ParseError, match="footer"):
        parse_hy_smi(text[: text.index("=======", 200)])
    with pytest.raises(ParseError, match="unknown table header") as e:
        parse_hy_smi("Error: driver not loaded\n")
    assert e.value.line == 1
    with pytest.raises(ParseError, match="listed twice"):
        parse_hy_smi(text.replace("\n1   ", "\n0   ", 1))


def test_dtk_rocm_smi_json_values_and_garbage() -> None:
    (card,) = parse_rocm_smi_dtk_json(_read(JSON))
    assert card.index == 0 and card.device_id == "6210"
    assert card.vendor == "Chengdu Haiguang IC Design Co., Ltd."
    # anonymised upstream by the contributor (PROVENANCE: EDITED upstream), read as printed
    assert (card.series, card.serial) == ("DCU xxxx", "TPXxxxx")
    assert card.unique_id == "7100fa8866904061"
    assert (card.vram_total_mib, card.vram_used_mib, card.utilisation_pct) == (65520, 2, 0.0)
    assert (card.temperature_edge_c, card.temperature_junction_c) == (41.0, 39.0)
    assert (card.temperature_memory_c, card.power_w) == (44.0, 80.0)
    with pytest.raises(ParseError, match="not JSON") as e:
        parse_rocm_smi_dtk_json(_read(JSON)[:100])
    assert e.value.source == "rocm-smi --json (DTK)" and e.value.line is not None
    with pytest.raises(ParseError, match="card0: 'vram Total Memory"):
        parse_rocm_smi_dtk_json(_read(JSON).replace('"65520"', '"64 GiB"'))


# ---- the plugin: inventory, exports, group, collector, inspector


def test_inventory_from_hy_smi_alone_has_no_identity() -> None:
    inv = parse_sections({"hy_smi": _read(DTK2404)})
    assert inv.vendor == Vendor("hygon") and inv.count == 4
    a = inv.accelerators[2]
    assert (a.index, a.model, a.temperature_c, a.power_w, a.power_limit_w) == (
        2, UNKNOWN_MODEL, 53.0, 116.0, 800.0)
    assert (a.serial, a.bus_id, a.memory_total_mib, a.health) == (
        None, None, None, Health.UNKNOWN)
    assert labels(inv) == {}  # no product name to label with
    assert inventory_group(inv) is None
    assert PLUGIN.exports.resource(inv) == "hygon.com/dcu"
    assert gres_of([inv], EXPORTS) == [Gres("dcu", None, 4, None)]  # no model: no GRES type
    assert extended_resources([inv], EXPORTS) == {"hygon.com/dcu": 4}


def test_inventory_merges_dtk_rocm_smi_json_by_index() -> None:
    """The two single-device captures are of two hosts (rocm 4.0.1 table, DTK 24.04.3 JSON):
    combined here only to show the merge by index, not as one host's answer."""
    inv = parse_sections({"hy_smi": _read(ROCM40), "hygon_rocm_smi_json": _read(JSON)})
    (a,) = inv.accelerators
    assert (a.model, a.pci_device_id, a.serial, a.uuid) == (
        "DCU xxxx", "6210", "TPXxxxx", "7100fa8866904061")
    assert (a.memory_total_mib, a.memory_used_mib, a.temperature_c) == (65520, 2, 42.0)
    assert labels(inv) == {"hygon.com/dcu.name": "DCU_xxxx"}
    assert inventory_group(inv) == "dcu_xxxx"


def test_the_two_tools_listing_other_devices_is_refused() -> None:
    with pytest.raises(ParseError, match=r"lists cards \[0\], hy-smi lists DCU \[0, 1, 2, 3\]"):
        parse_sections({"hy_smi": _read(DTK2404), "hygon_rocm_smi_json": _read(JSON)})
    with pytest.raises(ParseError, match="section missing"):
        parse_sections({"hygon_rocm_smi_json": _read(JSON)})


def test_group_exports_and_sections_follow_hygon_conventions() -> None:
    assert plugin("hygon") is PLUGIN
    assert PLUGIN.group("K100_AI") == "dcu_k100_ai"
    assert PLUGIN.group("DCU Z100L") == "dcu_z100l"
    assert (PLUGIN.exports.gres_name, PLUGIN.exports.runtime) == ("dcu", "dtk")
    assert (PLUGIN.pci_vendor_id, PLUGIN.pci_classes) == ("1d94", ("0b40", "Co-processor"))
    assert COLLECTOR.primary == "hy_smi" and INSPECTOR.primary == "hy_smi"
    commands = [s.command for s in COLLECTOR.sections]
    assert commands == [
        "$TO hy-smi",
        "$TO rocm-smi -i --showmeminfo vram --showpower --showserial --showuse --showtemp "
        "--showproductname --showuniqueid --json",
    ]


def test_hygon_co_processors_count_on_the_bus() -> None:
    """Hygon DCUs are PCI class Co-processor: the plain lspci capture (names only) and its -nn
    form both count them, so a Hygon host is not GPU-less."""
    plain = parse_lspci((FIX.parent / "lspci" / LSPCI).read_text(), source="lspci")
    assert accelerators_on_bus(plain) == {Vendor("hygon"): 2}
    nn = parse_lspci(
        "0000:37:00.0 Co-processor [0b40]: Chengdu Haiguang IC Design Co., Ltd. "
        "Device [1d94:6210] (rev 01)\n"
    )
    assert accelerators_on_bus(nn) == {Vendor("hygon"): 1}
