"""Cambricon ``cnmon`` parser and plugin on the real captures (issue 28): the three header
layouts (v4.20.11, v5.10.13, v5.10.31) with concrete values, header drift and garbage refused
naming ``cnmon`` and the line, the inventory, the device plugin's labels, resource and GRES.

Every test here fails on main 84be469 (no ``gpufleet.vendors.cambricon``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.domain.accelerator_exports import Gres, extended_resources, gres_of
from gpufleet.domain.accelerators import Vendor, inventory_group
from gpufleet.domain.vendors import plugin
from gpufleet.errors import ParseError
from gpufleet.service.hosts.vendor_exports import EXPORTS
from gpufleet.vendors.cambricon.cnmon import LAYOUTS, parse_cnmon
from gpufleet.vendors.cambricon.plugin import PLUGIN, device_files, labels, parse_sections

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "captured" / "cambricon"
V4 = "paddle-docs_mlu_cnmon_v4.20.11_mlu370-x4.txt"
V5 = "paddle-docs_mlu_cnmon_v5.10.13_mlu370-x8.txt"
V531 = "paddlenlp_mlu_llama_cnmon_v5.10.31_anon.txt"


def _read(name: str) -> str:
    return (FIX / name).read_text(encoding="utf-8")


def _v531_edited() -> str:
    """EDITED copy of the v5.10.31 capture: its source anonymised the memory total as
    ``xxxxx``; replaced here by 99999 so the rest of the real answer can be read."""
    return _read(V531).replace("xxxxx MiB", "99999 MiB")


def test_v4_layout_driver_per_card_and_virtual_memory() -> None:
    smi = parse_cnmon(_read(V4))
    assert (smi.version, smi.layout, smi.driver) == ("v4.20.11", "v4", None)
    assert [c.index for c in smi.cards] == [0, 1, 2]
    assert [c.temperature_c for c in smi.cards] == [32, 33, 30]
    assert [c.power_w for c in smi.cards] == [30.0, 25.0, 26.0]
    c = smi.cards[0]
    assert (c.name, c.firmware, c.driver, c.inited) == ("MLU370-X4", "v1.1.6", "v4.20.11", "On")
    assert (c.memory_used_mib, c.memory_total_mib, c.power_cap_w) == (0, 23308, 150.0)
    assert (c.virtual_memory_used_mib, c.virtual_memory_total_mib) == (10240, 1048576)
    assert (c.ecc_errors, c.bus_id, c.utilisation_pct, c.fan_pct) == (None, None, 0, 0)


def test_v5_10_13_layout_bus_ids_and_sriov_cell() -> None:
    smi = parse_cnmon(_read(V5))
    assert (smi.version, smi.layout, smi.driver) == ("v5.10.13", "v5-sriov", "v5.10.13")
    assert [c.bus_id for c in smi.cards] == ["0000:39:00.0", "0000:3d:00.0"]
    assert [c.temperature_c for c in smi.cards] == [32, 39]
    assert {(c.power_w, c.power_cap_w, c.memory_total_mib) for c in smi.cards} == {
        (106.0, 250.0, 23374)}
    assert {(c.mode, c.compute_mode) for c in smi.cards} == {(None, "Default")}


def test_v5_10_31_layout_mode_and_ecc_count() -> None:
    with pytest.raises(ParseError, match="Memory-Usage: cannot read '0 MiB/ xxxxx MiB'") as e:
        parse_cnmon(_read(V531))  # as published: the source anonymised the total
    assert (e.value.source, e.value.line) == ("cnmon", 9)
    smi = parse_cnmon(_v531_edited())
    assert (smi.version, smi.layout, smi.driver) == ("v5.10.31", "v5-mode", "v5.10.31")
    assert len(smi.cards) == 8
    assert [c.bus_id[5:7] for c in smi.cards if c.bus_id] == [
        "4f", "53", "6f", "73", "af", "b3", "cf", "d3"]
    assert [c.power_w for c in smi.cards] == [105, 100, 100, 109, 107, 105, 102, 105]
    assert {(c.ecc_errors, c.mode, c.power_cap_w, c.firmware) for c in smi.cards} == {
        (0, "FULL", 550.0, "v1.5.0")}


def test_every_layout_of_the_captures_is_known_and_tested() -> None:
    seen = {parse_cnmon(t).layout for t in (_read(V4), _read(V5), _v531_edited())}
    assert seen == set(LAYOUTS)


def test_an_unknown_header_is_refused_naming_tool_line_and_columns() -> None:
    text = _read(V5).replace("| SR-IOV   Compute-Mode |", "| MIG-Mode Compute-Mode |", 1)
    with pytest.raises(ParseError) as e:
        parse_cnmon(text)
    assert (e.value.source, e.value.line, e.value.column) == ("cnmon", 4, 1)
    assert "unknown table header" in e.value.message
    assert "Memory-Usage | MIG-Mode Compute-Mode" in e.value.message


@pytest.mark.parametrize(
    ("old", "new", "line", "what"),
    [
        ("32C", "hotC", 8, "Fan Temp Pwr:Usage/Cap"),
        ("0000:39:00.0", "0000:39:00", 7, "Bus-Id"),
        ("0     /   MLU370-X8", "0     1   MLU370-X8", 7, "virtual functions"),
        ("0%                N/A", "0%                lots", 7, "Util Ecc-Error"),
        ("| 1     /", "| 0     /", 10, "listed twice"),
    ],
)
def test_a_garbage_card_line_is_refused_naming_the_line(
    old: str, new: str, line: int, what: str
) -> None:
    text = _read(V5)
    assert old in text
    with pytest.raises(ParseError) as e:
        parse_cnmon(text.replace(old, new, 1))
    assert (e.value.source, e.value.line) == ("cnmon", line)
    assert what in e.value.message


def test_a_cut_or_foreign_answer_is_refused() -> None:
    text = _read(V5)
    with pytest.raises(ParseError, match="cut short"):
        parse_cnmon(text[: text.index("\n\n") + 1])  # the table without the Processes box
    with pytest.raises(ParseError, match="not a card line") as e:
        parse_cnmon(text[:900])  # cut inside the last border
    assert e.value.line == 12
    with pytest.raises(ParseError, match="banner box"):
        parse_cnmon("cnmon: error while loading shared libraries: libcndev.so\n")


def test_inventory_labels_group_and_gres() -> None:
    inv = parse_sections({"cnmon": _read(V5)})
    assert inv.vendor == Vendor("cambricon") and inv.count == 2
    a = inv.accelerators[1]
    assert (a.model, a.bus_id, a.memory_total_mib, a.temperature_c) == (
        "MLU370-X8", "0000:3d:00.0", 23374, 39.0)
    assert (a.power_w, a.power_limit_w, dict(a.firmware)) == (106.0, 250.0, {"Firmware": "v1.1.6"})
    assert (inv.versions.driver, inv.versions.firmware, inv.versions.tool) == (
        "v5.10.13", "v1.1.6", "v5.10.13")
    assert labels(inv) == {"Model": "MLU370-X8", "DriverVersion": "v5.10.13"}
    assert inventory_group(inv) == "mlu_370_x8"
    assert PLUGIN.exports.resource(inv) == "cambricon.com/mlu"
    assert (PLUGIN.exports.gres_name, device_files(inv)) == ("mlu", "/dev/cambricon_dev[0-1]")
    assert gres_of([inv], EXPORTS) == [Gres("mlu", "mlu370", 2, "/dev/cambricon_dev[0-1]")]
    assert extended_resources([inv], EXPORTS) == {"cambricon.com/mlu": 2}
    v4 = parse_sections({"cnmon": _read(V4)})
    assert v4.versions.driver == "v4.20.11"  # the cards' one driver (no banner driver in v4)
    assert labels(v4) == {"Model": "MLU370-X4", "DriverVersion": "v4.20.11"}
    ecc = parse_sections({"cnmon": _v531_edited()})
    assert {c.name for a in ecc.accelerators for c in a.error_counters} == {"ecc_errors"}
    assert plugin("cambricon") is PLUGIN and PLUGIN.pci_vendor_id == "cabc"
    with pytest.raises(ParseError, match="section missing"):
        parse_sections({})
