"""Plain-data hosts for domain tests: a clean 8x H100 SXM HGX host, its pool spec and baseline.

Tests derive broken hosts from the clean one with ``make_facts(...)`` overrides.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from gpufleet.domain.facts import (
    FACTS_VERSION,
    BlockDevice,
    EccErrors,
    Gpu,
    GpuNvlinks,
    HostFacts,
    IbPort,
    NvidiaSmiReport,
    NvlinkLink,
    NvlinkStatus,
    OsRelease,
    PciDevice,
    RemappedRows,
    TopoMatrix,
)
from gpufleet.domain.spec import Baseline, BaselineStatus, ExpectedSpec

NOW = datetime(2024, 9, 1, 12, 0, tzinfo=UTC)
BUSES = ["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"]
DRIVER = "550.90.07"


def make_gpu(index: int, **overrides: Any) -> Gpu:
    data: dict[str, Any] = {
        "index": index,
        "uuid": f"GPU-0000000{index}-aaaa-bbbb-cccc-dddddddddddd",
        "serial": f"165232401000{index}",
        "pci_bus_id": f"00000000:{BUSES[index]}:00.0",  # nvidia-smi's 8-digit domain
        "product_name": "NVIDIA H100 80GB HBM3",
        "architecture": "Hopper",
        "vbios_version": "96.00.89.00.01",
        "memory_total_mib": 81559,
        "persistence_mode": True,
        "mig_mode_current": False,
        "ecc_mode_current": True,
        "ecc_mode_pending": True,
        "ecc_volatile": EccErrors(correctable=0, uncorrectable=0),
        "ecc_aggregate": EccErrors(correctable=3, uncorrectable=0),
        "remapped_rows": RemappedRows(correctable=0, uncorrectable=0, pending=False,
                                      failure=False),
        "pcie_gen_max": 5,
        "pcie_width_max": 16,
        "pcie_width_current": 16,
    }
    data.update(overrides)
    return Gpu(**data)


def _pci(index: int) -> PciDevice:
    return PciDevice(
        address=f"0000:{BUSES[index]}:00.0", class_name="3D controller", class_id="0302",
        vendor_id="10de", device_id="2330",
        description="NVIDIA Corporation GH100 [H100 SXM5 80GB] [10de:2330] (rev a1)",
    )


def ib_port(ca: str, guid: str, **overrides: Any) -> IbPort:
    data: dict[str, Any] = {
        "ca": ca, "port": 1, "ca_type": "MT4129", "firmware": "28.39.1002", "state": "Active",
        "physical_state": "LinkUp", "rate_gbps": 400, "link_layer": "InfiniBand",
        "port_guid": guid,
    }
    data.update(overrides)
    return IbPort(**data)


def make_facts(
    *,
    gpu: dict[int, dict[str, Any]] | None = None,
    all_gpus: dict[str, Any] | None = None,
    hidden_gpus: set[int] | None = None,
    smi: dict[str, Any] | None = None,
    **host: Any,
) -> HostFacts:
    """A clean host; ``gpu`` overrides per GPU index, ``all_gpus`` for every GPU,
    ``hidden_gpus`` are on the PCI bus but missing from the driver, ``smi`` overrides the
    nvidia-smi report, other keywords override HostFacts fields."""
    gpus = [
        make_gpu(i, **{**(all_gpus or {}), **(gpu or {}).get(i, {})})
        for i in range(8)
        if i not in (hidden_gpus or set())
    ]
    names = [f"GPU{i}" for i in range(8)]
    links = {a: {b: ("X" if a == b else "NV18") for b in names} for a in names}
    data: dict[str, Any] = {
        "facts_version": FACTS_VERSION,
        "collected_at": NOW,
        "hostname": "gpu-node-01",
        "os": OsRelease(id="ubuntu", version_id="22.04", pretty_name="Ubuntu 22.04.4 LTS"),
        "kernel": "5.15.0-105-generic",
        "modules": ["nvidia", "nvidia_uvm", "nvidia_peermem", "mlx5_core"],
        "sysctls": {"vm.swappiness": "10", "net.ipv4.tcp_rmem": "4096\t87380\t16777216"},
        "nvidia_smi": NvidiaSmiReport(**{
            "driver_version": DRIVER, "cuda_version": "12.4", "attached_gpus": len(gpus),
            "gpus": gpus, **(smi or {}),
        }),
        "topology": TopoMatrix(devices=names, links=links),
        "nvlink": NvlinkStatus(
            gpus=[
                GpuNvlinks(gpu_index=g.index,
                           links=[NvlinkLink(link=n, active=True, speed_gbps=26.562)
                                  for n in range(18)])
                for g in gpus
            ]
        ),
        "ib_ports": [ib_port(f"mlx5_{i}", f"0xa088c2030000000{i}") for i in range(4)],
        "pci_devices": [
            *(_pci(i) for i in range(8)),
            PciDevice(address="0000:05:00.0", class_name="Bridge", class_id="0680",
                      vendor_id="10de", device_id="22a3", description="NVIDIA NVSwitch"),
            PciDevice(address="0000:1a:00.0", class_name="Infiniband controller",
                      class_id="0207", vendor_id="15b3", device_id="1021",
                      description="Mellanox MT2910 Family [ConnectX-7]"),
        ],
        "block_devices": [
            BlockDevice(name="nvme0n1", size_bytes=3_840_755_982_336, transport="nvme"),
            BlockDevice(name="nvme1n1", size_bytes=3_840_755_982_336, transport="nvme"),
            BlockDevice(name="sda", size_bytes=480_103_981_056, transport="sata"),
        ],
        "xids": [],  # the kernel log was read and has no Xid
        "fabricmanager_active": True,
    }
    data.update(host)
    return HostFacts(**data)


SPEC = ExpectedSpec(
    gpu_count=8, gpu_model="H100", gpu_memory_mib=81559, nvlink_per_gpu=18, nvswitch=True,
    fabric="ib", ib_ports=4, ib_rate_gbps=400, pcie_gen=5, pcie_width=16, rack="r12",
)

BASELINE = Baseline(
    name="h100-2024q3", status=BaselineStatus.VALIDATED, os_image="Ubuntu 22.04.4 LTS",
    kernel="5.15.0-105-generic", driver=DRIVER, cuda="12.4", vbios=["96.00.89.00.01"],
    sysctls={"vm.swappiness": "10", "net.ipv4.tcp_rmem": "4096 87380 16777216"},
)


@pytest.fixture
def facts_factory() -> Callable[..., HostFacts]:
    return make_facts


@pytest.fixture
def gpu_factory() -> Callable[..., Gpu]:
    return make_gpu


@pytest.fixture
def port_factory() -> Callable[..., IbPort]:
    return ib_port


@pytest.fixture
def facts() -> HostFacts:
    return make_facts()


@pytest.fixture
def spec() -> ExpectedSpec:
    return SPEC


@pytest.fixture
def baseline() -> Baseline:
    return BASELINE


@pytest.fixture
def now() -> datetime:
    return NOW
