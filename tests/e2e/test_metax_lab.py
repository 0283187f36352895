"""MetaX GPU lab hosts through one lifecycle run (issue 28), on SQLite and PostgreSQL: enroll,
collect (the hosts replay the real mx-smi 2.2.9 and ``topo -m`` captures of 8 C500), validate
(a host whose mx-smi lost a GPU is quarantined with a MetaX-specific reason; no MetaX lspci
capture exists: the spec's count judges), labels and exports, the inspection probe.

Fails on main 3f67bc2: no ``c500-8x`` lab model, no MetaX plugin."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from gpufleet.collect.inspect import parse_probe, probe_script
from gpufleet.domain.accelerator_exports import Gres, gres_of
from gpufleet.domain.accelerators import (
    Health,
    Vendor,
    accelerators_of,
    inventories_of,
    inventory_group,
)
from gpufleet.domain.vendors import plugin
from gpufleet.lab.demo import enroll_lab
from gpufleet.lab.fleet import LabHost
from gpufleet.lab.probe import render_probe
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.collect import collect
from gpufleet.service.hosts.validate import validate
from gpufleet.service.hosts.vendor_exports import EXPORTS
from gpufleet.service.views.hosts import show_host


def test_metax_hosts_enroll_collect_validate_and_label(fleet: Fleet, tmp_path: Path) -> None:
    enroll_lab(fleet, tmp_path / "lab", 2, models=["c500-8x"] * 2,
               faults={"gpu-02": ["mx-gpu-missing"]}, now=fleet.now())
    assert {r.host: r.outcome.value for r in collect(fleet).results} == {
        "gpu-01": "ok", "gpu-02": "ok"}
    facts = show_host(fleet, "gpu-01").facts
    assert facts is not None and facts.problems == [] and facts.accelerator_errors == {}
    accs = accelerators_of(facts)
    assert {(a.vendor, a.model, a.health, a.power_limit_w) for a in accs} == {
        (Vendor("metax"), "C500", Health.OK, 350.0)}
    assert [a.bus_id for a in accs][:4] == [
        "0000:0e:00.0", "0000:0f:00.0", "0000:10:00.0", "0000:12:00.0"]
    assert [a.temperature_c for a in accs] == [35, 37, 36, 35, 33, 34, 34, 36]
    # the topology's MetaXLink islands: GPU0-3 and GPU4-7
    assert [sorted(int(ln.peer or -1) for ln in a.links) for a in accs][::4] == [
        [1, 2, 3], [5, 6, 7]]
    lost = show_host(fleet, "gpu-02").facts
    assert lost is not None and lost.problems == [] and len(accelerators_of(lost)) == 7

    verdicts = {v.host: v for v in validate(fleet, collect_first=False).verdicts}
    assert verdicts["gpu-01"].state == "available", verdicts["gpu-01"].reasons
    assert verdicts["gpu-02"].state == "quarantined"
    assert verdicts["gpu-02"].reasons == [
        "gpu_count: metax tool sees 7 accelerators, expected 8"]

    (inv,) = inventories_of(facts)
    exports = plugin(inv.vendor).exports
    assert dict(exports.labels(inv)) == {
        "metax-tech.com/gpu.installed": "true", "metax-tech.com/gpu.product": "MetaX_C500"}
    assert (exports.resource(inv), exports.runtime) == ("metax-tech.com/gpu", "maca")
    assert gres_of([inv], EXPORTS) == [Gres("gpu", "c500", 8, None)]
    assert inventory_group(inv) == "gpu_c500"
    v = inv.versions
    assert (v.driver, v.runtime, v.firmware, v.tool) == ("3.4.4", "3.3.0.15", "1.30.0.0", "2.2.9")


def test_the_inspection_probe_of_a_metax_host_asks_mx_smi() -> None:
    script = probe_script(("/",), vendors=("metax",))
    assert "@@probe metax.mx_smi" in script and "nvidia-smi" not in script
    assert "topo" not in script
    at = datetime(2026, 12, 5, 11, 0, tzinfo=UTC)
    ok = parse_probe(render_probe(LabHost(name="x-01", model="c500-8x", serial_salt=1)), at)
    assert ok.problems == () and ok.faults == () and ok.observed
    assert ok.sample.gpus is not None and len(ok.sample.gpus) == 8
    gone = render_probe(LabHost(name="x-02", model="c500-8x", serial_salt=2,
                                faults=["mx-gpu-missing"]))
    assert (g := parse_probe(gone, at).sample.gpus) is not None and len(g) == 7
    bad = render_probe(LabHost(name="x-03", model="c500-8x", serial_salt=3)).replace(
        "GPU-State", "GPU-Health", 1)
    refused = parse_probe(bad, at)
    assert refused.sample.gpus is None
    assert any("unknown table header" in f.detail for f in refused.sample.failures)
