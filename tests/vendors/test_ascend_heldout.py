"""Ascend values a held-out check found wrong (issue 28): ``hccn_tool -link_stat`` with the
``[device N]`` prefix of Huawei's documentation, and one unreadable optional answer sinking
the host's whole Ascend inventory; a first-generation 910 printed ``910B`` given
second-generation scheduling values."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

from tests.vendors.ascend_captures import FIX, section, tool_output

from gpufleet.collect.assemble import assemble_facts
from gpufleet.collect.bundle import Section
from gpufleet.domain.accelerator_exports import gres_of
from gpufleet.domain.accelerators import AcceleratorInventory, LinkState, Vendor, accelerators_of
from gpufleet.lab.fleet import LabHost
from gpufleet.lab.renderers import render_sections
from gpufleet.service.hosts.vendor_exports import EXPORTS
from gpufleet.vendors.huawei import plugin as ascend
from gpufleet.vendors.huawei.chips import device_type
from gpufleet.vendors.huawei.hccn import parse_link_stat
from gpufleet.vendors.huawei.npu_smi import parse_npu_smi_info

NOW = datetime(2026, 12, 3, tzinfo=UTC)
EDITED = "mind-cluster_kg_parse_hccn_tool-link_stat_device-prefix.EDITED.txt"


def _sections() -> dict[str, Section]:
    return render_sections(LabHost(name="h1", model="ascend-910b3-8x", serial_salt=7))


def _counters(sections: dict[str, Section], index: int) -> dict[str, int]:
    npus = accelerators_of(assemble_facts(sections, NOW, "h1"))
    acc = next(a for a in npus if a.index == index)
    return {c.name: c.count for c in acc.error_counters}


def test_link_stat_with_the_device_prefix() -> None:
    history = parse_link_stat((FIX / EDITED).read_text())
    assert history.link_up_count == 2
    assert [s for _, s in history.changes] == [LinkState.UP, LinkState.DOWN, LinkState.UP]
    assert history.changes[0][0] == "Tue Aug  1 14:43:40 2022"
    # the same as the unedited [devid 0] form of the capture
    real = parse_link_stat(section("mind-cluster_kg_parse_npu_info_before.txt", "-link_stat -g"))
    assert real == history


def test_a_host_answering_link_stat_with_the_device_prefix_reads_whole() -> None:
    sections = _sections()
    link_stat = sections["hccn_link_stat"]
    # the EDITED fixture's one edit, applied to every chip's answer
    sections["hccn_link_stat"] = dataclasses.replace(
        link_stat, stdout=link_stat.stdout.replace("[devid ", "[device ")
    )
    f = assemble_facts(sections, NOW, "h1")
    assert f.accelerator_errors == {} and f.problems == []
    assert len(accelerators_of(f)) == 8
    assert _counters(sections, 3)["roce_link_up_count"] == 2


def test_one_unreadable_optional_answer_is_a_named_problem_not_the_host() -> None:
    sections = _sections()
    link_stat = sections["hccn_link_stat"]
    # chip 0 answers -link_stat with what -fec -g prints (a real line of the same capture)
    fec = section("mind-cluster_kg_parse_npu_info_before.txt", "-fec -g")
    head, _, rest = link_stat.stdout.partition("== rc 0 ==")
    first_head = head.splitlines()[0]
    sections["hccn_link_stat"] = dataclasses.replace(
        link_stat, stdout=f"{first_head}\n{fec}\n== rc 0 =={rest}"
    )
    f = assemble_facts(sections, NOW, "h1")
    assert f.accelerator_errors == {}
    npus = accelerators_of(f)
    assert len(npus) == 8 and {a.vendor for a in npus} == {Vendor("huawei")}
    assert [p for p in f.problems if "hccn_link_stat" in p] == [
        "h1: hccn_link_stat: unreadable, left out: hccn_tool -i 0 -link_stat -g:1: "
        "unexpected key 'fec mode'"
    ]
    # the section is left out whole (no link-up counts); the ports and -stat counters stand
    c3 = _counters(sections, 3)
    assert "roce_link_up_count" not in c3 and c3["roce_rx_err_pkt_num"] == 0
    assert all(ln.state is LinkState.UP for a in npus for ln in a.links if ln.kind == "roce")


def test_an_unreadable_required_answer_still_fails_the_vendor_closed() -> None:
    sections = _sections()
    sections["npu_smi_info"] = dataclasses.replace(
        sections["npu_smi_info"], stdout=section("mind-cluster_kg_parse_npu_info_before.txt",
                                                 "-fec -g"))
    f = assemble_facts(sections, NOW, "h1")
    assert all(a.vendor != Vendor("huawei") for a in accelerators_of(f))
    assert f.accelerator_errors[Vendor("huawei")].startswith("h1:npu-smi info")


_9010 = "gpustack_ai-server_atlas-800-training-server_model-9010_version-6.0.RC1"
FIRST_GEN_910B = f"{_9010}.first-gen-910B.EDITED.txt"
FIRST_GEN_910A = f"{_9010}.txt"


def _first_gen(name: str) -> AcceleratorInventory:
    return ascend.to_inventory(parse_npu_smi_info(tool_output(name)))


def test_a_first_generation_910_printed_910b_gets_first_generation_values() -> None:
    inv = _first_gen(FIRST_GEN_910B)
    assert inv.count == 8 and inv.models() == ["910B"]
    assert {a.memory_total_mib for a in inv.accelerators} == {32768}  # 32 GB HBM, not 64
    assert ascend.labels(inv) == {
        "accelerator": "huawei-Ascend910",
        "accelerator-type": "module",  # not module-910b-8
        "node.kubernetes.io/npu.chip.name": "910B",
    }
    assert [g.spec() for g in gres_of([inv], EXPORTS)] == ["npu:910:8"]  # not npu:910b:8
    assert ascend.group("910B") == "npu_910"
    assert device_type("910B") == "Ascend910"
    # the same server with 910A chips: the same scheduling values but its own chip name
    a910 = _first_gen(FIRST_GEN_910A)
    assert ascend.labels(a910)["accelerator-type"] == "module"
    assert [g.spec() for g in gres_of([a910], EXPORTS)] == ["npu:910a:8"]


def test_second_generation_names_keep_910b_values() -> None:
    inv = ascend.to_inventory(parse_npu_smi_info(tool_output(
        "ms-swift_NPU-support_npu-smi_info_8x910B3.txt")))
    assert ascend.labels(inv)["accelerator-type"] == "module-910b-8"
    assert [g.spec() for g in gres_of([inv], EXPORTS)] == ["npu:910b3:8"]
    assert ascend.group("910B3") == "npu_910b"
    assert [device_type(n) for n in ("910B1", "910B4", "Ascend 910A", "310P3", "310B1", "310")] == [
        "Ascend910B", "Ascend910B", "Ascend910", "Ascend310P", "Ascend310B", "Ascend310"]
