"""The multi-node NVLink fabric decision table (issue 27 item 3), row by row, on the real
NVIDIA/k8s-test-infra captures (tests/fixtures/captured/nvidia-smi-xml/PROVENANCE.md).

Rows no capture shows are tested on EDITED copies: :func:`edited` replaces the text of the
named elements of one capture (listed in each test) and nothing else."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from lxml import etree

from gpufleet.collect.nvidia_smi import parse_nvidia_smi_xml
from gpufleet.domain.checks import CHECKS, CheckContext, CheckStatus
from gpufleet.domain.fabric import (
    FabricOutcome,
    TrayPosition,
    gpu_verdict,
    host_fabric,
    partition_id,
)
from gpufleet.domain.facts import FACTS_VERSION, HostFacts
from gpufleet.domain.health import HARDWARE_FAULTS, Fault
from gpufleet.domain.profiles import load_profiles

XML = Path(__file__).resolve().parents[1] / "fixtures" / "captured" / "nvidia-smi-xml"
NOW = datetime(2026, 12, 5, tzinfo=UTC)
GB200 = "hw-qx-gb200"
DOMAIN = "00000001-0000-0000-0000-000000000001"


def edited(name: str, gpus: tuple[int, ...] | None = None, **paths: str) -> str:
    """EDITED copy of capture ``name``: under the listed GPUs (all when None), the element at
    each path (``fabric__state`` = ``fabric/state``) gets the given text."""
    root = etree.fromstring((XML / f"k8s-test-infra_{name}.xml").read_bytes())
    for i, gpu in enumerate(root.findall("gpu")):
        if gpus is not None and i not in gpus:
            continue
        for key, value in paths.items():
            elem = gpu.find(key.replace("__", "/"))
            assert elem is not None, key
            elem.text = value
    return etree.tostring(root, encoding="unicode")


def facts(name: str, text: str | None = None) -> HostFacts:
    text = text if text is not None else (XML / f"k8s-test-infra_{name}.xml").read_text()
    return HostFacts(collected_at=NOW, facts_version=FACTS_VERSION,
                     nvidia_smi=parse_nvidia_smi_xml(text))


def check(f: HostFacts, **params: Any) -> tuple[CheckStatus, Fault | None, dict[str, Any]]:
    r = CHECKS["nvl_fabric"](f, CheckContext(now=NOW), params)
    return r.status, r.fault, r.evidence


NVL_DOMAIN = dict(load_profiles()["training-nvl-domain"].checks["nvl_fabric"])


# ------------------------------------------------------------------------- the table


def test_healthy_gb200_tray_is_a_member_with_rack_facts() -> None:
    hf = host_fabric(facts(GB200))
    assert hf.outcome is FabricOutcome.OK and hf.member
    assert (hf.rack_id, hf.nvl_domain, hf.partition) == ("1820000000001", DOMAIN, f"{DOMAIN}.2")
    assert hf.tray == TrayPosition(slot=14, tray_index=4, host_id=1)
    status, fault, ev = check(facts(GB200), **NVL_DOMAIN)
    assert (status, fault) == (CheckStatus.PASS, None)
    assert ev["partition"] == f"{DOMAIN}.2" and ev["tray"] == [14, 4, 1]


@pytest.mark.parametrize("name,reason", [
    ("hw-qx-a100", "not_supported"),  # every fabric value N/A
    ("hw-qx-b200", "no_cluster"),  # Completed/Success, all-zero clusterUuid
    ("hw-qx-h100", "no_cluster"),
])
def test_not_a_member_is_a_fact_not_a_fault(name: str, reason: str) -> None:
    hf = host_fabric(facts(name))
    assert hf.outcome is FabricOutcome.NOT_MEMBER and hf.reasons == (reason,)
    assert hf.nvl_domain is None and hf.partition is None and not hf.member
    assert hf.rack_id is None and hf.tray is None  # the B200 prints a host id, but no rack
    assert check(facts(name))[:2] == (CheckStatus.SKIP, None)
    # a profile that needs the NVLink domain refuses it (still no fault: a fact)
    assert check(facts(name), **NVL_DOMAIN)[:2] == (CheckStatus.FAIL, None)


@pytest.mark.parametrize("state", ["Not Started", "In Progress"])
def test_fabric_still_registering_fails_after_the_boot_grace(state: str) -> None:
    """EDITED: the GB200 capture with every GPU's fabric/state replaced by ``state``."""
    f = facts(GB200, edited(GB200, fabric__state=state))
    gpu = f.gpus[0]
    assert gpu_verdict(gpu, settled_s=120).outcome is FabricOutcome.PENDING
    late = gpu_verdict(gpu, settled_s=900)
    assert (late.outcome, late.reason) == (FabricOutcome.FAILS, "not_ready")
    assert gpu_verdict(gpu).outcome is FabricOutcome.FAILS  # settle time unknown: fail closed
    assert check(f)[:2] == (CheckStatus.FAIL, Fault.NVL_FABRIC_FAILED)


