from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

import pytest

from gpufleet.domain.checks import (
    CHECK_PARAMS,
    CHECKS,
    HARDWARE_FAULTS,
    ActiveEvidence,
    CheckContext,
    CheckResult,
    CheckStatus,
)
from gpufleet.domain.evidence import (
    DcgmDiagResult,
    GpuBurnGpu,
    GpuBurnResult,
    NcclMeasurement,
    NcclResult,
    NcclRow,
)
from gpufleet.domain.facts import (
    EccErrors,
    GpuNvlinks,
    HostFacts,
    NvlinkLink,
    NvlinkStatus,
    RemappedRows,
    RetiredPages,
    TopoMatrix,
    XidEvent,
)
from gpufleet.domain.health import Fault
from gpufleet.domain.spec import Baseline, ExpectedSpec
from gpufleet.domain.xid import XidPolicy
from gpufleet.testing import NOW

Facts = Callable[..., HostFacts]
P, W, F, SK = CheckStatus.PASS, CheckStatus.WARN, CheckStatus.FAIL, CheckStatus.SKIP


def run(
    name: str,
    facts: HostFacts,
    spec: ExpectedSpec,
    baseline: Baseline | None,
    params: Mapping[str, Any] | None = None,
    *,
    now: datetime = NOW,
    xid_policy: XidPolicy | None = None,
    evidence: ActiveEvidence | None = None,
) -> CheckResult:
    ctx = CheckContext(
        now=now, spec=spec, baseline=baseline, evidence=evidence or ActiveEvidence(),
        xid_policy=xid_policy or XidPolicy.load_default(),
    )
    result = CHECKS[name](facts, ctx, params or {})
    assert result.name == name
    return result


def test_registry_and_hardware_faults() -> None:
    assert {
        "gpu_count", "single_gpu_model", "gpu_model", "driver_version", "cuda_version",
        "kernel_version", "vbios", "os_image", "ecc_enabled", "ecc_uncorrectable", "row_remap",
        "retired_pages", "xid", "nvlink", "persistence_mode", "fabricmanager", "ib_ports",
        "nouveau_not_loaded", "sysctls", "pcie_link", "dcgm_diag", "nccl", "gpu_burn",
    } <= set(CHECKS)
    assert set(CHECK_PARAMS) == set(CHECKS)
    assert {
        Fault.GPU_LOST, Fault.ECC_UNCORRECTABLE, Fault.ROW_REMAP_FAILURE, Fault.FATAL_XID,
        Fault.ACCELERATOR_ALARM,  # an Ascend NPU in health Alarm (issue 15)
    } == HARDWARE_FAULTS


def test_clean_host_passes_everything_it_can(
    facts: HostFacts, spec: ExpectedSpec, baseline: Baseline, now: datetime
) -> None:
    for name, fn in CHECKS.items():
        result = fn(facts, CheckContext(now=now, spec=spec, baseline=baseline), {})
        assert result.status in (P, SK), (name, result.message)
        assert result.fault is None


# ---------------------------------------------------------------------------- gpu_count


def test_gpu_count_gpu_missing_from_driver_but_on_pci_bus(
    facts_factory: Facts, spec: ExpectedSpec
) -> None:
    r = run("gpu_count", facts_factory(hidden_gpus={4}), spec, None)
    assert (r.status, r.fault) == (F, Fault.GPU_LOST)
    assert "7 of 8" in r.message and "0000:9a:00.0" in r.message
    assert r.evidence["missing"] == ["0000:9a:00.0"]


def test_gpu_count_gpu_gone_from_bus_and_driver(facts_factory: Facts, spec: ExpectedSpec) -> None:
    f = facts_factory(hidden_gpus={7})
    f = f.model_copy(update={"pci_devices": [d for d in f.pci_devices if d.address[5:7] != "db"]})
    r = run("gpu_count", f, spec, None)
    assert (r.status, r.fault) == (F, Fault.GPU_LOST)
    assert r.message == "driver sees 7 GPUs, expected 8"


def test_gpu_count_nvidia_smi_failed_driver_not_loaded(
    facts_factory: Facts, spec: ExpectedSpec
) -> None:
    err = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver"
    r = run("gpu_count", facts_factory(nvidia_smi=None, nvidia_smi_error=err), spec, None)
    assert (r.status, r.fault) == (F, Fault.DRIVER_NOT_LOADED)
    assert "8 NVIDIA GPUs on the PCI bus: driver not loaded" in r.message


