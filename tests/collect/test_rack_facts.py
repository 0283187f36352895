"""Rack-scale facts (issue 27 item 1): platform info, full fabric health and addressing mode
from ``nvidia-smi -q -x``, ``-q`` and ``--query-gpu``, on real captures (NVIDIA/k8s-test-infra
GB200 tray, B200 HGX, H100, A100 and mock-NVML fault captures; nvidia_gpu_exporter 590+
bundles; see the PROVENANCE.md files). Absent is None, never zero."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.collect.nvidia_smi import (
    QUERY_GPU_FIELDS,
    parse_nvidia_smi_text,
    parse_nvidia_smi_xml,
    parse_query_gpu_csv,
)
from gpufleet.domain.facts import Gpu, GpuFabric, GpuPlatform, HostFacts
from gpufleet.lab.captures import load_exporter_bundle

CAPTURED = Path(__file__).resolve().parents[1] / "fixtures" / "captured"
XML = CAPTURED / "nvidia-smi-xml"


def _gpus(name: str) -> list[Gpu]:
    return parse_nvidia_smi_xml((XML / f"k8s-test-infra_{name}.xml").read_text()).gpus


def test_gb200_tray_platform_info_and_fabric() -> None:
    gpus = _gpus("hw-qx-gb200")
    assert len(gpus) == 4
    assert gpus[0].platform == GpuPlatform(
        chassis_serial="1820000000001", slot_number=14, tray_index=4, host_id=1,
        peer_type="Switch Connected", module_id=2, gpu_fabric_guid="0x0000000000000001",
    )
    assert {g.platform.chassis_serial for g in gpus if g.platform} == {"1820000000001"}
    assert len({g.platform.gpu_fabric_guid for g in gpus if g.platform}) == 4
    assert gpus[0].fabric == GpuFabric(
        state="Completed", status="Success", clique_id="2",
        cluster_uuid="00000001-0000-0000-0000-000000000001", health_summary="Healthy",
        bandwidth="Full", route_recovery_in_progress=False, route_unhealthy=False,
        access_timeout_recovery=False, incorrect_configuration=None, partition_assigned=None,
    )
    assert {g.addressing_mode for g in gpus} == {"ATS"}


def test_b200_hgx_is_completed_with_a_zero_cluster() -> None:
    g = _gpus("hw-qx-b200")[0]
    assert g.fabric is not None
    assert (g.fabric.state, g.fabric.clique_id, g.fabric.cluster_uuid) == (
        "Completed", "0", "00000000-0000-0000-0000-000000000000")
    assert g.fabric.access_timeout_recovery is False
    assert g.fabric.bandwidth is None and g.fabric.route_unhealthy is None  # N/A: absent
    # an empty chassis serial and N/A slot/tray are absent, not "" or 0
    assert g.platform == GpuPlatform(host_id=1, peer_type="Switch Connected", module_id=6,
                                     gpu_fabric_guid="0x0000000000000002")


def test_h100_and_a100_report_no_rack_position() -> None:
    h100 = _gpus("hw-qx-h100")[0]
    assert h100.platform == GpuPlatform(module_id=7)
    assert h100.fabric is not None and h100.fabric.health_summary is None  # N/A
    assert h100.addressing_mode == "HMM"
    a100 = _gpus("hw-qx-a100")[0]
    assert a100.fabric is None  # every fabric value N/A (no NVML fabric info before Hopper)
    assert a100.platform == GpuPlatform(module_id=7)
    mock = _gpus("qx-a100-healthy")[0]
    assert mock.platform is None and mock.addressing_mode is None


def test_mock_route_unhealthy_and_lost_gpu() -> None:
    gpu0, gpu1 = _gpus("qx-gb200-fabric-degraded")
    assert gpu0.fabric is not None and gpu0.fabric.route_unhealthy is False
    assert gpu1.fabric is not None
    assert (gpu1.fabric.health_summary, gpu1.fabric.route_unhealthy) == ("Unhealthy", True)
    assert gpu1.fabric.incorrect_configuration is None  # printed "None": nothing incorrect
    _, lost = _gpus("qx-gb200-lost")
    assert lost.error is not None and lost.fabric is None  # "GPU is lost" bodies: no values


def test_text_report_platform_info_and_fabric_health() -> None:
    """``nvidia-smi -q`` 590 (the EDITED R610 label copy of a real H100 report): the text
    labels of Platform Info and the fabric Health block."""
    text = (CAPTURED / "nvidia-smi-q" / ("EDITED_r610-tlimit-specification_nvidia_gpu_exporter_"
                                         "h100-80gb-hbm3_590.48.01_q-idle.txt")).read_text()
    g = parse_nvidia_smi_text(text).gpus[0]
    assert g.platform == GpuPlatform(module_id=7)
    assert g.fabric == GpuFabric(state="Completed", status="Success", clique_id="0",
                                 cluster_uuid="00000000-0000-0000-0000-000000000000")


def test_text_report_of_a_gb200_tray_matches_its_xml() -> None:
    """The text labels of a GB200 tray. No text capture of one exists, so this is an EDITED
    copy of the real H100 text report whose Platform Info and fabric lines carry the values
    of the real GB200 XML capture (labels as nvidia-smi prints them, values replaced)."""
    text = (CAPTURED / "nvidia-smi-q" / ("EDITED_r610-tlimit-specification_nvidia_gpu_exporter_"
                                         "h100-80gb-hbm3_590.48.01_q-idle.txt")).read_text()
    for label, old, new in (
        ("Chassis Serial Number", "N/A", "1820000000001"),
        ("Slot Number", "N/A", "14"), ("Tray Index", "N/A", "4"), ("Host ID", "N/A", "1"),
        ("Peer Type", "N/A", "Switch Connected"),
        ("GPU Fabric GUID", "N/A", "0x0000000000000001"),
        ("CliqueId", "0", "2"),
        ("ClusterUUID", "00000000-0000-0000-0000-000000000000",
         "00000001-0000-0000-0000-000000000001"),
        ("Summary", "N/A", "Healthy"), ("Bandwidth", "N/A", "Full"),
        ("Route Recovery in progress", "N/A", "False"), ("Route Unhealthy", "N/A", "True"),
        ("Access Timeout Recovery", "N/A", "False"),
    ):
        head, sep, tail = text.partition(f"{label} ")
        assert sep, label
        colon = tail.index(":")
        value_end = tail.index("\n")
        assert tail[colon + 1 : value_end].strip() == old, label
        text = head + sep + tail[: colon + 1] + f" {new}" + tail[value_end:]
    g = parse_nvidia_smi_text(text).gpus[0]
    xml = _gpus("hw-qx-gb200")[0]
    assert g.platform == xml.platform.model_copy(update={"module_id": 7})  # type: ignore[union-attr]
    assert g.fabric is not None and g.fabric.route_unhealthy is True
    assert g.fabric.cluster_uuid == "00000001-0000-0000-0000-000000000001"
    assert g.fabric.bandwidth == "Full" and g.fabric.clique_id == "2"


@pytest.mark.parametrize("name", [
    "nvidia_gpu_exporter_linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt",
    "nvidia_gpu_exporter_linux-x86_64__nvidia-geforce-rtx-2080-super__595.71.05.txt",
])
def test_query_gpu_csv_platform_and_fabric_columns(name: str) -> None:
    sections = load_exporter_bundle(CAPTURED / "nvidia-smi-csv" / name)
    g = parse_query_gpu_csv(sections["idle :: query-gpu (csv, what the exporter parses)"])[0]
    assert g.platform is not None
    assert g.platform.chassis_serial is None  # [N/A]
    assert (g.platform.host_id, g.platform.peer_type) == (1, "Direct Connected")
    if "h100" in name:
        assert g.fabric is not None and g.fabric.state == "Completed"
        assert g.fabric.route_unhealthy is None and g.fabric.bandwidth is None
    else:
        assert g.fabric is None and g.addressing_mode == "HMM"


def test_cheap_query_asks_for_the_rack_fields() -> None:
    for field in ("platform.chassis_serial_number", "platform.tray_index",
                  "fabric.health.route_unhealthy", "fabric.health.bandwidth", "addressing_mode"):
        assert field in QUERY_GPU_FIELDS


def test_snapshot_without_rack_fields_still_loads() -> None:
    """Facts stored before these fields existed load with them absent (additive fields)."""
    gpus = _gpus("hw-qx-gb200")
    facts = HostFacts(collected_at="2026-12-01T00:00:00Z", facts_version=3,
                      nvidia_smi={"gpus": [gpus[0].model_dump(mode="json")]})
    stored = facts.model_dump(mode="json")
    gpu = stored["nvidia_smi"]["gpus"][0]
    for key in ("platform", "addressing_mode"):
        del gpu[key]
    for key in ("bandwidth", "route_unhealthy", "partition_assigned"):
        del gpu["fabric"][key]
    old = HostFacts.model_validate(stored)
    assert old.gpus[0].platform is None and old.gpus[0].addressing_mode is None
    assert old.gpus[0].fabric is not None and old.gpus[0].fabric.route_unhealthy is None
    assert HostFacts.model_validate(facts.model_dump(mode="json")) == facts
