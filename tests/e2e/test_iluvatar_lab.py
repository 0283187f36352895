"""Iluvatar CoreX lab hosts through one lifecycle run (issue 28), on SQLite and PostgreSQL:
enroll, collect (the hosts replay the real ixsmi 4.3.0 capture of 16 BI-V150 GPUs on 8 cards),
validate (a host whose ixsmi lost a GPU is quarantined with an Iluvatar-specific reason; no
Iluvatar lspci capture exists, so the spec's count judges), the labels and exports, and the
inspection probe through the plugin's inspector.

Fails on main 3f67bc2: no ``bi-v150-16x`` lab model, no Iluvatar plugin."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from gpufleet.domain.accelerators import Vendor, accelerators_of, inventories_of
from gpufleet.domain.vendors import plugin
from gpufleet.lab.demo import enroll_lab
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.collect import collect
from gpufleet.service.hosts.validate import validate
from gpufleet.service.views.hosts import show_host
from gpufleet.service.views.summary import host_labels
from gpufleet.vendors.iluvatar.plugin import boards


def test_iluvatar_hosts_enroll_collect_validate_label_and_export(
    fleet: Fleet, tmp_path: Path
) -> None:
    enroll_lab(fleet, tmp_path / "lab", 2, models=["bi-v150-16x"] * 2,
               faults={"gpu-02": ["gpu-missing"]}, now=fleet.now())
    assert {r.host: r.outcome.value for r in collect(fleet).results} == {
        "gpu-01": "ok", "gpu-02": "ok"}
    facts = show_host(fleet, "gpu-01").facts
    assert facts is not None and facts.problems == [] and facts.accelerator_errors == {}
    assert facts.gpus == [] and facts.pci_gpus == []
    accs = accelerators_of(facts)
    assert {(a.vendor, a.model) for a in accs} == {(Vendor("iluvatar"), "BI-V150")}
    assert [a.index for a in accs] == list(range(16))
    assert [(a.bus_id, a.temperature_c, a.power_w) for a in accs[:2]] == [
        ("0000:13:00.0", 35.0, None), ("0000:16:00.0", 34.0, 103.0)]
    (inv,) = inventories_of(facts)
    assert inv.count == 16 and boards(inv) is not None and len(boards(inv) or ()) == 8
    assert (inv.versions.driver, inv.versions.runtime) == ("4.3.0", "10.2")

    verdicts = {v.host: v for v in validate(fleet, collect_first=False).verdicts}
    assert verdicts["gpu-01"].state == "available", verdicts["gpu-01"].reasons
    assert verdicts["gpu-02"].state == "quarantined"
    assert verdicts["gpu-02"].reasons == [
        "gpu_count: iluvatar tool sees 15 accelerators, expected 16"]
    view = show_host(fleet, "gpu-02").view
    assert view.state == "quarantined" and view.fault == "gpu_lost"

    exports = plugin(inv.vendor).exports
    assert (exports.resource(inv), exports.gres_name, exports.runtime) == (
        "iluvatar.com/gpu", "gpu", "corex")
    labels = {hl.host: hl.labels for hl in host_labels(fleet)}
    assert labels["gpu-01"]["iluvatar.com/gpu.count"] == "16"
    assert labels["gpu-01"]["iluvatar.com/ix.driver-version.full"] == "4.3.0"
    assert labels["gpu-01"]["gpufleet.io/accelerator.vendor"] == "iluvatar"
    assert labels["gpu-02"]["gpufleet.io/fault"] == "gpu_lost"


def test_the_inspection_probe_of_an_iluvatar_host_asks_ixsmi() -> None:
    from gpufleet.collect.inspect import parse_probe, probe_script
    from gpufleet.lab.fleet import LabHost
    from gpufleet.lab.probe import render_probe

    script = probe_script(("/",), vendors=("iluvatar",))
    assert "@@probe iluvatar.ixsmi" in script and "nvidia-smi" not in script
    at = datetime(2026, 12, 5, 11, 0, tzinfo=UTC)
    ok = parse_probe(render_probe(LabHost(name="i-01", model="bi-v150-16x", serial_salt=1)), at)
    assert ok.problems == () and ok.faults == () and ok.observed
    assert ok.sample.gpus is not None and len(ok.sample.gpus) == 16
    gone = render_probe(
        LabHost(name="i-02", model="bi-v150-16x", serial_salt=2, faults=["gpu-missing"]))
    assert (g := parse_probe(gone, at).sample.gpus) is not None and len(g) == 15
    bad = render_probe(LabHost(name="i-03", model="bi-v150-16x", serial_salt=3)).replace(
        "Compute M. |", "Compute M. ECC |", 1)
    refused = parse_probe(bad, at)
    assert refused.sample.gpus is None
    assert any("unknown table header" in f.detail for f in refused.sample.failures)


def test_ixsmi_missing_or_with_a_new_header_fails_closed() -> None:
    """ixsmi missing on an Iluvatar host is a named error; a header ixsmi never printed is an
    error naming the host, the tool, the line and the column, never a silent mis-read."""
    from gpufleet.collect.assemble import assemble_facts
    from gpufleet.collect.bundle import Section
    from gpufleet.lab.fleet import LabHost
    from gpufleet.lab.renderers import render_sections

    at = datetime(2026, 12, 3, tzinfo=UTC)
    sections = render_sections(LabHost(name="h1", model="bi-v150-16x", serial_salt=7))
    drifted = dict(sections)
    old = sections["ixsmi"]
    drifted["ixsmi"] = Section("ixsmi", old.stdout.replace("Bus-Id ", "PCI-Id ", 1), "", 0)
    f = assemble_facts(drifted, at, "h1")
    assert f.accelerators == ()
    assert f.accelerator_errors[Vendor("iluvatar")].startswith(
        "h1:ixsmi:5:1: unknown table header")