def test_gpu_count_nvidia_smi_failed_gpu_lost(facts_factory: Facts, spec: ExpectedSpec) -> None:
    err = "Unable to determine the device handle for GPU0000:9A:00.0: Unknown Error"
    r = run("gpu_count", facts_factory(nvidia_smi=None, nvidia_smi_error=err), spec, None)
    assert (r.status, r.fault) == (F, Fault.GPU_LOST)


def test_gpu_count_more_gpus_than_expected_is_not_a_hardware_fault(
    facts: HostFacts,
) -> None:
    r = run("gpu_count", facts, ExpectedSpec(gpu_count=4), None)
    assert (r.status, r.fault) == (F, None)


def test_gpu_count_without_lspci_or_spec_fails_closed(facts: HostFacts) -> None:
    # lspci not collected (None) and no expected count: nothing to compare the driver with.
    f = facts.model_copy(update={"pci_devices": None})
    r = run("gpu_count", f, ExpectedSpec(), None)
    assert (r.status, r.fault) == (F, None)
    assert "lspci was not collected and no GPU count is expected" in r.message
    # With an expected count the driver's 8 GPUs can be checked.
    r = run("gpu_count", f, ExpectedSpec(gpu_count=8), None)
    assert r.status is P and r.message == "8 GPUs"


def test_gpu_count_spec_silent_expects_what_lspci_shows(facts: HostFacts) -> None:
    r = run("gpu_count", facts, ExpectedSpec(), None)
    assert r.status is P and r.evidence["expected_from"] == "lspci"
    # One GPU gone from the driver AND the bus is invisible without a spec; one gone from
    # the driver only is caught by the bus.
    f = facts.model_copy(update={"pci_devices": [d for d in facts.pci_devices or []
                                                  if d.address != "0000:db:00.0"]})
    assert run("gpu_count", f, ExpectedSpec(), None).status is F


def test_gpu_count_no_gpus_no_expectation_fails(facts_factory: Facts) -> None:
    # A GPU-less machine (no driver, no NVIDIA device on the bus) is never usable for a
    # GPU profile, even when the inventory expects nothing.
    f = facts_factory(nvidia_smi=None, nvidia_smi_error="nvidia-smi: command not found",
                      pci_devices=[])
    r = run("gpu_count", f, ExpectedSpec(), None)
    assert (r.status, r.fault) == (F, None)
    assert "no NVIDIA GPU on the PCI bus" in r.message
    assert run("gpu_count", f, ExpectedSpec(gpu_count=8), None).status is F


# ------------------------------------------------------------------------- GPU model


def test_single_gpu_model(facts_factory: Facts, spec: ExpectedSpec) -> None:
    mixed = facts_factory(gpu={3: {"product_name": "NVIDIA A100-SXM4-80GB"}})
    r = run("single_gpu_model", mixed, spec, None)
    assert r.status is F and "7x NVIDIA H100 80GB HBM3, 1x NVIDIA A100-SXM4-80GB" in r.message
    assert run("single_gpu_model", facts_factory(), spec, None).status is P


def test_gpu_model(facts_factory: Facts) -> None:
    f = facts_factory(gpu={3: {"product_name": "NVIDIA A100-SXM4-80GB"}})
    r = run("gpu_model", f, ExpectedSpec(gpu_model="h100"), None)
    assert r.status is F and r.message.startswith("GPU 3: NVIDIA A100-SXM4-80GB")
    assert run("gpu_model", f, ExpectedSpec(), None).status is SK


def test_gpu_memory(facts_factory: Facts, spec: ExpectedSpec) -> None:
    r = run("gpu_memory", facts_factory(gpu={2: {"memory_total_mib": 40960}}), spec, None)
    assert r.status is F and "GPU 2: 40960 MiB" in r.message
    assert run("gpu_memory", facts_factory(all_gpus={"memory_total_mib": 81920}),
               spec, None).status is P


# --------------------------------------------------------------------------- drift


def test_driver_drift_fails_without_a_fault(
    facts_factory: Facts, spec: ExpectedSpec, baseline: Baseline
) -> None:
    r = run("driver_version", facts_factory(smi={"driver_version": "535.154.05"}),
            spec, baseline)
    assert (r.status, r.fault) == (F, None)
    assert "driver 535.154.05, expected 550.90.07" in r.message
    assert r.evidence["drift"] == [
        {"field": "driver", "expected": "550.90.07", "actual": "535.154.05"}
    ]


