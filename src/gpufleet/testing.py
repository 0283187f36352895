"""Test kit for code built on gpufleet: a hand-moved clock and plain-data host factories.

Shipped with the package (``from gpufleet.testing import FakeClock, make_facts``) so that
plugins, exporters and the project's own tests build hosts the same way. Pure: no pytest, no
database. ``make_facts()`` is a clean 8x H100 SXM HGX host that meets :data:`SPEC` and runs
:data:`BASELINE`; tests derive broken hosts from it with overrides.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from gpufleet.domain.facts import (
    FACTS_VERSION,
    BlockDevice,
    EccErrors,
    Gpu,
    GpuFabric,
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

#: When the clean host's facts were collected.
NOW = datetime(2024, 9, 1, 12, 0, tzinfo=UTC)
BUSES = ["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"]
DRIVER = "550.90.07"


def make_gpu(index: int, **overrides: Any) -> Gpu:
    """GPU ``index`` (0-7) of the clean host; keywords override fields."""
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
        "fabric": GpuFabric(state="Completed", status="Success"),  # joined the NVSwitch fabric
    }
    data.update(overrides)
    return Gpu(**data)


def pci_gpu(index: int) -> PciDevice:
    """The PCI function of GPU ``index`` of the clean host."""
    return PciDevice(
        address=f"0000:{BUSES[index]}:00.0", class_name="3D controller", class_id="0302",
        vendor_id="10de", device_id="2330",
        description="NVIDIA Corporation GH100 [H100 SXM5 80GB] [10de:2330] (rev a1)",
    )


def ib_port(ca: str, guid: str, **overrides: Any) -> IbPort:
    """An active 400 Gb/s NDR InfiniBand port; keywords override fields."""
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
        "modules": ["nvidia", "nvidia_uvm", "nvidia_peermem", "mlx5_core", "ib_umad"],
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
            *(pci_gpu(i) for i in range(8)),
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
        "fabricmanager_version": DRIVER,
    }
    data.update(host)
    return HostFacts(**data)


#: The pool spec the clean host meets.
SPEC = ExpectedSpec(
    gpu_count=8, gpu_model="H100", gpu_memory_mib=81559, nvlink_per_gpu=18, nvswitch=True,
    fabric="ib", ib_ports=4, ib_rate_gbps=400, pcie_gen=5, pcie_width=16, rack="r12",
)

#: The validated baseline the clean host runs.
BASELINE = Baseline(
    name="h100-2024q3", status=BaselineStatus.VALIDATED, os_image="Ubuntu 22.04.4 LTS",
    kernel="5.15.0-105-generic", driver=DRIVER, cuda="12.4", vbios=["96.00.89.00.01"],
    sysctls={"vm.swappiness": "10", "net.ipv4.tcp_rmem": "4096 87380 16777216"},
)


class FakeClock:
    """A clock tests move by hand (services read time only through ``Fleet.clock``)."""

    def __init__(self, now: datetime | None = None) -> None:
        self.now = now or datetime(2026, 12, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **kw: float) -> None:
        """Move forward by ``timedelta(**kw)``, e.g. ``advance(minutes=5)``."""
        self.now += timedelta(**kw)
