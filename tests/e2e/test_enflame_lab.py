"""Enflame GCU lab hosts through one lifecycle run (issue 28), on SQLite and PostgreSQL:
enroll, collect (the hosts replay the real efsmi capture of 2 S60 cards, and its lspci lines),
validate (a host whose efsmi lost a card lspci still lists is quarantined with an
Enflame-specific reason; the captured card with ECC on, its memory shrunk, is held out of
inference), the labels and exports, and the inspection probe.

Fails on main 3f67bc2: no ``s60-2x`` lab model, no Enflame plugin (the GCUs on the bus were
named as unread)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from gpufleet.domain.accelerators import Vendor, accelerators_of, inventories_of
from gpufleet.domain.checks import CHECKS, ActiveEvidence, CheckContext, CheckStatus
from gpufleet.domain.spec import ExpectedSpec
from gpufleet.domain.vendors import plugin
from gpufleet.lab.demo import enroll_lab
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.collect import collect
from gpufleet.service.hosts.validate import validate
from gpufleet.service.views.hosts import show_host
from gpufleet.service.views.summary import host_labels


def test_enflame_hosts_enroll_collect_validate_label_and_export(
    fleet: Fleet, tmp_path: Path
) -> None:
    enroll_lab(fleet, tmp_path / "lab", 2, models=["s60-2x"] * 2,
               faults={"gpu-02": ["gcu-missing"]}, now=fleet.now())
    assert {r.host: r.outcome.value for r in collect(fleet).results} == {
        "gpu-01": "ok", "gpu-02": "ok"}
    facts = show_host(fleet, "gpu-01").facts
    assert facts is not None and facts.problems == [] and facts.accelerator_errors == {}
    assert facts.gpus == [] and facts.pci_gpus == []
    accs = accelerators_of(facts)
    assert [(a.vendor, a.model, a.bus_id, a.serial, a.memory_total_mib) for a in accs] == [
        (Vendor("enflame"), "S60", "0000:01:00.0", "A073640510015", 49120),
        (Vendor("enflame"), "S60", "0000:09:00.0", "C807J40510285", 42976)]
    assert [dict(a.firmware) for a in accs] == [
        {"FW": "33.6.2", "ECC": "off"}, {"FW": "33.6.5", "ECC": "on"}]

    verdicts = {v.host: v for v in validate(fleet, collect_first=False).verdicts}
    assert verdicts["gpu-01"].state == "available", verdicts["gpu-01"].reasons
    # card 1 runs with ECC on: its memory is short of the ECC-off capacity the model expects,
    # advisory for the test profile, binding for inference
    assert verdicts["gpu-01"].profiles == ["test"]
    ctx = CheckContext(now=fleet.now(), spec=ExpectedSpec(gpu_memory_mib=49120),
                       evidence=ActiveEvidence.from_kinds(None))
    memory = CHECKS["gpu_memory"](facts, ctx, {})
    assert (memory.status, memory.message) == (
        CheckStatus.FAIL, "enflame #1 (0000:09:00.0): 42976 MiB, expected 49120 MiB")
    assert verdicts["gpu-02"].state == "quarantined"
    # plain lspci lines carry no vendor id: which card is gone is not named
    assert verdicts["gpu-02"].reasons == [
        "gpu_count: enflame tool sees 1 of 2 accelerators on the PCI bus"]
    view = show_host(fleet, "gpu-02").view
    assert view.state == "quarantined" and view.fault == "gpu_lost"

    (inv,) = inventories_of(facts)
    exports = plugin(inv.vendor).exports
    assert (exports.resource(inv), exports.gres_name, exports.runtime) == (
        "enflame.com/gcu", "gcu", "topsplatform")
    labels = {hl.host: hl.labels for hl in host_labels(fleet)}
    assert labels["gpu-01"]["enflame.com/gcu.count"] == "2"
    assert labels["gpu-01"]["enflame.com/gcu.model"] == "S60"
    assert "enflame.com/gcu.memory" not in labels["gpu-01"]  # ECC off and on: no one size
    assert labels["gpu-02"]["gpufleet.io/fault"] == "gpu_lost"


def test_the_inspection_probe_of_an_enflame_host_asks_efsmi() -> None:
    from gpufleet.collect.inspect import parse_probe, probe_script
    from gpufleet.lab.fleet import LabHost
    from gpufleet.lab.probe import render_probe

    script = probe_script(("/",), vendors=("enflame",))
    assert "@@probe enflame.efsmi" in script and "nvidia-smi" not in script
    at = datetime(2026, 12, 5, 11, 0, tzinfo=UTC)
    ok = parse_probe(render_probe(LabHost(name="e-01", model="s60-2x", serial_salt=1)), at)
    assert ok.problems == () and ok.faults == () and ok.observed
    assert ok.sample.gpus is not None and len(ok.sample.gpus) == 2
    gone = render_probe(
        LabHost(name="e-02", model="s60-2x", serial_salt=2, faults=["gcu-missing"]))
    assert (g := parse_probe(gone, at).sample.gpus) is not None and len(g) == 1


def test_gcus_on_the_bus_without_efsmi_fail_closed() -> None:
    """The S60s are on the bus: efsmi missing is the driver not loaded (the host is not
    GPU-less), named with the lspci count."""
    from gpufleet.collect.assemble import assemble_facts
    from gpufleet.collect.bundle import Section
    from gpufleet.lab.fleet import LabHost
    from gpufleet.lab.renderers import render_sections

    sections = render_sections(LabHost(name="h1", model="s60-2x", serial_salt=7))
    sections["efsmi"] = Section("efsmi", "", "sh: 1: efsmi: not found", 127)
    f = assemble_facts(sections, datetime(2026, 12, 3, tzinfo=UTC), "h1")
    assert f.accelerators == () and f.gpus == []
    assert f.accelerator_errors == {
        Vendor("enflame"): "efsmi not found (driver not installed?); "
        "lspci lists 2 1e36 accelerators"}