@pytest.mark.parametrize(
    ("name", "change"),
    [
        ("cuda_version", {"smi": {"cuda_version": "12.2"}}),
        ("kernel_version", {"kernel": "6.8.0-40-generic"}),
        ("vbios", {"gpu": {5: {"vbios_version": "96.00.74.00.0B"}}}),
        ("sysctls", {"sysctls": {"vm.swappiness": "60"}}),
    ],
)
def test_drift_checks_fail_on_mismatch(
    facts_factory: Facts, spec: ExpectedSpec, baseline: Baseline,
    name: str, change: dict[str, Any],
) -> None:
    r = run(name, facts_factory(**change), spec, baseline)
    assert (r.status, r.fault) == (F, None), r.message


def test_vbios_message_names_gpus(facts_factory: Facts, baseline: Baseline) -> None:
    f = facts_factory(gpu={5: {"vbios_version": "96.00.74.00.0B"},
                           6: {"vbios_version": "96.00.74.00.0B"}})
    r = run("vbios", f, ExpectedSpec(), baseline)
    assert "GPU 5, 6: 96.00.74.00.0B" in r.message


def test_os_image_matches_pretty_name_or_id_version(
    facts: HostFacts, spec: ExpectedSpec, baseline: Baseline
) -> None:
    assert run("os_image", facts, spec, baseline).status is P
    by_id = baseline.model_copy(update={"os_image": "ubuntu 22.04"})
    assert run("os_image", facts, spec, by_id).status is P
    other = baseline.model_copy(update={"os_image": "Rocky Linux 9.4"})
    r = run("os_image", facts, spec, other)
    assert r.status is F and "Ubuntu 22.04.4 LTS" in r.message


def test_drift_checks_skip_without_baseline_or_pin(
    facts: HostFacts, spec: ExpectedSpec
) -> None:
    assert run("driver_version", facts, spec, None).status is SK
    unpinned = Baseline(name="loose")
    for name in ("driver_version", "cuda_version", "kernel_version", "vbios", "os_image",
                 "sysctls"):
        r = run(name, facts, spec, unpinned)
        assert r.status is SK and "does not pin" in r.message, name


def test_drift_skips_when_fact_not_collected(
    facts_factory: Facts, spec: ExpectedSpec, baseline: Baseline
) -> None:
    f = facts_factory(nvidia_smi=None, nvidia_smi_error="boom", sysctls={})
    assert run("driver_version", f, spec, baseline).status is SK
    assert run("sysctls", f, spec, baseline).status is SK


def test_missing_sysctl_is_drift(facts_factory: Facts, baseline: Baseline) -> None:
    r = run("sysctls", facts_factory(sysctls={"vm.swappiness": "10"}), ExpectedSpec(), baseline)
    assert r.status is F and "sysctl.net.ipv4.tcp_rmem unset" in r.message


# ------------------------------------------------------------------- ECC and memory


def test_ecc_enabled(facts_factory: Facts, spec: ExpectedSpec) -> None:
    off = facts_factory(gpu={1: {"ecc_mode_current": False, "ecc_mode_pending": False}})
    r = run("ecc_enabled", off, spec, None)
    assert r.status is F and r.message == "ECC disabled on GPU 1"
    later = facts_factory(gpu={1: {"ecc_mode_current": False, "ecc_mode_pending": True}})
    assert "after the next reboot" in run("ecc_enabled", later, spec, None).message
    turning_off = facts_factory(gpu={1: {"ecc_mode_pending": False}})
    assert run("ecc_enabled", turning_off, spec, None).status is W
    na = facts_factory(all_gpus={"ecc_mode_current": None, "ecc_mode_pending": None})
    assert run("ecc_enabled", na, spec, None).status is SK


def test_ecc_uncorrectable_volatile_fails(facts_factory: Facts, spec: ExpectedSpec) -> None:
    f = facts_factory(gpu={2: {"ecc_volatile": EccErrors(correctable=0, uncorrectable=2),
                               "ecc_aggregate": EccErrors(correctable=0, uncorrectable=2)}})
    r = run("ecc_uncorrectable", f, spec, None)
    assert (r.status, r.fault) == (F, Fault.ECC_UNCORRECTABLE)
    assert "GPU 2: 2" in r.message


