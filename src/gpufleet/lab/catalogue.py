"""The simulated lab fleet: hosts that answer the collection script with real captured output.

Each lab host has a *model* (``a100-8x``, ``h100-8x``, ``v100s-8x``, ``a10g-1x``, ``l40s-1x``)
whose template is built from real captures under :func:`gpufleet.lab.captures.captures_dir`:

=========  ==========================================================================
v100s-8x   ``datakit_gtx-8card.xml`` (8x Tesla V100S-PCIE-32GB, 460.73.01) as captured;
           RoCE ``ibstat`` from ``gpud_ibstat.47.0.h100.all.active.0.txt``; no NVLink.
a100-8x    the one GPU of ``telegraf_a100-sxm4-v12.xml`` (A100-SXM4-80GB, 535.54.03) with
           MIG switched off, replicated to 8; ``nvlink --status`` of a real 8x A100
           (``gpud_nvidia-smi.nvlink.status.a100.txt``); ``gpud_ibstat.47.0.a100.all.active.0``.
h100-8x    the ``idle :: query (-q)`` text of the H100 nvidia_gpu_exporter bundle (590.48.01),
           GPU section replicated to 8, served as the ``-q`` fallback (no XML capture);
           its ``nvlink -s`` (18 links) per GPU; ``gpud_ibstat.47.0.h100.all.active.2``.
a10g-1x    ``telegraf_a10g.xml`` (515.105.01), no RDMA, no NVLink.
l40s-1x    ``-q`` text, ``topo -m`` and ``nvlink -s`` of the L40S exporter bundle (595.80).
h100-mig-8x  h100-8x in MIG mode (issue 26 item 7): the ``-q`` text of the H100 *MIG* bundle
           (590.48.01: 3g.40gb, 2g.20gb, 2x 1g.10gb) replicated to 8, its ``nvlink -s`` ("not
           supported for Devices in MIG mode"), its ``nvidia-smi -L`` MIG lines under each GPU.
cpu-node   no accelerator (``gpufleet_role=cpu``): the ``lspci -nn`` of gpud's A10 VM with the
           NVIDIA line taken out (EDITED); nvidia-smi, ibstat, vendor tools not found.
gb200-4x   ``k8s-test-infra_hw-qx-gb200.xml`` (one GB200 NVL72 compute tray, 580.173.02);
           racks of 18 with per-rack/per-tray EDITED platform and fabric (lab/racks.py).
=========  ==========================================================================

The only changes made to captured text are the ones a host needs: per-host GPU identity
(serial, UUID, PDI, and for replicated GPUs the PCI address, minor number and module id),
the replication itself, MIG off on the A100, persistence mode on (datacenter hosts run
nvidia-persistenced; the captured boxes did not), the driver string (drift / a lab change) and
the injected faults. Edits are textual so every untouched byte is exactly as captured.

Generated, because no permitted real capture exists (formats copied from real output):
``topo -m`` of the 8-GPU hosts and of the A10G (layout of the exporter's ``topo -m``
capture: tab separated, ANSI-underlined header, "NIC Legend" on newer drivers), and
``nvidia-smi -L`` (each GPU's line in the layout of the exporter bundles' ``-L``; under
each GPU of ``h100-mig-8x`` the bundle's MIG lines as captured, identifiers masked as
captured), ``lspci -nn -D`` lines (layout of ``gpud_lspci.nn.a100.txt``; device names from pci.ids;
the H100 addresses are those of the real 8x H100 host in ``gpud_lspci-vvv.txt``), and
``nvlink -s`` of the V100S/A10G PCIe cards on their older drivers: the captured per-GPU
header line (``GPU 0: <name> (UUID: ...)``) with no link lines under it. Xid lines
take their exact layout from ``gpud_dmesg-time-format-iso.log``. OS files (os-release,
meminfo, modules, DMI, sysctl, lsblk) are written in their kernel/util-linux formats.
``nvidia-ctk --version`` is real output quoted in an NVIDIA issue; ``nv-fabricmanager
--version`` follows the tool's wording without a capture (the parser reads only the version).

Rendering is pure and deterministic: templates are parsed once per model and split into
literal pieces and identity slots, so rendering 1000 hosts takes about a second.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache
from typing import Any

from gpufleet.errors import ConfigError

# --------------------------------------------------------------------------- model specs


@dataclass(frozen=True)
class ModelSpec:
    """A lab host model: its captures, its expected spec and the OS-level facts it reports."""

    name: str
    group: str  # inventory group
    pool: str
    gpu_model: str  # substring of the product name, as ExpectedSpec.gpu_model
    gpu_count: int
    gpu_memory_mib: int  # FB total as the capture reports it
    smi_format: str  # "xml" | "text"
    smi_file: str  # path under captures_dir()
    replicate: bool  # one captured GPU replicated to gpu_count (PCI address etc. assigned)
    gpu_bus_ids: tuple[str, ...]  # lspci form "0000:07:00.0"; () = as captured
    pci_gpu: str  # lspci -nn text after the class: "NVIDIA Corporation GA100 [...] [10de:20b2]"
    has_remapped_rows: bool
    nvlink_file: str | None  # captures path; None = the PCIe answer (empty, rc 0)
    nvlink_per_gpu: int | None
    ibstat_file: str | None
    fabric: str  # "ib" | "roce" | "none"
    ib_ports: int
    ib_rate_gbps: float | None
    nic_bus_ids: tuple[str, ...]  # one per ibstat CA in name (PCI) order; a bond takes .0+.1
    extra_pci: tuple[str, ...]  # other lspci -nn -D lines (NVSwitches, NVMe, ENA ...)
    nvswitch: bool
    topo_capture: str | None  # exporter bundle title of a real topo -m to serve as is
    dmi: tuple[str, str]
    nproc: int
    mem_total_kib: int
    disks: tuple[tuple[str, int, str], ...]  # (name, bytes, model)
    #: The accelerator vendor (a vendor plugin's name). Other vendors' hosts answer
    #: nvidia-smi with "not found" and are rendered by their lab model (``lab/vendors``; the
    #: smi_* / nvlink / ib fields are then unused).
    vendor: str = "nvidia"
    #: Serial number prefix of the host's accelerators (None: the lab's table or a neutral one).
    serial_prefix: str | None = None
    #: The node's role (``gpufleet_role``, issue 26 item 9): ``gpu``, or ``cpu``/``storage``
    #: for a node with no accelerator (nvidia-smi and every vendor tool not found).
    role: str = "gpu"
    #: A capture of ``lspci -nn`` (path under captures_dir) whose lines, with the NVIDIA
    #: devices taken out, are the host's bus (a GPU-less node: the edit is only that).
    lspci_capture: str | None = None


#: The NVIDIA-only parts of a ModelSpec for another vendor's model: no row remapping, NVLink,
#: InfiniBand, NVSwitch or nvidia-smi topology (``ModelSpec(..., **NO_NVIDIA_FABRIC)``).
NO_NVIDIA_FABRIC: dict[str, Any] = {
    "has_remapped_rows": False,
    "nvlink_file": None,
    "nvlink_per_gpu": None,
    "ibstat_file": None,
    "fabric": "none",
    "ib_ports": 0,
    "ib_rate_gbps": None,
    "nic_bus_ids": (),
    "nvswitch": False,
    "topo_capture": None,
}


_NVME_PM1733 = (
    "Non-Volatile memory controller [0108]: Samsung Electronics Co Ltd NVMe SSD "
    "Controller PM173X [144d:a824]"
)
_NVME_PM983 = (
    "Non-Volatile memory controller [0108]: Samsung Electronics Co Ltd NVMe SSD "
    "Controller SM981/PM981/PM983 [144d:a808]"
)
_AWS_PCI = (
    "0000:00:04.0 Non-Volatile memory controller [0108]: Amazon.com, Inc. NVMe EBS "
    "Controller [1d0f:8061]",
    "0000:00:05.0 Ethernet controller [0200]: Amazon.com, Inc. Elastic Network Adapter "
    "(ENA) [1d0f:ec20]",
    "0000:00:1f.0 Non-Volatile memory controller [0108]: Amazon.com, Inc. NVMe SSD "
    "Controller [1d0f:cd01]",
)
_AWS_DISKS = (
    ("nvme0n1", 214748364800, "Amazon Elastic Block Store"),
    ("nvme1n1", 450000000000, "Amazon EC2 NVMe Instance Storage"),
)
_U2_3T84 = 3840755982336
_M2_1T92 = 1920383410176

_SPECS: dict[str, ModelSpec] = {
    "a100-8x": ModelSpec(
        name="a100-8x",
        group="gpu_a100",
        pool="train-a100",
        gpu_model="A100",
        gpu_count=8,
        gpu_memory_mib=81920,
        smi_format="xml",
        smi_file="nvidia-smi-xml/telegraf_a100-sxm4-v12.xml",
        replicate=True,
        # DGX A100 GPU slots
        gpu_bus_ids=(
            "0000:07:00.0",
            "0000:0f:00.0",
            "0000:47:00.0",
            "0000:4e:00.0",
            "0000:87:00.0",
            "0000:90:00.0",
            "0000:b7:00.0",
            "0000:bd:00.0",
        ),
        pci_gpu="NVIDIA Corporation GA100 [A100 SXM4 80GB] [10de:20b2] (rev a1)",
        has_remapped_rows=False,  # the capture prints <remapped_rows>N/A</remapped_rows>
        nvlink_file="nvidia-smi-topo/gpud_nvidia-smi.nvlink.status.a100.txt",
        nvlink_per_gpu=12,
        ibstat_file="ib/gpud_ibstat.47.0.a100.all.active.0.txt",
        fabric="ib",
        ib_ports=8,
        ib_rate_gbps=200,
        nic_bus_ids=(
            "0000:e1:00.0",
            "0000:0c:00.0",
            "0000:12:00.0",
            "0000:54:00.0",
            "0000:58:00.0",
            "0000:8d:00.0",
            "0000:94:00.0",
            "0000:ba:00.0",
            "0000:be:00.0",
        ),
        # NVSwitch bridges as gpud's real A100 lspci shows them (pci.ids without a name)
        extra_pci=tuple(
            f"0000:{b}:00.0 Bridge [0680]: NVIDIA Corporation Device [10de:1af1] (rev a1)"
            for b in ("c4", "c5", "c6", "c7", "c8", "c9")
        )
        + tuple(f"0000:{b}:00.0 {_NVME_PM1733}" for b in ("22", "23", "24", "25"))
        + tuple(f"0000:{b}:00.0 {_NVME_PM983}" for b in ("e3", "e4")),
        nvswitch=True,
        topo_capture=None,
        dmi=("NVIDIA", "DGXA100 920-23687-2530-000"),
        nproc=256,
        mem_total_kib=2113407792,
        disks=(
            ("nvme0n1", _M2_1T92, "SAMSUNG MZ1LB1T9HALS-00007"),
            ("nvme1n1", _M2_1T92, "SAMSUNG MZ1LB1T9HALS-00007"),
            *((f"nvme{i}n1", _U2_3T84, "SAMSUNG MZWLJ3T8HBLS-00007") for i in range(2, 6)),
        ),
    ),
    "h100-8x": ModelSpec(
        name="h100-8x",
        group="gpu_h100",
        pool="train-h100",
        gpu_model="H100",
        gpu_count=8,
        gpu_memory_mib=81559,
        smi_format="text",
        smi_file="nvidia-smi-csv/nvidia_gpu_exporter_linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt",
        replicate=True,
        # the GPU addresses of the real 8x H100 host in gpud_lspci-vvv.txt
        gpu_bus_ids=(
            "0000:19:00.0",
            "0000:3b:00.0",
            "0000:4c:00.0",
            "0000:5d:00.0",
            "0000:9b:00.0",
            "0000:bb:00.0",
            "0000:cb:00.0",
            "0000:db:00.0",
        ),
        pci_gpu="NVIDIA Corporation GH100 [H100 SXM5 80GB] [10de:2330] (rev a1)",
        has_remapped_rows=True,
        nvlink_file="nvidia-smi-topo/nvidia_gpu_exporter_h100-80gb-hbm3_590.48.01_nvlink-s.txt",
        nvlink_per_gpu=18,
        ibstat_file="ib/gpud_ibstat.47.0.h100.all.active.2.txt",
        fabric="ib",
        ib_ports=8,
        ib_rate_gbps=400,
        # ConnectX-7 next to each GPU as on that host; the bond (BlueField-3) takes two functions
        nic_bus_ids=(
            "0000:1a:00.0",
            "0000:3c:00.0",
            "0000:4d:00.0",
            "0000:5e:00.0",
            "0000:9c:00.0",
            "0000:bc:00.0",
            "0000:cc:00.0",
            "0000:dc:00.0",
            "0000:1b:00.0",
        ),
        extra_pci=tuple(
            f"0000:{b}:00.0 Bridge [0680]: NVIDIA Corporation Device [10de:22a3] (rev a1)"
            for b in ("83", "84", "85", "86")
        )
        + tuple(
            f"0000:{b}:00.0 {_NVME_PM1733}"
            for b in ("21", "22", "23", "24", "a1", "a2", "a3", "a4")
        )
        + tuple(f"0000:{b}:00.0 {_NVME_PM983}" for b in ("e1", "e2")),
        nvswitch=True,
        topo_capture=None,
        dmi=("NVIDIA", "DGXH100"),
        nproc=224,
        mem_total_kib=2113389244,
        disks=(
            ("nvme0n1", _M2_1T92, "SAMSUNG MZ1L21T9HCLS-00A07"),
            ("nvme1n1", _M2_1T92, "SAMSUNG MZ1L21T9HCLS-00A07"),
            *((f"nvme{i}n1", _U2_3T84, "SAMSUNG MZQL23T8HCLS-00A07") for i in range(2, 10)),
        ),
    ),
    "v100s-8x": ModelSpec(
        name="v100s-8x",
        group="gpu_v100s",
        pool="train-v100",
        gpu_model="V100S",
        gpu_count=8,
        gpu_memory_mib=32510,
        smi_format="xml",
        smi_file="nvidia-smi-xml/datakit_gtx-8card.xml",
        replicate=False,
        gpu_bus_ids=(),
        pci_gpu="NVIDIA Corporation GV100GL [Tesla V100S PCIe 32GB] [10de:1df6] (rev a1)",
        has_remapped_rows=False,  # Volta reports retired pages, not remapped rows
        nvlink_file=None,
        nvlink_per_gpu=None,
        ibstat_file="ib/gpud_ibstat.47.0.h100.all.active.0.txt",
        fabric="roce",
        ib_ports=8,
        ib_rate_gbps=400,
        # the capture is a KVM guest (GPUs passed through on bus 00): NICs follow the GPUs
        nic_bus_ids=tuple(f"0000:00:{d:02x}.0" for d in range(0x15, 0x21)),
        extra_pci=(
            "0000:00:00.0 Host bridge [0600]: Intel Corporation 440FX - 82441FX PMC "
            "[Natoma] [8086:1237] (rev 02)",
            "0000:00:04.0 SCSI storage controller [0100]: Red Hat, Inc. Virtio block "
            "device [1af4:1001]",
        ),
        nvswitch=False,
        topo_capture=None,
        dmi=("QEMU", "Standard PC (i440FX + PIIX, 1996)"),
        nproc=96,
        mem_total_kib=791207068,
        disks=(("vda", 536870912000, ""),),
    ),
    "a10g-1x": ModelSpec(
        name="a10g-1x",
        group="gpu_a10g",
        pool="infer-a10g",
        gpu_model="A10G",
        gpu_count=1,
        gpu_memory_mib=23028,
        smi_format="xml",
        smi_file="nvidia-smi-xml/telegraf_a10g.xml",
        replicate=False,
        gpu_bus_ids=(),
        pci_gpu="NVIDIA Corporation GA102GL [A10G] [10de:2237] (rev a1)",
        has_remapped_rows=True,
        nvlink_file=None,
        nvlink_per_gpu=None,
        ibstat_file=None,
        fabric="none",
        ib_ports=0,
        ib_rate_gbps=None,
        nic_bus_ids=(),
        extra_pci=_AWS_PCI,
        nvswitch=False,
        topo_capture=None,
        dmi=("Amazon EC2", "g5.2xlarge"),
        nproc=8,
        mem_total_kib=32386452,
        disks=_AWS_DISKS,
    ),
    "l40s-1x": ModelSpec(
        name="l40s-1x",
        group="gpu_l40s",
        pool="infer-l40s",
        gpu_model="L40S",
        gpu_count=1,
        gpu_memory_mib=46068,
        smi_format="text",
        smi_file="nvidia-smi-csv/nvidia_gpu_exporter_linux-x86_64__nvidia-l40s__595.80.txt",
        replicate=False,
        gpu_bus_ids=(),
        pci_gpu="NVIDIA Corporation AD102GL [L40S] [10de:26b9] (rev a1)",
        has_remapped_rows=True,
        nvlink_file="bundle",
        nvlink_per_gpu=None,
        ibstat_file=None,
        fabric="none",
        ib_ports=0,
        ib_rate_gbps=None,
        nic_bus_ids=(),
        extra_pci=_AWS_PCI,
        nvswitch=False,
        topo_capture="capabilities :: topo -m",
        dmi=("Amazon EC2", "g6e.2xlarge"),
        nproc=8,
        mem_total_kib=65022360,
        disks=_AWS_DISKS,
    ),
    # One compute tray of a GB200 NVL72 rack (issue 27; lab/racks.py builds whole racks and
    # edits the rack and tray identity per host). No nvlink -s, ibstat or lspci capture of a
    # GB200 tray exists: NVLink answers as PCIe (empty), no RDMA adapters are modelled.
    "gb200-4x": ModelSpec(
        name="gb200-4x",
        group="gpu_gb200",
        pool="train-gb200",
        gpu_model="GB200",
        gpu_count=4,
        gpu_memory_mib=189471,
        smi_format="xml",
        smi_file="nvidia-smi-xml/k8s-test-infra_hw-qx-gb200.xml",
        replicate=False,
        gpu_bus_ids=(),
        # the capture's pci_device_id 0x2941 (no pci.ids name for it)
        pci_gpu="NVIDIA Corporation Device [10de:2941] (rev a1)",
        has_remapped_rows=True,
        nvlink_file=None,
        nvlink_per_gpu=None,
        ibstat_file=None,
        fabric="none",
        ib_ports=0,
        ib_rate_gbps=None,
        nic_bus_ids=(),
        extra_pci=(),
        nvswitch=False,
        topo_capture=None,
        dmi=("NVIDIA", "GB200 NVL72 compute tray"),
        nproc=144,
        mem_total_kib=990000000,
        disks=(("nvme0n1", _U2_3T84, "SAMSUNG MZQL23T8HCLS-00A07"),),
    ),
}

# An h100-8x host in MIG mode (issue 26 item 7), the layout of the real H100 MIG bundle: the
# same pool and group, so a campaign applying that layout turns an h100-8x host into this one
# (lab/mig.py) and back.
_SPECS["h100-mig-8x"] = replace(
    _SPECS["h100-8x"],
    name="h100-mig-8x",
    smi_file="nvidia-smi-csv/nvidia_gpu_exporter_linux-x86_64__nvidia-h100-mig__590.48.01.txt",
    nvlink_file="bundle",
    nvlink_per_gpu=None,  # "Nvlink queries are not supported for Devices in MIG mode"
)

#: Lab models, in the order create_fleet lays them out.
MODELS: tuple[str, ...] = tuple(_SPECS)

#: Lab models of the nodes that are not GPU nodes (issue 26 item 9): no accelerator at all.
_NODE_SPECS: dict[str, ModelSpec] = {
    # A CPU compute node (issue 26 item 9): no accelerator. Its bus is the real `lspci -nn`
    # of gpud's A10 VM (lspci/gpud_lspci.nn.a10.txt, a QEMU Q35 guest) EDITED: the one NVIDIA
    # line (the passed-through A10) taken out and the PCI domain 0000: put before each
    # address (the lab's `lspci -nn -D`). Its Virtio GPU is a display, not an NVIDIA GPU.
    # nvidia-smi, ibstat and every vendor tool answer "not found".
    "cpu-node": ModelSpec(
        name="cpu-node",
        group="cpu_nodes",
        pool="cpu",
        gpu_model="",
        gpu_count=0,
        gpu_memory_mib=0,
        smi_format="xml",
        smi_file="",
        replicate=False,
        gpu_bus_ids=(),
        pci_gpu="",
        extra_pci=(),
        dmi=("QEMU", "Standard PC (Q35 + ICH9, 2009)"),
        nproc=64,
        mem_total_kib=263921472,
        # the capture's two Virtio block devices
        disks=(("vda", 536870912000, ""), ("vdb", 1099511627776, "")),
        vendor="none",
        role="cpu",
        lspci_capture="lspci/gpud_lspci.nn.a10.txt",
        **NO_NVIDIA_FABRIC,
    ),
}

#: The GPU-less lab models (``gpufleet lab create --model cpu-node``).
NODE_MODELS: tuple[str, ...] = tuple(_NODE_SPECS)


@cache
def vendor_specs() -> dict[str, ModelSpec]:
    """The lab models of other accelerator vendors (issue 15), each vendor's lab model's
    (:mod:`gpufleet.lab.vendors`: ``ascend-910b3-8x``, ``mi100-4x`` replaying the real captures
    of tests/fixtures/captured/ascend and .../amd), found when first needed."""
    from gpufleet.lab.vendors import lab_vendors

    out: dict[str, ModelSpec] = {}
    for lab in lab_vendors():
        for spec in lab.models:
            if spec.name in _SPECS or spec.name in _NODE_SPECS or spec.name in out:
                raise ConfigError(f"lab model {spec.name} of vendor {lab.vendor}: name taken")
            if spec.vendor != lab.vendor:
                raise ConfigError(f"lab model {spec.name} of vendor {lab.vendor}: {spec.vendor}")
            out[spec.name] = spec
    return out


def vendor_models() -> tuple[str, ...]:
    """Lab models of other accelerator vendors, in vendor order."""
    return tuple(vendor_specs())


def all_models() -> tuple[str, ...]:
    """Every lab model (NVIDIA's first, the GPU-less nodes last)."""
    return MODELS + vendor_models() + NODE_MODELS


# Default mix (weights) for create_fleet: training pools dominate, a little inference.
_DEFAULT_MIX: tuple[tuple[str, float], ...] = (
    ("a100-8x", 0.375),
    ("h100-8x", 0.375),
    ("v100s-8x", 0.125),
    ("a10g-1x", 0.0625),
    ("l40s-1x", 0.0625),
)
_HOSTS_PER_RACK = 4


def model_spec(model: str) -> ModelSpec:
    """The spec of a lab model; :class:`ConfigError` for an unknown name."""
    spec = _SPECS.get(model) or _NODE_SPECS.get(model) or vendor_specs().get(model)
    if spec is None:
        raise ConfigError(f"unknown lab model {model!r} (known: {', '.join(all_models())})")
    return spec
