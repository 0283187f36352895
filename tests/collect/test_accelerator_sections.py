"""The vendor sections of the collection (issue 15): lab hosts of each vendor replaying real
captures, read into the facts' accelerator section; a missing or unreadable vendor tool fails
closed only where lspci lists the vendor's accelerators."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime
from pathlib import Path

import pytest
from tests.sshlab import materialize_host

from gpufleet.collect.assemble import assemble_facts
from gpufleet.collect.bundle import Section, split_bundle
from gpufleet.collect.local import LocalTransport
from gpufleet.collect.script import remote_script
from gpufleet.collect.transport import Outcome, Target
from gpufleet.domain.accelerators import Health, LinkState, Vendor, accelerators_of
from gpufleet.domain.facts import HostFacts
from gpufleet.errors import ConfigError
from gpufleet.lab.fleet import LabHost
from gpufleet.lab.renderers import render_output, render_sections
from gpufleet.vendors.huawei.plugin import split_chip_answers

NOW = datetime(2026, 12, 3, tzinfo=UTC)


def _facts(sections: dict[str, Section], host: str = "h1") -> HostFacts:
    return assemble_facts(sections, NOW, host)


def _host(model: str, faults: list[str] | None = None) -> LabHost:
    return LabHost(name="h1", model=model, serial_salt=7, faults=faults or [])


def test_the_script_runs_every_vendor_tool_and_its_per_chip_loops() -> None:
    script = remote_script()
    for line in ("sec npu_smi_info $TO npu-smi info", "sec npu_smi_health npu_each health",
                 "sec hccn_link npu_each -link", "sec accelerators true"):
        assert line in script
    assert "$TO npu-smi info -t health -i \"$n\" -c \"$c\"" in script
    assert "$TO hccn_tool -i \"$l\" \"$1\" -g" in script
    assert "sec rocm_smi_json $TO rocm-smi " in script


def test_an_ascend_host_reads_as_eight_910b3_npus_with_versions() -> None:
    f = _facts(split_bundle(render_output(_host("ascend-910b3-8x"))))
    assert f.problems == [] and f.accelerator_errors == {} and f.gpus == []
    npus = accelerators_of(f)
    assert [a.index for a in npus] == list(range(8))
    assert {a.model for a in npus} == {"910B3"} and {a.vendor for a in npus} == {Vendor("huawei")}
    assert npus[0].bus_id == "0000:c1:00.0" and npus[0].memory_total_mib == 65536
    assert npus[0].temperature_c == 43.0 and all(a.health is Health.OK for a in npus)
    assert all(ln.state is LinkState.UP for a in npus for ln in a.links if ln.peer is None)
    assert [ln.kind for ln in npus[0].links if ln.peer is None] == ["roce", "roce_net_health"]
    # hccn_tool -stat / -link_stat of the worker-0 capture: no RoCE error packets, 2 link-ups
    assert [(c.name, c.count) for c in npus[3].error_counters] == [
        ("roce_rx_err_pkt_num", 0), ("roce_tx_err_pkt_num", 0), ("roce_link_up_count", 2),
        # hccn_tool -optical: the one real capture, module "not present", Rx LOS/LoL 0xff
        ("optical_module_absent", 1), ("optical_tx_los_lanes", 0), ("optical_rx_los_lanes", 8),
        ("optical_tx_lol_lanes", 0), ("optical_rx_lol_lanes", 8)]
    # npu-smi info -t board -i 3 (NPU 0's capture replayed): firmware and PCI device id
    assert npus[3].firmware == {"firmware": "7.1.0.7.220", "software": "23.0.5"}
    assert npus[3].pci_device_id == "d801"
    # the HCCS full mesh of npu-smi info -t topo: 7 peers each, no state
    hccs = [(ln.peer, ln.state) for ln in npus[2].links if ln.kind == "hccs"]
    assert hccs == [(p, LinkState.UNKNOWN) for p in ("0", "1", "3", "4", "5", "6", "7")]
    v = f.accelerator_versions[Vendor("huawei")]
    assert (v.driver, v.firmware, v.runtime, v.tool) == (
        "23.0.7", "7.1.0.11.220", "7.0.T10", "24.1.rc1.b030")
    assert len([d for d in f.pci_devices or [] if d.vendor_id == "19e5"]) == 8


def test_ascend_faults_show_on_the_named_npu() -> None:
    h = _host("ascend-910b3-8x",
              ["npu-missing:3", "npu-alarm:5", "npu-link-down:1", "npu-net-unhealthy:2"])
    npus = {a.index: a for a in accelerators_of(_facts(render_sections(h)))}
    assert sorted(npus) == [0, 1, 2, 4, 5, 6, 7]  # lspci still lists 8
    assert npus[5].health is Health.ALARM
    assert npus[5].error_codes == ("A4025021", "8C03A000", "8C084E00")
    assert [ln.state for ln in npus[1].links if ln.kind == "roce"] == [LinkState.DOWN]
    assert npus[0].health is Health.OK
    # the real hccn_tool -net_health failure ("Socket failed") on NPU 2's port
    assert [ln.state for ln in npus[2].links if ln.kind == "roce_net_health"] == [
        LinkState.DOWN]


def test_an_amd_host_reads_four_mi100s() -> None:
    f = _facts(render_sections(_host("mi100-4x")))
    cards = accelerators_of(f)
    assert f.problems == [] and f.accelerator_errors == {}
    assert [(a.vendor, a.model, a.memory_total_mib) for a in cards] == [
        (Vendor("amd"), "Instinct MI100", 32752)] * 4
    assert cards[0].bus_id == "0000:83:00.0" and cards[0].pci_device_id == "738c"
    assert f.accelerator_versions[Vendor("amd")].driver == "6.3.6"


def test_an_nvidia_host_has_no_vendor_error_and_no_problem() -> None:
    f = _facts(render_sections(_host("a100-8x")))
    assert f.problems == [] and f.accelerators == () and f.accelerator_errors == {}
    assert {a.vendor for a in accelerators_of(f)} == {Vendor.NVIDIA}


def test_npus_on_the_bus_without_npu_smi_fail_closed() -> None:
    sections = render_sections(_host("ascend-910b3-8x"))
    sections["npu_smi_info"] = Section("npu_smi_info", "", "sh: 1: npu-smi: not found", 127)
    f = _facts(sections)
    assert f.accelerators == ()
    assert f.accelerator_errors == {
        Vendor("huawei"): "npu-smi not found (driver not installed?); "
        "lspci lists 8 19e5 accelerators"}


def test_unparseable_npu_smi_output_fails_closed_naming_the_host() -> None:
    sections = render_sections(_host("ascend-910b3-8x"))
    sections["npu_smi_info"] = dataclasses.replace(
        sections["npu_smi_info"], stdout="| npu-smi garbage\nrandom noise\n")
    f = _facts(sections)
    assert f.accelerators == ()
    assert f.accelerator_errors[Vendor("huawei")].startswith("h1:npu-smi info")


def test_lab_faults_must_fit_the_vendor() -> None:
    with pytest.raises(ConfigError, match=r"ascend-910b3-8x host: it has no NVIDIA GPUs"):
        _host("ascend-910b3-8x", ["xid:79"])
    with pytest.raises(ConfigError, match="a100-8x host: it has no Ascend NPUs"):
        _host("a100-8x", ["npu-alarm"])
    with pytest.raises(ConfigError, match=r"expected npu-alarm\[:<npu id>\]"):
        _host("ascend-910b3-8x", ["npu-alarm:8"])
    assert _host("mi100-4x", ["unreachable"]).faults == ["unreachable"]


def test_a_lab_driver_change_reaches_the_vendor_versions() -> None:
    h = _host("ascend-910b3-8x").model_copy(update={"driver": "24.1.0"})
    assert _facts(render_sections(h)).accelerator_versions[Vendor("huawei")].driver == "24.1.0"
    a = _host("mi100-4x").model_copy(update={"driver": "6.7.0"})
    assert _facts(render_sections(a)).accelerator_versions[Vendor("amd")].driver == "6.7.0"


def test_the_real_script_runs_the_per_chip_loops(tmp_path: Path) -> None:
    """The collection script itself (POSIX sh, ``npu_each``) on a host whose npu-smi and
    hccn_tool answer per chip (fakes serving the lab host's captures, the NPU in Alarm and
    the port down included) reads the same accelerators as the lab renders."""
    host = _host("ascend-910b3-8x", ["npu-alarm:5", "npu-link-down:1"])
    given = render_sections(host)
    env = materialize_host(tmp_path / "host", given)
    data = tmp_path / "host" / "chips"
    data.mkdir()
    for a in split_chip_answers(given["npu_smi_health"].stdout, "health"):
        (data / f"health.{a.npu_id}.{a.chip_id}").write_text(a.text.rstrip("\n") + "\n")
    for view in ("board", "usages", "common"):  # per NPU: npu-smi info -t VIEW -i N
        for a in split_chip_answers(given[f"npu_smi_{view}"].stdout, view):
            (data / f"{view}.{a.npu_id}").write_text(a.text.rstrip("\n") + "\n")
    for name, kind in (("hccn_link", "-link"), ("hccn_net_health", "-net_health"),
                       ("hccn_stat", "-stat"), ("hccn_link_stat", "-link_stat"),
                       ("hccn_optical", "-optical")):
        for a in split_chip_answers(given[name].stdout, name):
            (data / f"{kind}.{a.logic_id}").write_text(a.text.rstrip("\n") + "\n")
    for name in ("npu_smi_info", "npu_smi_mapping", "npu_smi_topo"):
        (data / name).write_text(given[name].stdout + "\n")
    bin_dir = tmp_path / "host" / "bin"
    d = str(data)
    (bin_dir / "npu-smi").write_text(
        "#!/bin/sh\n"
        'case "$*" in\n'
        f'  "info") cat {d}/npu_smi_info ;;\n'
        f'  "info -m") cat {d}/npu_smi_mapping ;;\n'
        f'  "info -t topo") cat {d}/npu_smi_topo ;;\n'
        f'  "info -t health -i "*) cat {d}/health.$5.$7 ;;\n'
        f'  "info -t board -i "*|"info -t usages -i "*|"info -t common -i "*) cat {d}/$3.$5 ;;\n'
        '  *) echo "npu-smi: unsupported $*" >&2; exit 2 ;;\n'
        "esac\n")
    (bin_dir / "hccn_tool").write_text(f'#!/bin/sh\ncat {d}/"$3.$2"\n')
    for tool in ("npu-smi", "hccn_tool"):
        (bin_dir / tool).chmod(0o755)
    res = asyncio.run(LocalTransport(env).run(Target("local", "localhost"), remote_script(), 120.0))
    assert res.outcome is Outcome.OK and res.output is not None, res.reason
    got = split_bundle(res.output)
    for name in ("npu_smi_health", "hccn_link", "hccn_net_health", "hccn_stat",
                 "hccn_link_stat", "npu_smi_board", "npu_smi_usages", "npu_smi_common",
                 "hccn_optical"):
        assert got[name].rc == 0 and got[name].stdout.count("\n== rc 0 ==") == 8, name
    assert "Alarm" in got["npu_smi_health"].stdout and "DOWN" in got["hccn_link"].stdout
    real, lab = _facts(got), _facts(given)
    assert real.accelerator_errors == {} and real.accelerators == lab.accelerators
    assert real.accelerator_versions == lab.accelerator_versions
    npus = {a.index: a for a in real.accelerators}
    assert npus[5].health is Health.ALARM and len(npus) == 8