def test_ecc_uncorrectable_aggregate_history_warns_unless_threshold(
    facts_factory: Facts, spec: ExpectedSpec
) -> None:
    f = facts_factory(gpu={2: {"ecc_aggregate": EccErrors(correctable=0, uncorrectable=3)}})
    r = run("ecc_uncorrectable", f, spec, None)
    assert (r.status, r.fault) == (W, None)
    r = run("ecc_uncorrectable", f, spec, None, {"aggregate_threshold": 3})
    assert (r.status, r.fault) == (F, Fault.ECC_UNCORRECTABLE)
    none = facts_factory(all_gpus={"ecc_volatile": None, "ecc_aggregate": None})
    assert run("ecc_uncorrectable", none, spec, None).status is SK


def test_row_remap(facts_factory: Facts, spec: ExpectedSpec) -> None:
    pending = facts_factory(gpu={0: {"remapped_rows": RemappedRows(
        correctable=0, uncorrectable=1, pending=True, failure=False)}})
    r = run("row_remap", pending, spec, None)
    assert (r.status, r.fault) == (W, None)
    assert r.message == "row remapping pending on GPU 0: needs GPU reset"
    failed = facts_factory(gpu={6: {"remapped_rows": RemappedRows(
        correctable=0, uncorrectable=8, pending=False, failure=True)}})
    r = run("row_remap", failed, spec, None)
    assert (r.status, r.fault) == (F, Fault.ROW_REMAP_FAILURE)
    assert r.evidence["uncorrectable_rows"][6] == 8
    pre_ampere = facts_factory(all_gpus={"remapped_rows": None})
    assert run("row_remap", pre_ampere, spec, None).status is SK


def test_retired_pages(facts_factory: Facts, spec: ExpectedSpec) -> None:
    def pages(sbe: int, dbe: int, pending: bool = False) -> HostFacts:
        return facts_factory(gpu={3: {"retired_pages": RetiredPages(
            single_bit=sbe, double_bit=dbe, pending=pending)}})

    assert run("retired_pages", pages(10, 2), spec, None).status is P
    r = run("retired_pages", pages(50, 10), spec, None)
    assert (r.status, r.fault) == (F, Fault.RETIRED_PAGES_LIMIT)
    assert run("retired_pages", pages(50, 10), spec, None, {"threshold": 64}).status is P
    assert run("retired_pages", pages(1, 0, pending=True), spec, None).status is W
    assert run("retired_pages", facts_factory(), spec, None).status is SK


# ------------------------------------------------------------------------------ Xid


def xid(code: int, when: datetime | None, addr: str = "PCI:0000:9a:00") -> XidEvent:
    return XidEvent(code=code, pci_address=addr, time=when,
                    message=f"NVRM: Xid ({addr}): {code}, pid=1234")


def test_fatal_xid_fails(facts_factory: Facts, spec: ExpectedSpec, now: datetime) -> None:
    f = facts_factory(xids=[xid(79, now - timedelta(hours=1))])
    r = run("xid", f, spec, None, now=now)
    assert (r.status, r.fault) == (F, Fault.FATAL_XID)
    assert "Xid 79 (GPU_HAS_FALLEN_OFF_THE_BUS, RESTART_BM) x1 on PCI:0000:9a:00" in r.message
    assert r.evidence["fatal"] == [79]


def test_nonfatal_and_unknown_xids_warn(
    facts_factory: Facts, spec: ExpectedSpec, now: datetime
) -> None:
    f = facts_factory(xids=[xid(13, now), xid(13, now), xid(999, now)])
    r = run("xid", f, spec, None, now=now)
    assert (r.status, r.fault) == (W, None)
    assert "GR_EXCEPTION" in r.message and "x2" in r.message and "unknown Xid 999" in r.message
    assert r.evidence["unknown"] == [999] and r.evidence["nonfatal"] == [13]


def test_xid_window(facts_factory: Facts, spec: ExpectedSpec, now: datetime) -> None:
    old = facts_factory(xids=[xid(79, now - timedelta(hours=30))])
    r = run("xid", old, spec, None, now=now)
    assert r.status is P and r.evidence["ignored_older"] == 1
    assert run("xid", old, spec, None, {"window_hours": 48}, now=now).status is F
    # No timestamp: from the current boot's log, counted.
    undated = facts_factory(xids=[xid(79, None)])
    assert run("xid", undated, spec, None, now=now).status is F
    # Naive timestamps are read as UTC rather than crash.
    naive = facts_factory(xids=[xid(79, (now - timedelta(hours=1)).replace(tzinfo=None))])
    assert run("xid", naive, spec, None, now=now).status is F


