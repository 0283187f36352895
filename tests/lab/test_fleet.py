"""The lab fleet renders real captures that the real parsers read back, faults included."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpufleet.collect.assemble import assemble_facts
from gpufleet.collect.bundle import split_bundle
from gpufleet.collect.ib import parse_ibstat
from gpufleet.collect.kernel_log import parse_xids
from gpufleet.collect.nvidia_smi import parse_nvidia_smi_text, parse_nvidia_smi_xml
from gpufleet.collect.pci import parse_lspci
from gpufleet.collect.script import SECTIONS
from gpufleet.domain.facts import HostFacts
from gpufleet.errors import ConfigError, NotFound, ParseError
from gpufleet.inventory import load_inventory
from gpufleet.lab.catalogue import MODELS, model_spec
from gpufleet.lab.fleet import LabFleet, LabHost, apply_change, create_fleet, write_inventory
from gpufleet.lab.renderers import render_output, render_sections
from gpufleet.lab.templates import fault_gpu_index

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
EXPECTED = {  # model -> (GPU count, product substring, driver of the capture)
    "v100s-8x": (8, "Tesla V100S-PCIE-32GB", "460.73.01"),
    "a100-8x": (8, "NVIDIA A100-SXM4-80GB", "535.54.03"),
    "h100-8x": (8, "NVIDIA H100 80GB HBM3", "590.48.01"),
    "h100-mig-8x": (8, "NVIDIA H100 80GB HBM3", "590.48.01"),
    "a10g-1x": (1, "NVIDIA A10G", "515.105.01"),
    "l40s-1x": (1, "NVIDIA L40S", "595.80"),
    "gb200-4x": (4, "NVIDIA GB200", "580.173.02"),
}


def host(model: str, faults: list[str] | None = None, salt: int = 7, **kw: object) -> LabHost:
    return LabHost.model_validate(
        {"name": f"lab-{model}", "model": model, "faults": faults or [], "serial_salt": salt}
        | kw
    )


def facts(h: LabHost) -> HostFacts:
    return assemble_facts(split_bundle(render_output(h)), NOW, h.name)


@pytest.mark.parametrize("model", MODELS)
def test_every_model_parses_cleanly_with_the_real_parsers(model: str) -> None:
    count, product, driver = EXPECTED[model]
    h = host(model)
    f = facts(h)
    assert f.problems == []
    assert f.hostname == h.name
    assert len(f.gpus) == count and f.nvidia_smi is not None
    assert f.nvidia_smi.attached_gpus == count
    assert {g.product_name for g in f.gpus} == {product}
    assert f.driver_version == driver
    assert len(f.pci_gpus) == count
    assert {g.pci_bus_id for g in f.gpus} == {d.address for d in f.pci_gpus}
    assert len({g.serial for g in f.gpus}) == count
    assert len({g.uuid for g in f.gpus}) == count
    assert f.os is not None and f.os.pretty_name == "Ubuntu 22.04.5 LTS"
    assert f.kernel == "5.15.0-125-generic"
    assert "nvidia" in f.modules and f.memory_total_kib and f.cpu_count
    assert f.block_devices and f.xids == []
    spec = model_spec(model)
    assert f.fabricmanager_active is spec.nvswitch
    assert f.nvlink is not None and len(f.nvlink.gpus) == count
    if spec.nvlink_per_gpu:
        assert all(len(g.links) == spec.nvlink_per_gpu and all(x.active for x in g.links)
                   for g in f.nvlink.gpus)
        # the NVLink report names the same GPUs as nvidia-smi -q
        assert [g.uuid for g in f.nvlink.gpus] == [g.uuid for g in f.gpus]
    assert f.topology is not None and f.topology.devices[:count] == [
        f"GPU{i}" for i in range(count)]
    if spec.fabric == "none":
        assert f.ib_ports is None and "nvidia_peermem" not in f.modules  # no ibstat: None
    else:
        layer = "InfiniBand" if spec.fabric == "ib" else "Ethernet"
        fast = [p for p in f.ib_ports or [] if p.link_layer == layer
                and p.rate_gbps == spec.ib_rate_gbps and p.state == "Active"]
        assert len(fast) == spec.ib_ports
        assert "mlx5_core" in f.modules and "nvidia_peermem" in f.modules


def test_h100_and_l40s_answer_with_the_q_text_fallback() -> None:
    for model in ("h100-8x", "l40s-1x"):
        s = render_sections(host(model))
        assert s["nvidia-smi-xml"].rc != 0 and "not available" in s["nvidia-smi-xml"].stderr
        report = parse_nvidia_smi_text(s["nvidia-smi-q"].stdout)
        assert report.attached_gpus == EXPECTED[model][0]
    s = render_sections(host("a100-8x"))
    assert s["nvidia-smi-q"].stdout == "" and s["nvidia-smi-q"].rc == 0


def test_a100_is_served_with_mig_disabled() -> None:
    f = facts(host("a100-8x"))
    assert all(g.mig_mode_current is False and g.mig_mode_pending is False for g in f.gpus)
    assert all(g.mig_devices == [] for g in f.gpus)
    assert len({g.pci_bus_id for g in f.gpus}) == 8


def test_sections_round_trip_through_the_framing() -> None:
    for model in MODELS:
        h = host(model, ["xid:79", "ib-down"] if model.endswith("8x") else ["xid:13"])
        sections = render_sections(h)
        assert tuple(sections) == SECTIONS
        assert split_bundle(render_output(h)) == sections


def test_serials_and_uuids_are_distinct_across_hosts() -> None:
    fl = create_fleet(40, seed=3, faults={})
    serials: list[str] = []
    uuids: list[str] = []
    for h in fl.hosts:
        gpus = facts(h).gpus
        serials += [g.serial or "" for g in gpus]
        uuids += [g.uuid or "" for g in gpus]
    assert len(serials) == len(set(serials)) and "" not in serials
    assert len(uuids) == len(set(uuids)) and "" not in uuids


def test_rendering_is_deterministic() -> None:
    assert render_output(host("h100-8x", ["ecc-uncorrectable", "xid:79"])) == render_output(
        host("h100-8x", ["ecc-uncorrectable", "xid:79"]))
    assert create_fleet(40, seed=9) == create_fleet(40, seed=9)
    assert create_fleet(40, seed=9) != create_fleet(40, seed=10)


# ------------------------------------------------------------------------------ faults


@pytest.mark.parametrize("model", ["a100-8x", "h100-8x", "v100s-8x"])
def test_gpu_missing_hides_a_gpu_from_the_driver_but_not_from_lspci(model: str) -> None:
    h = host(model, ["gpu-missing"])
    f = facts(h)
    assert len(f.gpus) == 7 and f.nvidia_smi is not None and f.nvidia_smi.attached_gpus == 7
    assert len(f.pci_gpus) == 8
    missing = {d.address for d in f.pci_gpus} - {g.pci_bus_id for g in f.gpus}
    assert len(missing) == 1
    assert f.nvlink is not None and len(f.nvlink.gpus) == 7
    assert f.topology is not None and "GPU7" not in f.topology.devices


@pytest.mark.parametrize("model", MODELS)
def test_driver_drift_replaces_the_driver_everywhere(model: str) -> None:
    captured = EXPECTED[model][2]
    h = host(model, ["driver-drift"])
    assert facts(h).driver_version == "535.154.05"
    assert captured not in render_output(h)
    assert facts(host(model, ["driver-drift:550.90.07"])).driver_version == "550.90.07"
    # a lab change installing a driver ends the drift
    fl = apply_change(LabFleet(hosts=[h]), h.name, driver="570.86.15")
    assert fl.hosts[0].faults == [] and facts(fl.hosts[0]).driver_version == "570.86.15"


@pytest.mark.parametrize("model", MODELS)
def test_ecc_uncorrectable_shows_on_one_gpu(model: str) -> None:
    h = host(model, ["ecc-uncorrectable"])
    gpus = facts(h).gpus
    bad = [g for g in gpus if g.ecc_volatile and g.ecc_volatile.uncorrectable]
    assert [g.index for g in bad] == [fault_gpu_index(h)]
    assert bad[0].ecc_volatile is not None and bad[0].ecc_volatile.uncorrectable == 2
    assert bad[0].ecc_aggregate is not None and bad[0].ecc_aggregate.uncorrectable == 2


@pytest.mark.parametrize("model", ["h100-8x", "a10g-1x", "l40s-1x"])
@pytest.mark.parametrize("fault", ["remap-pending", "remap-failure"])
def test_remapped_rows_faults(model: str, fault: str) -> None:
    h = host(model, [fault])
    flagged = [g for g in facts(h).gpus if g.remapped_rows
               and (g.remapped_rows.pending if fault == "remap-pending"
                    else g.remapped_rows.failure)]
    assert [g.index for g in flagged] == [fault_gpu_index(h)]
    assert facts(host(model)).gpus[0].remapped_rows is not None


@pytest.mark.parametrize("model", ["a100-8x", "v100s-8x"])
def test_remap_faults_refused_where_rows_are_not_reported(model: str) -> None:
    with pytest.raises(ConfigError, match="remapped rows"):
        host(model, ["remap-pending"])


@pytest.mark.parametrize("model", ["a100-8x", "h100-8x", "v100s-8x"])
@pytest.mark.parametrize(("fault", "phys"), [("ib-down", "Disabled"), ("ib-polling", "Polling")])
def test_ib_port_faults(model: str, fault: str, phys: str) -> None:
    spec = model_spec(model)
    ports = parse_ibstat(render_sections(host(model, [fault]))["ibstat"].stdout)
    down = [p for p in ports if p.state != "Active"]
    assert len(down) == 1
    assert down[0].state == "Down" and down[0].physical_state == phys
    assert down[0].rate_gbps == spec.ib_rate_gbps  # rate stays as printed
    named = parse_ibstat(render_sections(host(model, [f"{fault}:mlx5_4"]))["ibstat"].stdout)
    assert [p.ca for p in named if p.state == "Down"] == ["mlx5_4"]


def test_ib_faults_refused_without_rdma() -> None:
    with pytest.raises(ConfigError):
        host("a10g-1x", ["ib-down"])
    s = render_sections(host("a10g-1x"))["ibstat"]
    assert s.rc == 127 and "not found" in s.stderr


@pytest.mark.parametrize("model", MODELS)
def test_xid_lines_parse_with_the_gpu_address(model: str) -> None:
    h = host(model, ["xid:79"])
    events = parse_xids(render_sections(h)["kernel-xid"].stdout)
    assert [e.code for e in events] == [79]
    assert events[0].message == "GPU has fallen off the bus."
    gpu = facts(host(model)).gpus[fault_gpu_index(h)]
    assert gpu.pci_bus_id is not None
    assert events[0].pci_address == "PCI:" + gpu.pci_bus_id.rsplit(".", 1)[0]
    assert events[0].time is not None


def test_xid_with_an_explicit_gpu_and_a_captured_message() -> None:
    f = facts(host("h100-8x", ["xid:48:2", "xid:94:3"]))
    assert [(x.code, x.pci_address) for x in f.xids] == [(48, "PCI:0000:4c:00"),
                                                         (94, "PCI:0000:5d:00")]
    assert f.xids[0].message.startswith("An uncorrectable double bit error (DBE)")
    with pytest.raises(ConfigError):
        host("h100-8x", ["xid:48:9"])
    with pytest.raises(ConfigError):
        host("h100-8x", ["xid:abc"])


@pytest.mark.parametrize("model", MODELS)
def test_nvidia_smi_missing(model: str) -> None:
    h = host(model, ["nvidia-smi-missing"])
    s = render_sections(h)
    for name in ("nvidia-smi-xml", "nvidia-smi-q", "topo-m", "nvlink-s"):
        assert s[name].rc == 127 and s[name].stderr == "sh: 1: nvidia-smi: not found"
    f = facts(h)
    assert f.gpus == [] and f.nvidia_smi_error and "not found" in f.nvidia_smi_error
    assert len(f.pci_gpus) == EXPECTED[model][0]


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("fault", ["garbage", "truncated"])
def test_garbage_and_truncated_output_raise_parse_error(model: str, fault: str) -> None:
    h = host(model, [fault])
    s = render_sections(h)
    with pytest.raises(ParseError):
        facts(h)
    if fault == "garbage" or model_spec(model).smi_format == "xml":
        assert s["nvidia-smi-xml"].rc == 0
        with pytest.raises(ParseError):
            parse_nvidia_smi_xml(s["nvidia-smi-xml"].stdout)
    else:
        with pytest.raises(ParseError):
            parse_nvidia_smi_text(s["nvidia-smi-q"].stdout)


def test_transport_faults_do_not_change_the_output() -> None:
    plain = render_output(host("a100-8x"))
    for fault in ("unreachable", "hang", "wrong-key", "host-key-changed"):
        h = host("a100-8x", [fault])
        assert render_output(h) == plain


def test_unknown_faults_and_models_are_refused() -> None:
    with pytest.raises(ConfigError, match="unknown lab fault"):
        host("a100-8x", ["melted"])
    with pytest.raises(ConfigError, match="unknown lab model"):
        host("b200-8x")
    with pytest.raises(ConfigError, match="single GPU"):
        host("l40s-1x", ["gpu-missing"])


# ------------------------------------------------------------------------ fleet & changes


def test_gpu_swap_changes_one_gpu_identity() -> None:
    h = host("a100-8x")
    fl = apply_change(LabFleet(hosts=[h]), h.name, gpu_swap=True)
    assert fl.hosts[0].gpu_swap == 1
    before, after = facts(h).gpus, facts(fl.hosts[0]).gpus
    changed = [i for i in range(8) if before[i].serial != after[i].serial]
    assert changed == [fault_gpu_index(h)]
    assert before[changed[0]].uuid != after[changed[0]].uuid
    assert before[changed[0]].pci_bus_id == after[changed[0]].pci_bus_id
    again = apply_change(fl, h.name, gpu_swap=True)
    assert facts(again.hosts[0]).gpus[changed[0]].serial not in {
        before[changed[0]].serial, after[changed[0]].serial}


def test_apply_change_adds_and_clears_faults() -> None:
    fl = create_fleet(3, models=["h100-8x"], faults={"gpu-02": ["xid:79", "ib-down"]})
    fl = apply_change(fl, "gpu-01", add_faults=["xid:48", "ecc-uncorrectable"])
    assert fl.host("gpu-01").faults == ["xid:48", "ecc-uncorrectable"]
    fl = apply_change(fl, "gpu-01", clear_faults=["xid"])
    assert fl.host("gpu-01").faults == ["ecc-uncorrectable"]
    fl = apply_change(fl, "gpu-02", clear_faults=list(fl.host("gpu-02").faults))
    assert fl.host("gpu-02").faults == []
    fl = apply_change(fl, "gpu-01", clear_faults=["all"])
    assert all(h.faults == [] for h in fl.hosts)
    with pytest.raises(NotFound):
        apply_change(fl, "gpu-99", gpu_swap=True)
    with pytest.raises(ConfigError):
        apply_change(fl, "gpu-01", add_faults=["melted"])


def test_save_load_round_trip(tmp_path: Path) -> None:
    fl = create_fleet(40, seed=5)
    fl = apply_change(fl, "gpu-01", driver="550.90.07", gpu_swap=True)
    path = fl.save(tmp_path / "lab")
    assert path.name == "lab.json"
    loaded = LabFleet.load(tmp_path / "lab")
    assert loaded == fl
    assert render_output(loaded.host("gpu-01")) == render_output(fl.host("gpu-01"))
    with pytest.raises(NotFound):
        LabFleet.load(tmp_path / "nowhere")


def test_create_fleet_default_mix_and_demo_faults() -> None:
    fl = create_fleet(32)
    models = Counter(h.model for h in fl.hosts)
    assert len(models) >= 3
    assert models["a100-8x"] + models["h100-8x"] > len(fl.hosts) / 2
    faults = sorted(f for h in fl.hosts for f in h.faults)
    assert faults == sorted(["gpu-missing", "driver-drift", "ib-down", "xid:79",
                             "remap-pending", "unreachable", "garbage"])
    assert all(len(h.faults) <= 1 for h in fl.hosts)  # spread over distinct hosts
    assert [h.name for h in fl.hosts][:2] == ["gpu-01", "gpu-02"]
    assert all(not h.faults for h in create_fleet(32, faults={}).hosts)
    assert all(not h.faults for h in create_fleet(8).hosts)  # small fleets stay clean
    assert {h.model for h in create_fleet(4, models=["a10g-1x"]).hosts} == {"a10g-1x"}
    with pytest.raises(ConfigError):
        create_fleet(4, faults={"nope": ["garbage"]})


def test_demo_faults_are_visible_in_the_facts() -> None:
    fl = create_fleet(32)
    by_fault = {h.faults[0]: h for h in fl.hosts if h.faults}
    f = facts(by_fault["gpu-missing"])
    assert len(f.gpus) == 7 and len(f.pci_gpus) == 8
    assert facts(by_fault["driver-drift"]).driver_version == "535.154.05"
    assert [p.state for p in facts(by_fault["ib-down"]).ib_ports].count("Down") == 1
    assert [x.code for x in facts(by_fault["xid:79"]).xids] == [79]
    assert any(g.remapped_rows and g.remapped_rows.pending
               for g in facts(by_fault["remap-pending"]).gpus)
    with pytest.raises(ParseError):
        facts(by_fault["garbage"])


def test_inventory_groups_and_expected_spec(tmp_path: Path) -> None:
    fl = create_fleet(32)
    inv_path = write_inventory(fl, tmp_path / "inventory.ini", lab_dir=tmp_path / "lab")
    inv = load_inventory(inv_path)
    assert inv.names == [h.name for h in fl.hosts]
    for h in fl.hosts:
        ih = inv.host(h.name)
        spec = model_spec(h.model)
        assert spec.group in ih.groups
        assert ih.vars["gpufleet_transport"] == "sim"
        assert ih.vars["gpufleet_lab_dir"] == str((tmp_path / "lab").resolve())
        assert ih.pool == spec.pool
        exp = ih.expected_spec()
        assert exp.gpu_count == spec.gpu_count and exp.rack == h.rack
        assert exp.gpu_model is not None and exp.gpu_model in EXPECTED[h.model][1]
        assert exp.nvlink_per_gpu == spec.nvlink_per_gpu
    a100 = inv.host(next(h.name for h in fl.hosts if h.model == "a100-8x")).expected_spec()
    assert (a100.fabric, a100.ib_ports, a100.ib_rate_gbps, a100.nvswitch) == ("ib", 8, 200, True)
    assert "train-a100" in (tmp_path / "inventory.ini").read_text()


def test_lspci_lists_every_gpu_with_its_real_device_id() -> None:
    ids = {"v100s-8x": "1df6", "a100-8x": "20b2", "h100-8x": "2330", "a10g-1x": "2237",
           "l40s-1x": "26b9"}
    for model, dev in ids.items():
        devices = parse_lspci(render_sections(host(model))["lspci-nn"].stdout)
        gpus = [d for d in devices if d.vendor_id == "10de" and d.class_id == "0302"]
        assert len(gpus) == EXPECTED[model][0] and {d.device_id for d in gpus} == {dev}


def test_rendering_a_thousand_hosts() -> None:
    fl = create_fleet(1000, seed=1)
    total = sum(len(render_output(h)) for h in fl.hosts)
    assert total > 1000 * 10_000
