"""Kunlunxin XPU lab hosts through one lifecycle run (issue 28), on SQLite and PostgreSQL:
enroll, collect (the hosts replay the real xpu_smi capture of 2 R300), validate (a host whose
xpu_smi lost an XPU that lspci still lists is quarantined with a Kunlunxin-specific reason
naming the address), the exports (resource, GRES, group) and the inspection probe.

Fails on main 3f67bc2: no ``r300-2x`` lab model, no Kunlunxin plugin (lspci's Communication
controllers of vendor 1d22 were read by no plugin: "no installed vendor plugin reads them")."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from gpufleet.collect.inspect import parse_probe, probe_script
from gpufleet.domain.accelerator_exports import Gres, gres_of
from gpufleet.domain.accelerators import Vendor, accelerators_of, inventories_of, inventory_group
from gpufleet.domain.vendors import plugin
from gpufleet.lab.demo import enroll_lab
from gpufleet.lab.fleet import LabHost
from gpufleet.lab.probe import render_probe
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.collect import collect
from gpufleet.service.hosts.validate import validate
from gpufleet.service.hosts.vendor_exports import EXPORTS
from gpufleet.service.views.hosts import show_host


def test_kunlunxin_hosts_enroll_collect_validate_and_export(fleet: Fleet, tmp_path: Path) -> None:
    enroll_lab(fleet, tmp_path / "lab", 2, models=["r300-2x"] * 2,
               faults={"gpu-02": ["xpu-missing"]}, now=fleet.now())
    assert {r.host: r.outcome.value for r in collect(fleet).results} == {
        "gpu-01": "ok", "gpu-02": "ok"}
    facts = show_host(fleet, "gpu-01").facts
    assert facts is not None and facts.problems == [] and facts.accelerator_errors == {}
    assert facts.gpus == []
    accs = accelerators_of(facts)
    assert [(a.vendor, a.index, a.model, a.bus_id, a.serial, a.memory_total_mib)
            for a in accs] == [
        (Vendor("kunlunxin"), 0, "R300", "0000:53:00.0", "02Kxxx", 32768),
        (Vendor("kunlunxin"), 1, "R300", "0000:56:00.0", "02Kxxx", 32768)]
    lost = show_host(fleet, "gpu-02").facts
    assert lost is not None and len(accelerators_of(lost)) == 1

    verdicts = {v.host: v for v in validate(fleet, collect_first=False).verdicts}
    assert verdicts["gpu-01"].state == "available", verdicts["gpu-01"].reasons
    assert verdicts["gpu-02"].state == "quarantined"
    (reason,) = verdicts["gpu-02"].reasons
    assert reason.startswith("gpu_count: kunlunxin tool sees 1 of 2 accelerators on the PCI bus "
                             "(missing from the tool: 0000:5")
    view = show_host(fleet, "gpu-02").view
    assert view.state == "quarantined" and view.fault == "gpu_lost"

    (inv,) = inventories_of(facts)
    exports = plugin(inv.vendor).exports
    assert (exports.resource(inv), exports.runtime) == ("kunlunxin.com/xpu", "xre")
    assert gres_of([inv], EXPORTS) == [Gres("xpu", "r300", 2, "/dev/xpu[0-1]")]
    assert inventory_group(inv) == "xpu_r300"
    assert (inv.versions.driver, inv.versions.runtime) == ("4.0", "4.31")


def test_the_inspection_probe_of_a_kunlunxin_host_asks_xpu_smi() -> None:
    script = probe_script(("/",), vendors=("kunlunxin",))
    assert "@@probe kunlunxin.xpu_smi" in script and "xpu-smi" in script
    assert "nvidia-smi" not in script
    at = datetime(2026, 12, 5, 11, 0, tzinfo=UTC)
    ok = parse_probe(render_probe(LabHost(name="k-01", model="r300-2x", serial_salt=1)), at)
    assert ok.problems == () and ok.faults == () and ok.observed
    assert ok.sample.gpus is not None
    assert [g.memory_used_mib for g in ok.sample.gpus] == [0.0, 0.0]
    gone = render_probe(LabHost(name="k-02", model="r300-2x", serial_salt=2,
                                faults=["xpu-missing"]))
    assert (g := parse_probe(gone, at).sample.gpus) is not None and len(g) == 1
    # a DEVICES header xpu_smi never printed leaves the devices unknown: fail closed
    bad = render_probe(LabHost(name="k-03", model="r300-2x", serial_salt=3)).replace(
        "| UseRate |", "| Health  |", 1)
    refused = parse_probe(bad, at)
    assert refused.sample.gpus is None
    assert any("unknown DEVICES table header" in f.detail for f in refused.sample.failures)


def test_xpus_on_the_bus_without_xpu_smi_are_a_driver_not_loaded() -> None:
    from gpufleet.collect.assemble import assemble_facts
    from gpufleet.collect.bundle import Section
    from gpufleet.lab.renderers import render_sections

    sections = render_sections(LabHost(name="h1", model="r300-2x", serial_salt=7))
    sections["xpu_smi"] = Section("xpu_smi", "", "sh: 1: xpu-smi: not found", 127)
    f = assemble_facts(sections, datetime(2026, 12, 3, tzinfo=UTC), "h1")
    assert f.accelerators == () and f.gpus == []
    assert f.accelerator_errors == {
        Vendor("kunlunxin"): "xpu_smi not found (driver not installed?); "
        "lspci lists 2 1d22 accelerators"}


def test_a_p800_ecc_error_is_a_critical_inspection_finding() -> None:
    """The P800's error state: its ``Volatile Uncorr. ECC`` count (the lab's ``xpu-ecc``
    fault, an EDITED copy of the capture with one device's 0 made 1) reaches the inspection
    as ``ecc_volatile_uncorrectable``, which the default health rules call critical."""
    from gpufleet.domain.rules import RulePolicy, evaluate_host
    from gpufleet.domain.xid import XidPolicy
    from gpufleet.lab.catalogue import model_spec
    from gpufleet.lab.vendors.kunlunxin import faulty_device

    at = datetime(2026, 12, 5, 11, 0, tzinfo=UTC)
    ok = parse_probe(render_probe(LabHost(name="p-01", model="p800-8x", serial_salt=1)), at)
    assert ok.problems == () and ok.sample.gpus is not None
    assert [g.temperature_c for g in ok.sample.gpus] == [37, 41, 36, 36, 40, 40, 39, 40]
    assert {g.ecc_volatile_uncorrectable for g in ok.sample.gpus} == {0}
    policy, xids = RulePolicy.load_default(), XidPolicy.load_default()
    assert evaluate_host(policy, [ok.sample], {}, xids) == []

    host = LabHost(name="p-02", model="p800-8x", serial_salt=2, faults=["xpu-ecc"])
    bad = parse_probe(render_probe(host), at)
    assert bad.sample.gpus is not None
    dev = faulty_device(host, model_spec("p800-8x"))
    assert [g.index for g in bad.sample.gpus if g.ecc_volatile_uncorrectable] == [dev]
    found = evaluate_host(policy, [bad.sample], {}, xids)
    assert [(f.rule, f.gpu_index, f.severity, f.action) for f in found] == [
        ("ecc-uncorrectable", dev, "critical", "reset_gpu")]


def test_the_ecc_fault_applies_to_the_p800_only() -> None:
    import pytest

    from gpufleet.errors import ConfigError
    from gpufleet.lab.faults import validate_faults

    validate_faults("p800-8x", ["xpu-ecc", "xpu-missing"])
    with pytest.raises(ConfigError, match=r"xpu_smi 4\.x prints no ECC count"):
        validate_faults("r300-2x", ["xpu-ecc"])
    with pytest.raises(ConfigError, match="it has no Kunlunxin XPUs"):
        validate_faults("c500-8x", ["xpu-missing"])
