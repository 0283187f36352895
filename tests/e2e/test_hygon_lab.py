"""Hygon DCU lab hosts through one lifecycle run (issue 28), on SQLite and PostgreSQL: enroll,
collect (the hosts replay the real hy-smi capture of 4 K100_AI DCUs), validate (a host whose
hy-smi lost a DCU that lspci still lists is quarantined with a Hygon-specific reason), the
exports (resource, GRES) and the inspection probe through the plugin's inspector.

Fails on main 84be469: no ``k100ai-4x`` lab model, no Hygon plugin; a Co-processor was not an
accelerator on the bus (the host read as GPU-less)."""

from __future__ import annotations

from pathlib import Path

from gpufleet.domain.accelerators import Vendor, accelerators_of, inventories_of
from gpufleet.domain.vendors import plugin
from gpufleet.lab.demo import enroll_lab
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.collect import collect
from gpufleet.service.hosts.validate import validate
from gpufleet.service.views.hosts import show_host

MODELS = ["k100ai-4x", "k100ai-4x"]
FAULTS = {"gpu-02": ["dcu-missing"]}


def test_hygon_hosts_enroll_collect_validate_and_export(fleet: Fleet, tmp_path: Path) -> None:
    enroll_lab(fleet, tmp_path / "lab", 2, models=MODELS, faults=FAULTS, now=fleet.now())

    outcomes = {r.host: r.outcome.value for r in collect(fleet).results}
    assert outcomes == {"gpu-01": "ok", "gpu-02": "ok"}
    hygon = Vendor("hygon")
    seen = {}
    for name in outcomes:
        facts = show_host(fleet, name).facts
        assert facts is not None and facts.problems == [] and facts.accelerator_errors == {}
        assert facts.gpus == [] and facts.pci_gpus == []
        accs = accelerators_of(facts)
        assert {a.vendor for a in accs} == {hygon}
        seen[name] = [(a.index, a.temperature_c, a.power_w) for a in accs]
    assert seen["gpu-01"] == [(0, 49.0, 118.0), (1, 48.0, 120.0), (2, 53.0, 116.0),
                              (3, 49.0, 138.0)]
    assert len(seen["gpu-02"]) == 3

    verdicts = {v.host: v for v in validate(fleet, collect_first=False).verdicts}
    assert verdicts["gpu-01"].state == "available", verdicts["gpu-01"].reasons
    assert verdicts["gpu-02"].state == "quarantined"
    assert verdicts["gpu-02"].reasons == [
        "gpu_count: hygon tool sees 3 of 4 accelerators on the PCI bus"]
    view = show_host(fleet, "gpu-02").view
    assert view.state == "quarantined" and view.fault == "gpu_lost"

    facts = show_host(fleet, "gpu-01").facts
    assert facts is not None
    (inv,) = inventories_of(facts)
    exports = plugin(inv.vendor).exports
    assert (exports.resource(inv), exports.gres_name, exports.runtime) == (
        "hygon.com/dcu", "dcu", "dtk")


def test_the_inspection_probe_of_a_hygon_host_asks_hy_smi() -> None:
    from datetime import UTC, datetime

    from gpufleet.collect.inspect import parse_probe, probe_script
    from gpufleet.lab.fleet import LabHost
    from gpufleet.lab.probe import render_probe

    script = probe_script(("/",), vendors=("hygon",))
    assert "@@probe hygon.hy_smi" in script and "hy-smi" in script
    assert "nvidia-smi" not in script
    at = datetime(2026, 12, 5, 11, 0, tzinfo=UTC)
    ok = parse_probe(render_probe(LabHost(name="d-01", model="k100ai-4x", serial_salt=1)), at)
    assert ok.problems == () and ok.faults == () and ok.observed
    assert ok.sample.gpus is not None and len(ok.sample.gpus) == 4
    gone = parse_probe(
        render_probe(LabHost(name="d-02", model="k100ai-4x", serial_salt=2,
                             faults=["dcu-missing"])), at)
    assert gone.sample.gpus is not None and len(gone.sample.gpus) == 3
    # an answer hy-smi never printed (a new header) leaves the devices unknown: fail closed
    bad = render_probe(LabHost(name="d-03", model="k100ai-4x", serial_salt=3)).replace(
        "DCU%      Mode", "DCU%      Mode     Ecc", 1)
    refused = parse_probe(bad, at)
    assert refused.sample.gpus is None
    assert any("unknown table header" in f.detail for f in refused.sample.failures)



def test_dcus_on_the_bus_without_hy_smi_or_with_a_new_header_fail_closed() -> None:
    """The DCUs are Co-processors on the bus: hy-smi missing is the driver not loaded (the
    host is not GPU-less), and a header hy-smi never printed is an error naming the host,
    the tool and the line, never a silent mis-read."""
    from datetime import UTC, datetime

    from gpufleet.collect.assemble import assemble_facts
    from gpufleet.collect.bundle import Section
    from gpufleet.lab.fleet import LabHost
    from gpufleet.lab.renderers import render_sections

    at = datetime(2026, 12, 3, tzinfo=UTC)
    sections = render_sections(LabHost(name="h1", model="k100ai-4x", serial_salt=7))
    missing = dict(sections)
    missing["hy_smi"] = Section("hy_smi", "", "sh: 1: hy-smi: not found", 127)
    f = assemble_facts(missing, at, "h1")
    assert f.accelerators == () and f.gpus == []
    assert f.accelerator_errors == {
        Vendor("hygon"): "hy-smi not found (driver not installed?); "
        "lspci lists 4 1d94 accelerators"}
    drifted = dict(sections)
    old = sections["hy_smi"]
    drifted["hy_smi"] = Section("hy_smi", old.stdout.replace("DCU%", "XCU%", 1), "", 0)
    f = assemble_facts(drifted, at, "h1")
    assert f.accelerators == ()
    assert f.accelerator_errors[Vendor("hygon")].startswith("h1:hy-smi:3:1: unknown table header")


def test_an_unreadable_dtk_rocm_smi_answer_never_sinks_the_host() -> None:
    """DTK rocm-smi's JSON is optional: one listing other cards than hy-smi (here the real
    single-card capture of another host) is a named problem, hy-smi's four DCUs stand."""
    from datetime import UTC, datetime

    from gpufleet.collect.assemble import assemble_facts
    from gpufleet.collect.bundle import Section
    from gpufleet.lab.captures import captures_dir
    from gpufleet.lab.fleet import LabHost
    from gpufleet.lab.renderers import render_sections

    sections = render_sections(LabHost(name="h1", model="k100ai-4x", serial_salt=7))
    other = (captures_dir() / "hygon" / "gpustack_hygon-gpu-24.04.3-rocm-smi.json").read_text()
    sections["hygon_rocm_smi_json"] = Section("hygon_rocm_smi_json", other, "", 0)
    f = assemble_facts(sections, datetime(2026, 12, 3, tzinfo=UTC), "h1")
    assert f.accelerator_errors == {}
    assert len(f.accelerators) == 4
    assert f.problems == [
        "h1: hygon_rocm_smi_json: unreadable, left out: rocm-smi --json (DTK): lists cards [0], "
        "hy-smi lists DCU [0, 1, 2, 3]"]