def test_xid_policy_param(facts_factory: Facts, spec: ExpectedSpec, now: datetime) -> None:
    f = facts_factory(xids=[xid(109, now)])
    assert run("xid", f, spec, None, now=now).status is F
    lenient = XidPolicy.load_default().merged({109: False})
    assert run("xid", f, spec, None, xid_policy=lenient, now=now).status is W


# --------------------------------------------------------------------------- NVLink


def nvlinks(active: dict[int, int], total: int = 18) -> NvlinkStatus:
    return NvlinkStatus(gpus=[
        GpuNvlinks(gpu_index=g, links=[NvlinkLink(link=n, active=n < a) for n in range(total)])
        for g, a in active.items()
    ])


def test_nvlink_inactive_link_fails(facts_factory: Facts, spec: ExpectedSpec) -> None:
    f = facts_factory(nvlink=nvlinks({i: 18 if i != 2 else 16 for i in range(8)}))
    r = run("nvlink", f, spec, None)
    assert (r.status, r.fault) == (F, Fault.NVLINK_DOWN)
    assert "GPU 2 link 16, 17 inactive" in r.message
    assert "GPU 2 has 16 active links, expected 18" in r.message


def test_nvlink_count_below_expected(facts_factory: Facts) -> None:
    f = facts_factory(nvlink=nvlinks(dict.fromkeys(range(8), 12), total=12))
    r = run("nvlink", f, ExpectedSpec(nvlink_per_gpu=18), None)
    assert r.status is F and "has 12 active links" in r.message


def test_nvlink_topology_pairs(facts: HostFacts, spec: ExpectedSpec) -> None:
    assert facts.topology is not None
    links = {a: dict(row) for a, row in facts.topology.links.items()}
    links["GPU0"]["GPU5"] = links["GPU5"]["GPU0"] = "SYS"
    f = facts.model_copy(update={"topology": TopoMatrix(devices=facts.topology.devices,
                                                        links=links)})
    r = run("nvlink", f, spec, None)
    assert r.status is F and "GPU0-GPU5 SYS" in r.message
    # Explicit pair_link param wins over the NVSwitch default.
    assert run("nvlink", facts, spec, None, {"pair_link": "NV12"}).status is F


def test_nvlink_skip_and_unsupported(facts_factory: Facts, spec: ExpectedSpec) -> None:
    pcie = facts_factory(nvlink=NvlinkStatus(gpus=[GpuNvlinks(gpu_index=0)]), topology=None)
    assert run("nvlink", pcie, ExpectedSpec(), None).status is SK
    mig = facts_factory(nvlink=NvlinkStatus(supported=False, message="MIG mode"))
    assert run("nvlink", mig, ExpectedSpec(), None).status is SK
    r = run("nvlink", mig, spec, None)
    assert r.status is F and "MIG mode" in r.message
    assert run("nvlink", facts_factory(nvlink=None), spec, None).status is F


def test_fabricmanager(facts_factory: Facts, spec: ExpectedSpec) -> None:
    assert run("fabricmanager", facts_factory(), spec, None).status is P
    r = run("fabricmanager", facts_factory(fabricmanager_active=False), spec, None)
    assert (r.status, r.fault) == (F, Fault.FABRICMANAGER_DOWN)
    assert run("fabricmanager", facts_factory(fabricmanager_active=None), spec, None).status is F
    no_switch = spec.model_copy(update={"nvswitch": False})
    assert run("fabricmanager", facts_factory(fabricmanager_active=False),
               no_switch, None).status is SK


# ------------------------------------------------------------------------- IB / RoCE


def test_ib_port_down_fails_and_is_named(
    facts_factory: Facts, port_factory: Callable[..., Any], spec: ExpectedSpec
) -> None:
    ports = [port_factory(f"mlx5_{i}", f"0x{i}") for i in range(4)]
    ports[1] = port_factory("mlx5_1", "0x1", state="Down", physical_state="Polling",
                            rate_gbps=10)
    r = run("ib_ports", facts_factory(ib_ports=ports), spec, None)
    assert (r.status, r.fault) == (F, Fault.IB_DOWN)
    assert r.fault not in HARDWARE_FAULTS
    assert r.message == (
        "3 of 4 IB/RoCE ports up at >= 400 Gb/s, need 4; down: mlx5_1/1 (Down/Polling 10 Gb/s)"
    )


