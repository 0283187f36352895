"""Cambricon MLU lab hosts through one lifecycle run (issue 28), on SQLite and PostgreSQL.

Fails on main 84be469: no ``mlu370-x8-2x`` lab model, no Cambricon plugin."""

from __future__ import annotations

from pathlib import Path

from gpufleet.domain.accelerators import Vendor, accelerators_of, inventories_of
from gpufleet.domain.vendors import plugin
from gpufleet.lab.demo import enroll_lab
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.collect import collect
from gpufleet.service.hosts.validate import validate
from gpufleet.service.views.hosts import show_host


def test_cambricon_hosts_enroll_collect_and_validate(fleet: Fleet, tmp_path: Path) -> None:
    """The Cambricon lab host (cnmon v5.10.13, 2 MLU370-X8) through the same run; a host whose
    cnmon lost a card is quarantined (no MLU lspci capture exists: the spec's count judges)."""
    enroll_lab(fleet, tmp_path / "lab", 2, models=["mlu370-x8-2x"] * 2,
               faults={"gpu-02": ["mlu-missing"]}, now=fleet.now())
    assert {r.host: r.outcome.value for r in collect(fleet).results} == {
        "gpu-01": "ok", "gpu-02": "ok"}
    facts = show_host(fleet, "gpu-01").facts
    assert facts is not None and facts.problems == [] and facts.accelerator_errors == {}
    accs = accelerators_of(facts)
    assert [(a.vendor, a.model, a.bus_id) for a in accs] == [
        (Vendor("cambricon"), "MLU370-X8", "0000:39:00.0"),
        (Vendor("cambricon"), "MLU370-X8", "0000:3d:00.0")]
    verdicts = {v.host: v for v in validate(fleet, collect_first=False).verdicts}
    assert verdicts["gpu-01"].state == "available", verdicts["gpu-01"].reasons
    assert verdicts["gpu-02"].state == "quarantined"
    assert verdicts["gpu-02"].reasons == [
        "gpu_count: cambricon tool sees 1 accelerators, expected 2"]
    (inv,) = inventories_of(facts)
    assert dict(plugin(inv.vendor).exports.labels(inv)) == {
        "Model": "MLU370-X8", "DriverVersion": "v5.10.13"}


def test_the_inspection_probe_of_a_cambricon_host_asks_cnmon() -> None:
    from datetime import UTC, datetime

    from gpufleet.collect.inspect import parse_probe, probe_script
    from gpufleet.lab.fleet import LabHost
    from gpufleet.lab.probe import render_probe

    script = probe_script(("/",), vendors=("cambricon",))
    assert "@@probe cambricon.cnmon" in script and "nvidia-smi" not in script
    at = datetime(2026, 12, 5, 11, 0, tzinfo=UTC)
    ok = parse_probe(render_probe(LabHost(name="m-01", model="mlu370-x8-2x", serial_salt=1)), at)
    assert ok.problems == () and ok.faults == () and ok.observed
    assert ok.sample.gpus is not None and len(ok.sample.gpus) == 2
    gone = render_probe(
        LabHost(name="m-02", model="mlu370-x8-2x", serial_salt=2, faults=["mlu-missing"]))
    assert (g := parse_probe(gone, at).sample.gpus) is not None and len(g) == 1
