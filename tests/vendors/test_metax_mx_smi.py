"""MetaX ``mx-smi`` and ``mx-smi topo -m/-n`` parsers and plugin on the real captures
(issue 28): the two table layouts (2.1.6, 2.2.9) and both matrices with concrete values,
header drift and garbage refused naming the tool, the line and the columns, the inventory
(health from GPU-State, MetaXLink links), the labels, exports and group.

Every test here fails on main 3f67bc2 (no ``gpufleet.vendors.metax``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.domain.accelerator_exports import Gres, extended_resources, gres_of
from gpufleet.domain.accelerators import Health, Vendor, inventory_group
from gpufleet.domain.vendors import plugin, read_sections
from gpufleet.errors import ParseError
from gpufleet.service.hosts.vendor_exports import EXPORTS
from gpufleet.vendors.metax.mx_smi import LAYOUTS, parse_mx_smi, parse_mx_smi_topo
from gpufleet.vendors.metax.plugin import (
    COLLECTOR,
    INSPECTOR,
    PLUGIN,
    labels,
    parse_sections,
    physical_cards,
)

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "captured" / "metax"
V216 = "paddlenlp_metax_llama_mx-smi_2.1.6_8xc550.txt"
V229 = "ms-swift_mx-smi_2.2.9_8xc500.txt"
TOPO_M = "ms-swift_mx-smi_topo-m_8xc500.txt"
TOPO_N = "ms-swift_mx-smi_topo-n_8xc500_6nic.txt"


def _read(name: str) -> str:
    return (FIX / name).read_text(encoding="utf-8")


# ---- concrete values from each capture


def test_2_1_6_layout_power_without_cap_and_no_state() -> None:
    smi = parse_mx_smi(_read(V216))
    assert (smi.version, smi.layout, smi.driver, smi.maca, smi.bios) == (
        "2.1.6", "2.1", "2.5.014", "2.23.0.1018", "1.13.4.0")
    assert [g.bus_id[5:7] for g in smi.gpus] == ["2a", "3a", "4c", "5c", "aa", "ba", "ca", "da"]
    assert [g.temperature_c for g in smi.gpus] == [31, 31, 31, 31, 30, 31, 30, 30]
    assert [g.power_w for g in smi.gpus] == [44, 46, 47, 46, 46, 47, 46, 47]
    assert {(g.name, g.memory_used_mib, g.memory_total_mib, g.utilisation_pct) for g in smi.gpus
            } == {("MXC550", 810, 65536, 0)}
    assert {(g.power_cap_w, g.board, g.state, g.perf) for g in smi.gpus} == {
        (None, None, None, None)}


def test_2_2_9_layout_board_persistence_perf_sgpu_and_state() -> None:
    smi = parse_mx_smi(_read(V229))  # no version line, banner indented: as pasted
    assert (smi.version, smi.layout, smi.driver, smi.maca, smi.bios) == (
        "2.2.9", "2.2", "3.4.4", "3.3.0.15", "1.30.0.0")
    assert [(g.board, g.index) for g in smi.gpus] == [(i, i) for i in range(8)]
    assert [g.power_w for g in smi.gpus] == [57, 58, 58, 60, 57, 56, 55, 56]
    assert [g.temperature_c for g in smi.gpus] == [35, 37, 36, 35, 33, 34, 34, 36]
    assert smi.gpus[3].bus_id == "0000:12:00.0"
    assert {(g.name, g.power_cap_w, g.persistence, g.perf, g.sgpu_mode, g.state,
             g.memory_used_mib) for g in smi.gpus} == {
        ("MetaX C500", 350, "Off", "P0", "Disabled", "Available", 826)}


def test_every_layout_of_the_captures_is_known_and_tested() -> None:
    assert {parse_mx_smi(_read(n)).layout for n in (V216, V229)} == set(LAYOUTS)


def test_topo_m_metaxlink_islands_and_affinity() -> None:
    t = parse_mx_smi_topo(_read(TOPO_M))
    assert t.devices == tuple(f"GPU{i}" for i in range(8))
    assert {t.links[("GPU0", f"GPU{i}")] for i in (1, 2, 3)} == {"MX"}
    assert {t.links[("GPU4", f"GPU{i}")] for i in (0, 1, 2, 3)} == {"NODE"}
    assert t.links[("GPU6", "GPU7")] == "MX"
    assert set(t.node_affinity.values()) == {"0"}
    assert set(t.cpu_affinity.values()) == {"0-31,64-95"}
    assert t.legend["MX"] == "Connection traversing MetaXLink" and t.nic_names == {}


def test_topo_n_adds_the_nics_and_their_names() -> None:
    t = parse_mx_smi_topo(_read(TOPO_N))
    assert t.devices[8:] == tuple(f"NIC{i}" for i in range(6))
    assert (t.links[("GPU0", "NIC0")], t.links[("GPU4", "NIC2")]) == ("PIX", "PIX")
    assert (t.links[("GPU0", "NIC4")], t.links[("NIC4", "NIC5")]) == ("SYS", "PIX")
    assert t.nic_names == {f"NIC{i}": f"mlx5_{i}" for i in range(6)}
    assert "NIC0" not in t.node_affinity  # a NIC row has no affinity cells


# ---- header drift and garbage


@pytest.mark.parametrize(
    ("name", "old", "new", "line"),
    [
        (V229, "| GPU-State            |", "| GPU-Health           |", 9),
        (V216, "| GPU-Util             |", "| GPU-Util  ECC        |", 11),
    ],
)
def test_an_unknown_header_is_refused_naming_tool_line_and_columns(
    name: str, old: str, new: str, line: int
) -> None:
    text = _read(name)
    assert old in text
    with pytest.raises(ParseError) as e:
        parse_mx_smi(text.replace(old, new, 1))
    assert (e.value.source, e.value.line, e.value.column) == ("mx-smi", line, 1)
    assert "unknown table header" in e.value.message
    assert new.strip("| ").split()[0] in e.value.message


@pytest.mark.parametrize(
    ("name", "old", "new", "line", "what"),
    [
        (V229, "35C          P0", "hotC         P0", 13, "Temp Perf"),
        (V229, "57W / 350W ", "57W / 350  ", 13, "Pwr:Usage/Cap"),
        (V229, "0000:0e:00.0", "0000:0e:00  ", 12, "Bus-id"),
        (V229, "826/65536 MiB       | Available", "826/64 GiB          | Available", 13,
         "Memory-Usage"),
        (V216, "| 31C         44W  ", "| 31C         lots ", 15, "Temp Power"),
        (V216, "| 0%                   |\n| 31C         46W", "| some                 |\n"
         "| 31C         46W", 17, "GPU-Util"),
        (V216, "| 1           MXC550", "| 0           MXC550", 17, "listed twice"),
    ],
)
def test_a_garbage_gpu_line_is_refused_naming_the_line(
    name: str, old: str, new: str, line: int, what: str
) -> None:
    text = _read(name)
    assert old in text
    with pytest.raises(ParseError) as e:
        parse_mx_smi(text.replace(old, new, 1))
    assert (e.value.source, e.value.line) == ("mx-smi", line)
    assert what in e.value.message


def test_a_cut_lost_or_foreign_answer_is_refused() -> None:
    text = _read(V216)
    with pytest.raises(ParseError, match="cut short"):
        parse_mx_smi(text[: text.index("\n\n+---")])  # without the Process box
    with pytest.raises(ParseError, match="the table lists 8 GPUs, 'Attached GPUs' says 9"):
        parse_mx_smi(text.replace(": 8", ": 9", 1))
    with pytest.raises(ParseError, match="no MetaX Log banner") as e:
        parse_mx_smi("mx-smi: error while loading shared libraries: libmxsml.so\n")
    assert e.value.line == 1


@pytest.mark.parametrize(
    ("edit", "what"),
    [
        (lambda t: t.replace("Node Affinity", "NUMA Affinity", 1), "unknown matrix header"),
        (lambda t: t.replace("GPU1    MX      X ", "GPU1    QQ      X ", 1),
         "link code 'QQ' not in the legend"),
        (lambda t: t.replace("GPU1    MX      X ", "GPU1    NODE    X ", 1),
         "MX one way, NODE the other"),
        (lambda t: t[: t.index("Legend:")], "no 'Legend:'"),
        (lambda t: t.replace("GPU3    MX      MX      MX      X ",
                             "GPU3    MX      MX      X       MX", 1), "on the diagonal"),
    ],
)
def test_a_damaged_matrix_is_refused(edit: object, what: str) -> None:
    assert callable(edit)
    with pytest.raises(ParseError, match=what) as e:
        parse_mx_smi_topo(edit(_read(TOPO_M)))
    assert e.value.source == "mx-smi topo"


# ---- the plugin


def test_inventory_health_links_labels_and_exports_of_2_2_9() -> None:
    inv = parse_sections({"mx_smi": _read(V229), "mx_smi_topo": _read(TOPO_M)})
    assert inv.vendor == Vendor("metax") and inv.count == 8 and physical_cards(inv) == 8
    a = inv.accelerators[5]
    assert (a.model, a.product_name, a.bus_id, a.health, a.temperature_c, a.power_w) == (
        "C500", "MetaX C500", "0000:36:00.0", Health.OK, 34.0, 56.0)
    assert (a.power_limit_w, a.memory_total_mib, dict(a.firmware)) == (
        350.0, 65536, {"BIOS": "1.30.0.0"})
    assert sorted((ln.kind, ln.peer) for ln in a.links) == [
        ("metaxlink", "4"), ("metaxlink", "6"), ("metaxlink", "7")]
    v = inv.versions
    assert (v.driver, v.runtime, v.firmware, v.tool) == ("3.4.4", "3.3.0.15", "1.30.0.0", "2.2.9")
    assert labels(inv) == {"metax-tech.com/gpu.installed": "true",
                           "metax-tech.com/gpu.product": "MetaX_C500"}
    assert inventory_group(inv) == "gpu_c500"
    assert gres_of([inv], EXPORTS) == [Gres("gpu", "c500", 8, None)]
    assert extended_resources([inv], EXPORTS) == {"metax-tech.com/gpu": 8}


def test_2_1_6_states_no_health_and_names_the_model_mxc550() -> None:
    inv = parse_sections({"mx_smi": _read(V216)})
    assert {(a.model, a.health, a.power_limit_w, a.links) for a in inv.accelerators} == {
        ("C550", Health.UNKNOWN, None, ())}
    assert labels(inv)["metax-tech.com/gpu.product"] == "MXC550"
    assert inventory_group(inv) == "gpu_c550"


def test_a_state_other_than_available_is_an_alarm() -> None:
    """EDITED: no capture shows a GPU-State other than ``Available``; any other word is taken
    for an alarm naming it (fail closed), never for healthy."""
    text = _read(V229).replace("| Available            |", "| Unknown              |", 1)
    a = parse_sections({"mx_smi": text}).accelerators[0]
    assert (a.health, a.error_codes) == (Health.ALARM, ("GPU-State Unknown",))


def test_an_unreadable_topology_never_sinks_the_host() -> None:
    bad = _read(TOPO_M).replace("GPU1    MX      X ", "GPU1    QQ      X ", 1)
    inv, problems = read_sections(COLLECTOR, {"mx_smi": _read(V229), "mx_smi_topo": bad})
    assert inv.count == 8 and all(a.links == () for a in inv.accelerators)
    assert problems == ["mx_smi_topo: unreadable, left out: mx-smi topo: GPU1/GPU0: "
                        "link code 'QQ' not in the legend"]
    with pytest.raises(ParseError, match="section missing"):
        parse_sections({"mx_smi_topo": _read(TOPO_M)})


def test_plugin_identity_and_sections() -> None:
    assert plugin("metax") is PLUGIN
    assert (PLUGIN.pci_vendor_id, PLUGIN.exports.gres_name, PLUGIN.exports.runtime) == (
        "9999", "gpu", "maca")
    assert [s.command for s in COLLECTOR.sections] == ["$TO mx-smi", "$TO mx-smi topo -m"]
    assert COLLECTOR.optional == ("mx_smi_topo",)
    assert [s.name for s in INSPECTOR.inspect_sections] == ["mx_smi"]
    assert PLUGIN.group("MetaX C500") == "gpu_c500" and PLUGIN.group("MXC550") == "gpu_c550"