def test_ib_port_slow_does_not_count(
    facts_factory: Facts, port_factory: Callable[..., Any], spec: ExpectedSpec
) -> None:
    ports = [port_factory(f"mlx5_{i}", f"0x{i}", rate_gbps=200 if i == 0 else 400)
             for i in range(4)]
    r = run("ib_ports", facts_factory(ib_ports=ports), spec, None)
    assert r.status is F and "mlx5_0/1 (Active/LinkUp 200 Gb/s below rate)" in r.message


def test_ib_extra_port_down_warns(
    facts_factory: Facts, port_factory: Callable[..., Any], spec: ExpectedSpec
) -> None:
    ports = [port_factory(f"mlx5_{i}", f"0x{i}") for i in range(4)]
    ports.append(port_factory("mlx5_4", "0x4", state="Down", physical_state="Disabled"))
    assert run("ib_ports", facts_factory(ib_ports=ports), spec, None).status is W


def test_roce_uses_ethernet_ports_only(
    facts_factory: Facts, port_factory: Callable[..., Any]
) -> None:
    ports = [port_factory(f"mlx5_{i}", f"0x{i}", link_layer="Ethernet", rate_gbps=200)
             for i in range(2)]
    roce = ExpectedSpec(fabric="roce", ib_ports=2, ib_rate_gbps=200)
    assert run("ib_ports", facts_factory(ib_ports=ports), roce, None).status is P
    ib = ExpectedSpec(fabric="ib", ib_ports=2)
    assert run("ib_ports", facts_factory(ib_ports=ports), ib, None).status is F
    either = ExpectedSpec(ib_ports=2)
    assert run("ib_ports", facts_factory(ib_ports=ports), either, None).status is P


def test_ib_ports_skip_and_params(facts: HostFacts) -> None:
    assert run("ib_ports", facts, ExpectedSpec(), None).status is SK
    assert run("ib_ports", facts, ExpectedSpec(fabric="none", ib_ports=4), None).status is SK
    assert run("ib_ports", facts, ExpectedSpec(), None, {"min_ports": 5}).status is F


# ----------------------------------------------------------------- hygiene checks


def test_persistence_mode(facts_factory: Facts, spec: ExpectedSpec) -> None:
    r = run("persistence_mode", facts_factory(gpu={4: {"persistence_mode": False}}), spec, None)
    assert r.status is F and r.message == "persistence mode off on GPU 4"
    assert run("persistence_mode", facts_factory(all_gpus={"persistence_mode": None}),
               spec, None).status is SK


def test_nouveau(facts_factory: Facts, spec: ExpectedSpec) -> None:
    assert run("nouveau_not_loaded", facts_factory(modules=["nouveau", "drm"]),
               spec, None).status is F
    assert run("nouveau_not_loaded", facts_factory(modules=[]), spec, None).status is SK


def test_pcie_link(facts_factory: Facts, spec: ExpectedSpec) -> None:
    narrow = facts_factory(gpu={6: {"pcie_width_current": 8}})
    r = run("pcie_link", narrow, spec, None)
    assert (r.status, r.fault) == (F, Fault.PCIE_DEGRADED)
    assert r.message == "GPU 6 x8 < x16"
    old_gen = facts_factory(gpu={1: {"pcie_gen_max": 4}})
    assert run("pcie_link", old_gen, spec, None).message == "GPU 1 gen 4 < 5"
    # Current generation drops at idle: not a failure.
    idle = facts_factory(all_gpus={"pcie_gen_current": 1})
    assert run("pcie_link", idle, spec, None).status is P
    assert run("pcie_link", narrow, ExpectedSpec(), None).status is SK


# ------------------------------------------------------------------ evidence checks


def test_evidence_checks_skip_without_results(facts: HostFacts, spec: ExpectedSpec) -> None:
    for name in ("dcgm_diag", "nccl", "gpu_burn"):
        assert run(name, facts, spec, None, evidence=ActiveEvidence()).status is SK
        assert run(name, facts, spec, None, {"require": True}).status is F


