"""Iluvatar ``ixsmi`` parser and plugin on the real captures (issue 28): IX-ML 4.1.0 and 4.3.0
(one header layout, fan ``0%`` vs ``N/A``) with concrete values, ``N/A`` power absent (never
zero), the 16 GPUs of the 8 dual-GPU cards kept apart from the card count, header drift and
garbage refused naming ``ixsmi``, the line and the columns, the labels, resource and GRES.

Every test here fails on main 3f67bc2 (no ``gpufleet.vendors.iluvatar``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from gpufleet.domain.accelerator_exports import extended_resources, gres_of
from gpufleet.domain.accelerators import Vendor, inventory_group
from gpufleet.domain.slurm import Gres
from gpufleet.domain.vendors import plugin
from gpufleet.errors import ParseError
from gpufleet.service.hosts.vendor_exports import EXPORTS
from gpufleet.vendors.iluvatar.ixsmi import HEADERS, parse_ixsmi
from gpufleet.vendors.iluvatar.plugin import (
    COLLECTOR,
    INSPECTOR,
    PLUGIN,
    boards,
    labels,
    parse_sections,
)

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "captured" / "iluvatar"
V41 = "paddlenlp_iluvatar_llama_ixsmi_4.1.0_16xbi-v150.txt"
V43 = "ernie_ixsmi_4.3.0_16xbi-v150.txt"


def _read(name: str) -> str:
    return (FIX / name).read_text(encoding="utf-8")


def test_ix_ml_4_1_0_values_fan_percent_and_power_every_other_gpu() -> None:
    smi = parse_ixsmi(_read(V41))
    assert (smi.layout, smi.ixml, smi.driver, smi.cuda) == ("ix-ml-4", "4.1.0", "4.1.0", "10.2")
    assert [g.index for g in smi.gpus] == list(range(16))
    assert [g.power_w for g in smi.gpus[:8]] == [None, 93.0, None, 94.0, None, 98.0, None, 95.0]
    assert [g.power_cap_w for g in smi.gpus[:2]] == [None, 350.0]
    assert [g.temperature_c for g in smi.gpus[:4]] == [32, 30, 31, 31]
    g = smi.gpus[15]
    assert (g.name, g.bus_id, g.clock_sm_mhz, g.clock_mem_mhz) == (
        "Iluvatar BI-V150", "0000:67:00.0", 1500, 1600)
    assert (g.fan_pct, g.perf, g.power_w, g.memory_used_mib, g.memory_total_mib) == (
        0, "P0", 94.0, 116, 32768)
    assert (g.utilisation_pct, g.compute_mode) == (0, "Default")


def test_ix_ml_4_3_0_values_fan_not_available() -> None:
    smi = parse_ixsmi(_read(V43))
    assert (smi.ixml, smi.driver, smi.cuda) == ("4.3.0", "4.3.0", "10.2")
    assert {g.fan_pct for g in smi.gpus} == {None}  # "N/A" in 4.3.0, "0%" in 4.1.0
    assert [g.power_w for g in smi.gpus if g.power_w is not None] == [
        103.0, 106.0, 105.0, 106.0, 107.0, 103.0, 104.0, 107.0]
    assert [g.bus_id[5:7] for g in smi.gpus] == [
        "13", "16", "1c", "1f", "27", "2a", "34", "37",
        "3d", "40", "48", "4b", "54", "57", "64", "67"]
    assert {g.memory_used_mib for g in smi.gpus} == {64}
    assert smi.gpus[15].temperature_c == 36


def test_every_header_of_the_captures_is_known_and_tested() -> None:
    assert {parse_ixsmi(_read(n)).layout for n in (V41, V43)} == set(HEADERS)


def test_gpus_count_as_ixsmi_counts_them_cards_apart() -> None:
    inv = parse_sections({"ixsmi": _read(V43)})
    assert inv.vendor == Vendor("iluvatar") and inv.count == 16  # as the vendor counts
    cards = boards(inv)
    assert cards == tuple((i, i + 1) for i in range(0, 16, 2))  # 8 physical cards
    # power is once per card: the sum counts each card once, absent is not zero
    assert sum(a.power_w or 0 for a in inv.accelerators) == 841.0
    assert [a.power_w for a in inv.accelerators].count(None) == 8
    # a GPU that lost its pair leaves the cards unknown, never miscounted
    lost = replace(inv, accelerators=inv.accelerators[:1] + inv.accelerators[2:])
    assert boards(lost) is None


def test_inventory_labels_group_and_gres() -> None:
    inv = parse_sections({"ixsmi": _read(V41)})
    a = inv.accelerators[1]
    assert (a.model, a.product_name, a.bus_id, a.memory_total_mib, a.memory_used_mib) == (
        "BI-V150", "Iluvatar BI-V150", "0000:16:00.0", 32768, 116)
    assert (a.temperature_c, a.power_w, a.power_limit_w, a.serial, a.uuid) == (
        30.0, 93.0, 350.0, None, None)
    assert (inv.versions.driver, inv.versions.runtime, inv.versions.tool) == (
        "4.1.0", "10.2", "4.1.0")
    assert labels(inv) == {
        "iluvatar.com/gpu.product": "Iluvatar-BI-V150",
        "iluvatar.com/gpu.count": "16",
        "iluvatar.com/gpu.memory": "32768",
        "iluvatar.com/ix.driver-version.full": "4.1.0",
        "iluvatar.com/ix.driver-version.major": "4",
        "iluvatar.com/ix.driver-version.minor": "1",
        "iluvatar.com/ix.driver-version.revision": "0",
        "iluvatar.com/cuda.runtime-version.full": "10.2",
        "iluvatar.com/cuda.runtime-version.major": "10",
        "iluvatar.com/cuda.runtime-version.minor": "2",
    }
    assert inventory_group(inv) == "gpu_bi_v150"
    assert PLUGIN.exports.resource(inv) == "iluvatar.com/gpu"
    assert gres_of([inv], EXPORTS) == [Gres("gpu", "bi-v150", 16, None)]
    assert extended_resources([inv], EXPORTS) == {"iluvatar.com/gpu": 16}
    assert plugin("iluvatar") is PLUGIN and PLUGIN.pci_vendor_id == "1e3e"
    assert (PLUGIN.exports.runtime, COLLECTOR.primary, INSPECTOR.primary) == (
        "corex", "ixsmi", "ixsmi")
    assert [s.command for s in COLLECTOR.sections] == ["$TO ixsmi"]
    with pytest.raises(ParseError, match="section missing"):
        parse_sections({})


def test_an_unknown_header_is_refused_naming_tool_line_and_columns() -> None:
    text = _read(V43).replace("GPU-Util  Compute M. |", "GPU-Util  ECC-Mode   |", 1)
    with pytest.raises(ParseError) as e:
        parse_ixsmi(text)
    assert (e.value.source, e.value.line, e.value.column) == ("ixsmi", 5, 1)
    assert "unknown table header" in e.value.message
    assert "Memory-Usage | GPU-Util ECC-Mode" in e.value.message
    assert "ix-ml-4: GPU Name | Bus-Id | Clock-SM Clock-Mem" in e.value.message


@pytest.mark.parametrize(
    ("old", "new", "line", "what"),
    [
        ("35C   P0    N/A / N/A", "hotC  P0    N/A / N/A", 9, "Fan Temp Perf Pwr:Usage/Cap"),
        ("103W / 350W ", "-1W / 350W  ", 12, "Fan Temp Perf Pwr:Usage/Cap"),
        ("00000000:13:00.0", "00000000:13:00  ", 8, "Bus-Id"),
        ("64MiB / 32768MiB ", "64MiB / xxxxxMiB ", 9, "Memory-Usage"),
        ("1500MHz   1600MHz", "1500MHz   fastMHz", 8, "Clock-SM Clock-Mem"),
        ("| 1    Iluvatar", "| 0    Iluvatar", 11, "listed twice"),
    ],
)
def test_a_garbage_gpu_line_is_refused_naming_the_line(
    old: str, new: str, line: int, what: str
) -> None:
    text = _read(V43)
    assert old in text
    with pytest.raises(ParseError) as e:
        parse_ixsmi(text.replace(old, new, 1))
    assert (e.value.source, e.value.line) == ("ixsmi", line)
    assert what in e.value.message


def test_a_cut_or_foreign_answer_is_refused() -> None:
    text = _read(V43)
    with pytest.raises(ParseError, match="cut short"):
        parse_ixsmi(text[: text.index("\n\n") + 1])  # the table without the Processes box
    with pytest.raises(ParseError, match="not a GPU line") as e:
        parse_ixsmi(text[: text.index("| 3    Iluvatar") + 30])  # cut inside a GPU line
    assert e.value.line == 17
    with pytest.raises(ParseError, match="Timestamp"):
        parse_ixsmi("ixsmi: error while loading shared libraries: libixml.so\n")
    with pytest.raises(ParseError, match="cut short"):
        parse_ixsmi("")
