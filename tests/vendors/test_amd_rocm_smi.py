"""``rocm-smi --json`` parser on real captures, ROCm 4.3 .. 6.2 key schemas (issue 15)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.errors import ParseError
from gpufleet.vendors.amd.rocm_smi import parse_rocm_smi_json, product_name

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "captured" / "amd"


def _parse(name: str) -> object:
    return parse_rocm_smi_json((FIX / name).read_text(), source=name)


def test_mi100_rocm571_six_cards_serial_unknown() -> None:
    smi = parse_rocm_smi_json((FIX / "telegraf_mi100_rocm571.json").read_text())
    assert smi.driver_version == "6.2.4"
    assert [c.index for c in smi.cards] == [0, 1, 2, 3, 4, 5]
    c0 = smi.cards[0]
    assert c0.series == "Arcturus GL-XL [Instinct MI100]"
    assert product_name(c0.series) == "Instinct MI100"
    assert c0.device_id == "738c"
    assert (c0.serial, c0.unique_id) == (None, None)  # "0" and "N/A": not exposed
    assert c0.vram_total_bytes == 34342961152
    assert c0.bus_id == "0000:1e:00.0"
    assert (c0.temperature_edge_c, c0.temperature_junction_c) == (31.0, 34.0)
    assert (c0.power_average_w, c0.power_max_w) == (39.0, 290.0)
    assert c0.vbios == "113-D3430400-037"
    assert c0.firmware["TA XGMI"] == "32.00.00.15"
    assert c0.pcie_replay_count == 0


def test_mi100_rocm602_device_id_key_and_unique_ids() -> None:
    smi = parse_rocm_smi_json((FIX / "telegraf_mi100_rocm602.json").read_text())
    assert smi.driver_version == "6.3.6"
    assert len(smi.cards) == 4
    c0 = smi.cards[0]
    assert c0.device_id == "738c"  # "Device ID" in 6.x, "GPU ID" before
    assert c0.unique_id == "0x79ccd55167a2124a"
    assert c0.serial is None
    assert c0.bus_id == "0000:83:00.0"
    assert c0.temperature_edge_c == 53.0
    assert len({c.unique_id for c in smi.cards}) == 4


def test_mi250_rocm5_and_rocm6_schemas() -> None:
    r5 = parse_rocm_smi_json((FIX / "wandb_gpu_amd_test_rocm-smi_rocm5_mi250.json").read_text())
    r6 = parse_rocm_smi_json((FIX / "wandb_gpu_amd_test_rocm-smi_rocm6_mi250.json").read_text())
    for smi in (r5, r6):
        c = smi.cards[0]
        assert c.series == "AMD INSTINCT MI250 (MCM) OAM AC MBA"
        assert product_name(c.series) == "INSTINCT MI250"
        assert c.device_id == "740c"
        assert smi.driver_version == "6.2.4"
        assert c.vram_total_bytes is None  # -a --json of this capture has no VRAM keys
        assert c.power_max_w == 560.0
    assert (r5.cards[0].serial, r5.cards[0].pcie_replay_count) == ("PCB052715-0065", 147)
    assert (r6.cards[0].serial, r6.cards[0].pcie_replay_count) == ("PCB052715-0006", 3824)
    assert r6.cards[0].gfx_version == "gfx9010"
    assert r6.cards[0].temperature_memory_c == 53.0
    assert r5.cards[0].bus_id == "0000:2f:00.0"


def test_mi50_old_tool() -> None:
    smi = parse_rocm_smi_json((FIX / "telegraf_vega-20-WKS-GL-XE.json").read_text())
    c = smi.cards[0]
    assert product_name(c.series) == "Radeon Instinct MI50 32GB"
    assert (c.device_id, c.serial) == ("66a1", "692024000810")
    assert smi.driver_version == "5.9.17"
    assert c.vram_total_bytes == 34342961152


def test_key_renames_across_rocm_versions_same_card() -> None:
    names = ["rx6700xt_rocm430", "rx6700xt_rocm571", "rx6700xt_rocm602", "rx6700xt_rocm612"]
    cards = [parse_rocm_smi_json((FIX / f"telegraf_{n}.json").read_text()).cards[0] for n in names]
    assert {c.device_id for c in cards} == {"73df"}
    assert {c.vram_total_bytes for c in cards} == {12868124672}
    # 4.3 printed the vendor id as the series; 6.1 capitalises "Card Series"
    assert [c.series for c in cards] == [None] + ["Navi 22 [Radeon RX 6700/6700 XT / 6800M]"] * 3
    # 6.0.2 reports "N/A (Secondary die)" for the power of this card
    assert [c.power_average_w for c in cards] == [6.0, 6.0, None, 6.0]


def test_no_series_key_at_all() -> None:
    c = parse_rocm_smi_json((FIX / "telegraf_vega-10-XT.json").read_text()).cards[0]
    assert (c.series, c.device_id, c.sku) == (None, "6861", "D05101")


def test_truncated_json_names_source_and_line() -> None:
    text = (FIX / "telegraf_mi100_rocm602.json").read_text()
    with pytest.raises(ParseError) as e:
        parse_rocm_smi_json(text[:500], source="rocm-smi --json@amd1")
    assert e.value.source == "rocm-smi --json@amd1"
    assert e.value.line is not None and e.value.line > 1


def test_bad_values() -> None:
    with pytest.raises(ParseError, match="card0: 'VRAM Total Memory"):
        parse_rocm_smi_json('{"card0": {"VRAM Total Memory (B)": "lots"}}')
    with pytest.raises(ParseError, match="no cardN"):
        parse_rocm_smi_json('{"system": {"Driver version": "6.2.4"}}')
    with pytest.raises(ParseError, match="Weight between 0 and 1: 'far'"):
        parse_rocm_smi_json(
            '{"card0": {}, "system": {"(Topology) Weight between DRM devices 0 and 1": "far"}}'
        )
    with pytest.raises(ParseError, match="not hex"):
        parse_rocm_smi_json('{"card0": {"GPU ID": "MI100"}}')


def test_topology_link_types_weights_hops() -> None:
    smi = parse_rocm_smi_json((FIX / "telegraf_mi100_rocm571.json").read_text())
    assert len(smi.topology) == 15  # 6 cards, every pair once
    assert {t.link_type for t in smi.topology} == {"PCIE"}
    first = smi.topology[0]
    assert (first.a, first.b, first.weight, first.hops) == (0, 1, 40, 2)
    # MI50: only card0 kept by the contributor, but the matrix covers 8 DRM devices
    mi50 = parse_rocm_smi_json((FIX / "telegraf_vega-20-WKS-GL-XE.json").read_text())
    assert len(mi50.topology) == 28
    assert {t.weight for t in mi50.topology} == {40, 72}
    assert parse_rocm_smi_json((FIX / "telegraf_rx6700xt_rocm612.json").read_text()).topology == ()