def test_completed_with_insufficient_resources_fails() -> None:
    """EDITED: the GB200 capture with GPU 1's fabric/status = "Insufficient Resources"."""
    f = facts(GB200, edited(GB200, (1,), fabric__status="Insufficient Resources"))
    hf = host_fabric(f)
    assert (hf.outcome, hf.reasons, hf.rack_scoped) == (FabricOutcome.FAILS, ("status",), False)
    assert "Insufficient Resources" in hf.message
    assert check(f)[:2] == (CheckStatus.FAIL, Fault.NVL_FABRIC_FAILED)


def test_cluster_without_a_partition_fails() -> None:
    """Real mock-NVML capture: Completed/Success, clusterUuid ...0001, cliqueId 0."""
    hf = host_fabric(facts("qx-gb200-healthy"))
    assert (hf.outcome, hf.reasons) == (FabricOutcome.FAILS, ("no_partition",))
    assert hf.nvl_domain == "00000000-0000-0000-0000-000000000001" and hf.partition is None
    assert check(facts("qx-gb200-healthy"))[:2] == (CheckStatus.FAIL, Fault.NVL_FABRIC_FAILED)


@pytest.mark.parametrize("edit", [
    {"fabric__health__summary": "Limited Capacity"},
    {"fabric__health__bandwidth": "Degraded"},
])
def test_limited_capacity_or_degraded_bandwidth_is_restricted(edit: dict[str, str]) -> None:
    """EDITED: the GB200 capture with GPU 2's health summary or bandwidth replaced."""
    f = facts(GB200, edited(GB200, (2,), **edit))
    hf = host_fabric(f)
    assert (hf.outcome, hf.reasons) == (FabricOutcome.RESTRICTED, ("degraded",))
    assert hf.partition == f"{DOMAIN}.2"  # still in its domain
    assert check(f)[:2] == (CheckStatus.WARN, None)  # tolerated by default ...
    # ... not where the whole domain must be healthy
    assert check(f, **NVL_DOMAIN)[:2] == (CheckStatus.FAIL, Fault.NVL_FABRIC_FAILED)


def test_route_unhealthy_fails_and_is_rack_scoped() -> None:
    """Real mock-NVML capture: GPU 1 summary Unhealthy, route_unhealthy True."""
    f = facts("qx-gb200-fabric-degraded")
    v0, v1 = (gpu_verdict(g) for g in f.gpus)
    assert (v0.outcome, v0.reason, v0.rack_scoped) == (
        FabricOutcome.FAILS, "no_partition", False)  # the mock's cliqueId 0
    assert (v1.outcome, v1.reason, v1.rack_scoped) == (FabricOutcome.FAILS, "unhealthy", True)
    assert "route_unhealthy True" in v1.message
    hf = host_fabric(f)
    assert hf.rack_scoped and "unhealthy" in hf.reasons
    status, fault, ev = check(f)
    assert (status, fault, ev["rack_scoped"]) == (CheckStatus.FAIL, Fault.NVL_FABRIC_RACK, True)
    assert fault not in HARDWARE_FAULTS  # a rack finding, not a per-host quarantine


