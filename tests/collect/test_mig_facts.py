"""Issue 26 item 7: MIG mode and layout as facts, from the real MIG captures (the H100 and H200
MIG bundles of utkuozdemir/nvidia_gpu_exporter, 590.48.01: their ``-q`` report and their
``nvidia-smi -L``), and the lab host that serves them (``h100-mig-8x``)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpufleet.collect.assemble import assemble_facts
from gpufleet.collect.bundle import Section
from gpufleet.collect.nvidia_smi import parse_nvidia_smi_text
from gpufleet.collect.nvidia_smi.listing import (
    LIST_SECTION,
    name_mig_devices,
    parse_mig_list,
    with_mig_profiles,
)
from gpufleet.domain.mig import gpu_layout, host_layout, pinned_layout
from gpufleet.errors import ParseError
from gpufleet.lab.captures import captures_dir, load_exporter_bundle
from gpufleet.lab.fleet import LabHost
from gpufleet.lab.renderers import render_sections

BUNDLES = captures_dir() / "nvidia-smi-csv"


def _bundle(kind: str) -> dict[str, str]:
    return load_exporter_bundle(
        BUNDLES / f"nvidia_gpu_exporter_linux-x86_64__nvidia-{kind}__590.48.01.txt"
    )


def test_h100_mig_profiles_from_the_real_capture() -> None:
    b = _bundle("h100-mig")
    listing = parse_mig_list(b["capabilities :: list (-L)"], "h100:-L")
    assert listing == {0: {0: "3g.40gb", 1: "2g.20gb", 2: "1g.10gb", 3: "1g.10gb"}}
    report = parse_nvidia_smi_text(b["idle :: query (-q)"], "h100:-q")
    problems: list[str] = []
    gpu = with_mig_profiles(report, listing, problems, "h100:-L").gpus[0]
    assert problems == [] and gpu.mig_mode_current is True and gpu.mig_mode_pending is True
    assert [(m.gpu_instance_id, m.compute_instance_id, m.profile, m.memory_total_mib,
             m.sm_count) for m in gpu.mig_devices] == [
        (2, 0, "3g.40gb", 40448, 60), (3, 0, "2g.20gb", 20096, 32),
        (9, 0, "1g.10gb", 9984, 16), (10, 0, "1g.10gb", 9984, 16)]
    assert gpu_layout(gpu) == "1g.10gb:2,2g.20gb:1,3g.40gb:1"


def test_h200_compute_instances_of_one_gpu_instance() -> None:
    """Two compute instances on GPU instance 2 (a 3g.71gb): -L names them 1c.3g.71gb and
    2c.3g.71gb."""
    b = _bundle("h200-mig")
    report = parse_nvidia_smi_text(b["idle :: query (-q)"], "h200:-q")
    section = Section(LIST_SECTION, b["capabilities :: list (-L)"], "", 0)
    gpu = name_mig_devices(report, section, "h200:-L", []).gpus[0]
    assert [(m.gpu_instance_id, m.compute_instance_id, m.profile) for m in gpu.mig_devices] == [
        (2, 0, "1c.3g.71gb"), (2, 1, "2c.3g.71gb"), (3, 0, "2g.35gb"), (9, 0, "1g.18gb"),
        (10, 0, "1g.18gb")]
    assert gpu_layout(gpu) == "1c.3g.71gb:1,1g.18gb:2,2c.3g.71gb:1,2g.35gb:1"


def test_no_listing_leaves_the_layout_unknown_with_a_problem() -> None:
    b = _bundle("h100-mig")
    report = parse_nvidia_smi_text(b["idle :: query (-q)"], "h100:-q")
    problems: list[str] = []
    failed = Section(LIST_SECTION, "", "Failed to initialize NVML", 9)
    gpu = name_mig_devices(report, failed, "h1:nvidia-smi -L", problems).gpus[0]
    assert gpu_layout(gpu) is None and problems == [
        "h1:nvidia-smi -L: exited 9: MIG profiles unknown"]
    # a listing of another count: unnamed, never guessed
    short = {0: {0: "3g.40gb"}}
    assert gpu_layout(with_mig_profiles(report, short, problems, "h1").gpus[0]) is None
    assert "GPU 0 has 4 MIG devices, -L lists 1" in problems[-1]


def test_a_mig_line_outside_a_gpu_is_refused() -> None:
    with pytest.raises(ParseError) as e:
        parse_mig_list("  MIG 1g.10gb     Device  0: (UUID: MIG-0)\n", "h1:nvidia-smi -L")
    assert e.value.line == 1 and "h1:nvidia-smi -L" in str(e.value)


@pytest.mark.parametrize(("model", "layout"), [
    ("h100-mig-8x", "1g.10gb:2,2g.20gb:1,3g.40gb:1"),
    ("h100-8x", "disabled"),  # MIG mode Disabled in the non-MIG H100 capture
    ("a100-8x", "disabled"),
    ("v100s-8x", "unsupported"),  # MIG mode N/A
])
def test_lab_hosts_collect_their_layout(model: str, layout: str) -> None:
    facts = assemble_facts(
        render_sections(LabHost(name="m1", model=model, serial_salt=3)), datetime.now(UTC), "m1"
    )
    got = host_layout(facts)
    assert got["all"] == layout and {got[str(i)] for i in range(8)} == {layout}
    assert pinned_layout(facts) == {"all": layout}  # what --from-host pins
    assert facts.problems == []
