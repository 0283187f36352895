"""Enflame ``efsmi`` parser and plugin on the real capture (issue 28): V1.2.0.301 with concrete
values (ECC on shrinks memory: 49120 vs 42976 MiB on one host; firmware differing between the
cards), header drift and garbage refused naming ``efsmi``, the line and the columns, the
labels, resource and GRES, and detection by bus from the real lspci lines.

Every test here fails on main 3f67bc2 (no ``gpufleet.vendors.enflame``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.vendors.accelerator_judge import judge

from gpufleet.collect.pci import parse_lspci
from gpufleet.domain.accelerator_exports import extended_resources, gres_of
from gpufleet.domain.accelerators import (
    Vendor,
    accelerators_on_bus,
    inventory_group,
)
from gpufleet.domain.slurm import Gres
from gpufleet.domain.vendors import plugin
from gpufleet.errors import ParseError
from gpufleet.service.hosts.vendor_exports import EXPORTS
from gpufleet.vendors.enflame.efsmi import HEADERS, parse_efsmi
from gpufleet.vendors.enflame.plugin import COLLECTOR, INSPECTOR, PLUGIN, labels, parse_sections

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "captured" / "enflame"
V12 = "paddle-docs_gcu_efsmi_1.2.0.301_s60.txt"
LSPCI = FIX.parent / "lspci" / "paddlenlp_gcu_llama_lspci_s60.txt"


def _read(name: str = V12) -> str:
    return (FIX / name).read_text(encoding="utf-8")


def test_v1_2_0_301_values_ecc_shrinks_memory() -> None:
    smi = parse_efsmi(_read())
    assert (smi.layout, smi.version, smi.driver, smi.timestamp) == (
        "efsmi-1.2", "1.2.0.301", "1.2.0.301", "2024-12-06, 11:33:56 CST")
    c0, c1 = smi.cards
    assert (c0.index, c0.name, c0.firmware, c0.bus_id, c0.ecc, c0.memory_mib) == (
        0, "S60", "33.6.2", "0000:01:00.0", False, 49120)
    assert (c1.index, c1.name, c1.firmware, c1.bus_id, c1.ecc, c1.memory_mib) == (
        1, "S60", "33.6.5", "0000:09:00.0", True, 42976)
    assert [(c.temperature_c, c.dpm, c.power_w, c.power_cap_w) for c in smi.cards] == [
        (39, "Sleep", 105.0, 300.0), (46, "Active", 128.0, 300.0)]
    assert [(c.virtualisation, c.used_pct, c.serial) for c in smi.cards] == [
        (False, 0.0, "A073640510015"), (False, 0.0, "C807J40510285")]


def test_every_header_of_the_captures_is_known_and_tested() -> None:
    assert {parse_efsmi(_read()).layout} == set(HEADERS)


def test_inventory_keeps_ecc_beside_memory_labels_group_and_gres() -> None:
    inv = parse_sections({"efsmi": _read()})
    assert inv.vendor == Vendor("enflame") and inv.count == 2
    assert [(a.serial, a.memory_total_mib, dict(a.firmware)) for a in inv.accelerators] == [
        ("A073640510015", 49120, {"FW": "33.6.2", "ECC": "off"}),
        ("C807J40510285", 42976, {"FW": "33.6.5", "ECC": "on"})]
    a = inv.accelerators[1]
    assert (a.model, a.bus_id, a.temperature_c, a.power_w, a.power_limit_w) == (
        "S60", "0000:09:00.0", 46.0, 128.0, 300.0)
    # the cards run different firmware: no one host firmware version
    assert (inv.versions.driver, inv.versions.firmware, inv.versions.tool) == (
        "1.2.0.301", None, "1.2.0.301")
    # the cards' memory differs (ECC): no memory label
    assert labels(inv) == {
        "enflame.com/gcu.present": "true", "enflame.com/gcu.count": "2",
        "enflame.com/gcu.model": "S60"}
    assert inventory_group(inv) == "gcu_s60"
    assert PLUGIN.exports.resource(inv) == "enflame.com/gcu"
    assert gres_of([inv], EXPORTS) == [Gres("gcu", "s60", 2, None)]
    assert extended_resources([inv], EXPORTS) == {"enflame.com/gcu": 2}
    assert plugin("enflame") is PLUGIN and PLUGIN.pci_vendor_id == "1e36"
    assert (PLUGIN.exports.runtime, COLLECTOR.primary, INSPECTOR.primary) == (
        "topsplatform", "efsmi", "efsmi")
    assert [s.command for s in COLLECTOR.sections] == ["$TO efsmi"]
    one_size = parse_sections({"efsmi": _read().replace("42976MiB", "49120MiB")})  # EDITED
    assert labels(one_size)["enflame.com/gcu.memory"] == "49120"
    with pytest.raises(ParseError, match="section missing"):
        parse_sections({})


def test_the_s60s_on_the_bus_are_enflames_and_match_efsmi() -> None:
    pci = parse_lspci(LSPCI.read_text(), "lspci")
    assert accelerators_on_bus(pci) == {Vendor("enflame"): 2}
    inv = parse_sections({"efsmi": _read()})
    assert judge("gpu_count", inv.accelerators, pci=pci) == (
        "pass", "2 enflame accelerators (tool and PCI bus agree)"
    )
    assert sorted(f"0000:{d.address}" if len(d.address) == 7 else d.address for d in pci) == [
        a.bus_id for a in inv.accelerators]


def test_an_unknown_header_is_refused_naming_tool_line_and_columns() -> None:
    text = _read().replace("| DUsed       SN            |", "| DUsed       UUID          |", 1)
    with pytest.raises(ParseError) as e:
        parse_efsmi(text)
    assert (e.value.source, e.value.line, e.value.column) == ("efsmi", 10, 1)
    assert "unknown table header" in e.value.message
    assert "Mem GCU Virt | DUsed UUID" in e.value.message
    assert "efsmi-1.2: DEV NAME | FW VER | BUS-ID ECC" in e.value.message


@pytest.mark.parametrize(
    ("old", "new", "line", "what"),
    [
        ("39 C", "hot C", 14, "TEMP Dpm Pwr(Usage/Cap)"),
        ("105W  300W", "N/A   300W", 14, "TEMP Dpm Pwr(Usage/Cap)"),
        ("00:01:00.0  Disable", "00:01:00.0  Maybe  ", 13, "BUS-ID ECC"),
        ("49120MiB Disable", "49120GiB Disable", 14, "Mem GCU Virt"),
        ("33.6.2   ", "v.6.2    ", 13, "FW VER"),
        ("| 1      S60", "| 0      S60", 17, "listed twice"),
    ],
)
def test_a_garbage_card_line_is_refused_naming_the_line(
    old: str, new: str, line: int, what: str
) -> None:
    text = _read()
    assert old in text
    with pytest.raises(ParseError) as e:
        parse_efsmi(text.replace(old, new, 1))
    assert (e.value.source, e.value.line) == ("efsmi", line)
    assert what in e.value.message


def test_a_cut_or_foreign_answer_is_refused() -> None:
    text = _read()
    lines = text.splitlines(keepends=True)
    with pytest.raises(ParseError, match="cut short"):
        parse_efsmi("".join(lines[:16]))  # a rule with no card after it
    with pytest.raises(ParseError, match="cut short"):
        parse_efsmi("".join(lines[:13]))  # a card without its second line
    with pytest.raises(ParseError, match="not efsmi's banner"):
        parse_efsmi("efsmi: command not found\n")
    with pytest.raises(ParseError, match="cut short"):
        parse_efsmi("")
    # cut right after a card's border: one card, the count check sees the other missing
    assert len(parse_efsmi("".join(lines[:15])).cards) == 1