@pytest.mark.parametrize("edit,says", [
    ({"fabric__health__summary": "Unhealthy"}, "health Unhealthy"),
    ({"fabric__health__route_recovery_in_progress": "True"}, "route_recovery_in_progress"),
    ({"fabric__health__access_timeout_recovery": "True"}, "access_timeout_recovery"),
    ({"fabric__health__incorrect_configuration": "Incorrect Topology"}, "incorrect config"),
])
def test_every_rack_fault_flag_fails_rack_scoped(edit: dict[str, str], says: str) -> None:
    """EDITED: the GB200 capture with GPU 0's health element replaced."""
    f = facts(GB200, edited(GB200, (0,), **edit))
    v = gpu_verdict(f.gpus[0])
    assert (v.outcome, v.reason, v.rack_scoped) == (FabricOutcome.FAILS, "unhealthy", True)
    assert says in v.message
    assert check(f)[:2] == (CheckStatus.FAIL, Fault.NVL_FABRIC_RACK)


@pytest.mark.parametrize("edit", [
    {"fabric__cliqueId": "3"},
    {"fabric__clusterUuid": "00000002-0000-0000-0000-000000000002"},
])
def test_gpus_of_one_host_disagreeing_fail_as_a_split_host(edit: dict[str, str]) -> None:
    """EDITED: the GB200 capture with GPU 3's cliqueId or clusterUuid replaced."""
    f = facts(GB200, edited(GB200, (3,), **edit))
    hf = host_fabric(f)
    assert hf.split and hf.outcome is FabricOutcome.FAILS
    assert hf.reasons == ("fabric_split_host",)
    assert hf.nvl_domain is None and hf.partition is None
    assert check(f)[:2] == (CheckStatus.FAIL, Fault.FABRIC_SPLIT_HOST)


def test_a_lost_gpu_fails_closed() -> None:
    """Real mock-NVML capture: GPU 1 'GPU is lost' (no fabric values at all)."""
    hf = host_fabric(facts("qx-gb200-lost"))
    assert hf.outcome is FabricOutcome.FAILS and "gpu_error" in hf.reasons


def test_every_capture_gets_a_row() -> None:
    expected = {
        "hw-qx-a100": FabricOutcome.NOT_MEMBER, "hw-qx-b200": FabricOutcome.NOT_MEMBER,
        "hw-qx-gb200": FabricOutcome.OK, "hw-qx-h100": FabricOutcome.NOT_MEMBER,
        "qx-a100-healthy": FabricOutcome.NOT_MEMBER,
        "qx-gb200-ecc-injected": FabricOutcome.FAILS,  # cliqueId 0
        "qx-gb200-fabric-degraded": FabricOutcome.FAILS,
        "qx-gb200-healthy": FabricOutcome.FAILS,  # cliqueId 0
        "qx-gb200-lost": FabricOutcome.FAILS,
        "qx-gb200-throttle-counters": FabricOutcome.FAILS,  # cliqueId 0
    }
    found = {p.name.removeprefix("k8s-test-infra_").removesuffix(".xml")
             for p in XML.glob("k8s-test-infra_*.xml")}
    assert found == set(expected)
    assert {n: host_fabric(facts(n)).outcome for n in sorted(found)} == expected


def test_partition_id_in_gpu_feature_discovery_format() -> None:
    assert partition_id(DOMAIN, "2") == f"{DOMAIN}.2"
    assert partition_id("00000000-0000-0000-0000-000000000000", "2") is None
    assert partition_id(DOMAIN, "0") is None


def test_training_nvl_domain_profile_extends_multinode() -> None:
    profiles = load_profiles()
    nvl = profiles["training-nvl-domain"]
    assert NVL_DOMAIN == {"require_member": True, "tolerate_degraded": False}
    assert set(profiles["training-multinode"].checks) <= set(nvl.checks)
    assert dict(profiles["training-multinode"].checks["nvl_fabric"]) == {}
    assert profiles["test"].checks["nvl_fabric"].get("advisory") is True