def _nccl(avg: float | None, wrong: int = 0) -> NcclResult:
    half = NcclMeasurement(time_us=10.0, algbw_gbps=100.0, busbw_gbps=175.0, wrong=wrong)
    row = NcclRow(size_bytes=8 << 30, count=1 << 31, dtype="float", redop="sum",
                  out_of_place=half, in_place=half.model_copy(update={"wrong": 0}))
    return NcclResult(op="all_reduce", max_bus_bw_gbps=190.0, avg_bus_bw_gbps=avg,
                      size_max_bytes=8 << 30, rows=[row])


def test_dcgm_diag(facts: HostFacts, spec: ExpectedSpec) -> None:
    def diag(passed: bool, level: int) -> ActiveEvidence:
        return ActiveEvidence(dcgm_diag=DcgmDiagResult(passed=passed, level=level))

    assert run("dcgm_diag", facts, spec, None, evidence=diag(True, 2)).status is P
    bad = run("dcgm_diag", facts, spec, None, evidence=diag(False, 2))
    assert (bad.status, bad.fault) == (F, Fault.DIAG_FAILED)
    shallow = run("dcgm_diag", facts, spec, None, {"min_level": 2}, evidence=diag(True, 1))
    assert shallow.status is F and "level 2 required" in shallow.message


def test_nccl(facts: HostFacts, spec: ExpectedSpec) -> None:
    ev = ActiveEvidence(nccl=_nccl(180.5))
    assert run("nccl", facts, spec, None, {"min_busbw_gbps": 150}, evidence=ev).status is P
    r = run("nccl", facts, spec, None, {"min_busbw_gbps": 350}, evidence=ev)
    assert (r.status, r.fault) == (F, Fault.DIAG_FAILED)
    assert "180.5 GB/s below 350 GB/s" in r.message
    r = run("nccl", facts, spec, None, evidence=ActiveEvidence(nccl=_nccl(None)))
    assert (r.status, r.message) == (F, "NCCL test reported no bus bandwidth")


def test_gpu_burn(facts: HostFacts, spec: ExpectedSpec) -> None:
    ok = GpuBurnResult(gpus=[GpuBurnGpu(index=0, ok=True)])
    assert run("gpu_burn", facts, spec, None, evidence=ActiveEvidence(gpu_burn=ok)).status is P
    bad = GpuBurnResult(gpus=[GpuBurnGpu(index=0, ok=True), GpuBurnGpu(index=1, ok=False)])
    r = run("gpu_burn", facts, spec, None, evidence=ActiveEvidence(gpu_burn=bad))
    assert r.status is F and r.message == "gpu-burn failed on GPU 1"
    # A run that tested no GPU proves nothing.
    empty = ActiveEvidence(gpu_burn=GpuBurnResult(gpus=[]))
    assert run("gpu_burn", facts, spec, None, evidence=empty).status is F


def test_evidence_models_from_the_evidence_module(facts: HostFacts, spec: ExpectedSpec) -> None:
    evidence = ActiveEvidence.from_kinds({
        "dcgm_diag": DcgmDiagResult(level=2, passed=False, runtime_error="NVML error"),
        # Stored evidence comes back as its JSON dump.
        "nccl": NcclResult(op="all_reduce", max_bus_bw_gbps=190.0, avg_bus_bw_gbps=170.0,
                           size_max_bytes=8 << 30).model_dump(mode="json"),
        "gpu_burn": GpuBurnResult(gpus=[GpuBurnGpu(index=0, ok=True),
                                        GpuBurnGpu(index=3, ok=False)]),
        "something_else": {"ignored": True},
    })
    r = run("dcgm_diag", facts, spec, None, evidence=evidence)
    assert (r.status, r.message) == (F, "DCGM diag failed (NVML error)")
    assert run("nccl", facts, spec, None, {"min_busbw_gbps": 150}, evidence=evidence).status is P
    r = run("gpu_burn", facts, spec, None, evidence=evidence)
    assert (r.status, r.message) == (F, "gpu-burn failed on GPU 3")


def test_nccl_wrong_values_fail(facts: HostFacts, spec: ExpectedSpec) -> None:
    r = run("nccl", facts, spec, None, evidence=ActiveEvidence(nccl=_nccl(200.0, wrong=4)))
    assert (r.status, r.fault) == (F, Fault.DIAG_FAILED) and "4 wrong values" in r.message
