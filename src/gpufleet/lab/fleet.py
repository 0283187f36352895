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
=========  ==========================================================================

The only changes made to captured text are the ones a host needs: per-host GPU identity
(serial, UUID, PDI, and for replicated GPUs the PCI address, minor number and module id),
the replication itself, MIG off on the A100, persistence mode on (datacenter hosts run
nvidia-persistenced; the captured boxes did not), the driver string (drift / a lab change) and
the injected faults. Edits are textual so every untouched byte is exactly as captured.

Generated, because no permitted real capture exists (formats copied from real output):
``topo -m`` of the 8-GPU hosts and of the A10G (layout of the exporter's ``topo -m``
capture: tab separated, ANSI-underlined header, "NIC Legend" on newer drivers), and
``lspci -nn -D`` lines (layout of ``gpud_lspci.nn.a100.txt``; device names from pci.ids;
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

import hashlib
import json
import os
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gpufleet.collect.bundle import Section, render_bundle
from gpufleet.collect.sections import SYSCTL_KEYS, names
from gpufleet.errors import ConfigError, NotFound
from gpufleet.lab.captures import captures_dir, load_exporter_bundle

__all__ = [
    "DEFAULT_DRIFT_DRIVER",
    "FAULT_KINDS",
    "MODELS",
    "TRANSPORT_FAULTS",
    "LabFleet",
    "LabHost",
    "ModelSpec",
    "apply_change",
    "create_fleet",
    "fault_gpu_index",
    "model_spec",
    "render_output",
    "render_sections",
    "validate_faults",
    "write_inventory",
]

LAB_FILE = "lab.json"
DEFAULT_DRIFT_DRIVER = "535.154.05"
_ALT_DRIFT_DRIVER = "550.90.07"  # used when a host already runs DEFAULT_DRIFT_DRIVER

#: Faults the SSH lab / sim transport act on; the section renderer ignores them.
TRANSPORT_FAULTS: frozenset[str] = frozenset(
    {"unreachable", "hang", "wrong-key", "host-key-changed"}
)
#: Every fault kind; ``xid`` is written ``xid:<code>[:<gpu index>]``, ``driver-drift`` may
#: carry a version (``driver-drift:550.90.07``), ``ib-down``/``ib-polling`` a CA name.
FAULT_KINDS: tuple[str, ...] = (
    "gpu-missing",
    "driver-drift",
    "ecc-uncorrectable",
    "remap-pending",
    "remap-failure",
    "ib-down",
    "ib-polling",
    "xid",
    "nvidia-smi-missing",
    "garbage",
    "truncated",
    *sorted(TRANSPORT_FAULTS),
)

_NOT_FOUND_RC = 127
#: The sections a lab host answers: every registered one, in script order.
SECTIONS: tuple[str, ...] = names()


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
}

#: Lab models, in the order create_fleet lays them out.
MODELS: tuple[str, ...] = tuple(_SPECS)

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
    try:
        return _SPECS[model]
    except KeyError:
        raise ConfigError(f"unknown lab model {model!r} (known: {', '.join(MODELS)})") from None


# --------------------------------------------------------------------------- faults


def _split_fault(fault: str) -> tuple[str, str | None]:
    kind, _, arg = fault.partition(":")
    return kind, (arg or None)


def validate_faults(model: str, faults: Sequence[str]) -> None:
    """Raise :class:`ConfigError` for an unknown fault or one the model cannot show."""
    spec = model_spec(model)
    for fault in faults:
        kind, arg = _split_fault(fault)
        if kind not in FAULT_KINDS:
            raise ConfigError(f"unknown lab fault {fault!r} (known: {', '.join(FAULT_KINDS)})")
        why: str | None = None
        if kind == "xid":
            parts = (arg or "").split(":")
            if (
                not parts[0].isdigit()
                or len(parts) > 2
                or (len(parts) == 2 and not (parts[1].isdigit() and int(parts[1]) < spec.gpu_count))
            ):
                why = "expected xid:<code> or xid:<code>:<gpu index>"
        elif kind in ("remap-pending", "remap-failure") and not spec.has_remapped_rows:
            why = "its GPUs do not report remapped rows"
        elif kind in ("ib-down", "ib-polling") and spec.ibstat_file is None:
            why = "it has no RDMA adapters"
        elif kind == "gpu-missing" and spec.gpu_count < 2:
            why = "it has a single GPU (use nvidia-smi-missing)"
        elif kind == "driver-drift" and arg is not None and not re.fullmatch(r"[\d.]+", arg):
            why = "expected driver-drift[:<version>]"
        elif arg is not None and kind not in ("xid", "driver-drift", "ib-down", "ib-polling"):
            why = "it takes no argument"
        if why:
            raise ConfigError(f"lab fault {fault!r} does not apply to a {model} host: {why}")


# --------------------------------------------------------------------------- fleet model


class LabHost(BaseModel):
    """One simulated host; ``gpu_swap`` counts GPU replacements (each gives a new serial)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    model: str
    faults: list[str] = Field(default_factory=list)
    driver: str | None = None  # installed driver when it differs from the capture's
    serial_salt: int
    gpu_swap: int = 0
    rack: str = "r01"
    # When the Xid faults were injected: the kernel log lines carry this time, so a validation
    # right after sees them inside its window (without it: a fixed time from the capture's era).
    xid_at: datetime | None = None

    @model_validator(mode="after")
    def _check(self) -> LabHost:
        validate_faults(self.model, self.faults)
        if not 0 <= self.serial_salt < 10**6:
            raise ValueError("serial_salt must be in [0, 1000000)")
        return self

    @property
    def spec(self) -> ModelSpec:
        return model_spec(self.model)

    @property
    def transport_fault(self) -> str | None:
        """The transport-level fault the sim/SSH lab must act on, if any."""
        return next((f for f in self.faults if f in TRANSPORT_FAULTS), None)


class LabFleet(BaseModel):
    """A lab fleet, persisted as ``lab.json`` so separate CLI processes share it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    hosts: list[LabHost] = Field(default_factory=list)
    seed: int = 0

    @model_validator(mode="after")
    def _unique(self) -> LabFleet:
        names = [h.name for h in self.hosts]
        if len(set(names)) != len(names):
            raise ValueError("lab host names must be unique")
        # Serials encode the salt, so equal salts would give two hosts the same GPU serials.
        if len({h.serial_salt for h in self.hosts}) != len(self.hosts):
            raise ValueError("lab host serial_salt values must be unique")
        return self

    def host(self, name: str) -> LabHost:
        """The host called ``name``; :class:`NotFound` if absent."""
        for h in self.hosts:
            if h.name == name:
                return h
        raise NotFound(f"no lab host {name!r}")

    def save(self, directory: Path | str) -> Path:
        """Write ``lab.json`` in ``directory`` atomically (readers never see half a file)."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        path = d / LAB_FILE
        tmp = d / f".{LAB_FILE}.{os.getpid()}.tmp"
        tmp.write_text(self.model_dump_json(indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, path)
        return path

    @classmethod
    def load(cls, directory: Path | str) -> LabFleet:
        """Read ``lab.json`` from ``directory``; :class:`NotFound` when there is no lab."""
        path = Path(directory) / LAB_FILE
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise NotFound(f"no lab in {directory} ({LAB_FILE} missing)") from None
        return cls.model_validate(data)


# --------------------------------------------------------------------------- building fleets


def _mix(n: int, models: Sequence[str] | None) -> list[str]:
    """Model of each host: round robin over ``models``, else the default mix (largest remainder)."""
    if models:
        for m in models:
            model_spec(m)
        return [models[i % len(models)] for i in range(n)]
    quotas = [(m, w * n) for m, w in _DEFAULT_MIX]
    counts = {m: int(q) for m, q in quotas}
    left = n - sum(counts.values())
    for m, _ in sorted(quotas, key=lambda mq: -(mq[1] - int(mq[1])))[:left]:
        counts[m] += 1
    # Contiguous per model so racks hold one model, as pools are racked in practice.
    return [m for m, _ in _DEFAULT_MIX for _ in range(counts[m])]


def _default_faults(
    names: list[str], models: list[str], rng: random.Random
) -> dict[str, list[str]]:
    """One of each demo fault, on distinct hosts that can show it."""
    wanted: list[tuple[str, tuple[str, ...]]] = [
        ("gpu-missing", ("a100-8x", "h100-8x")),
        ("driver-drift", ("a100-8x", "h100-8x", "v100s-8x")),
        ("ib-down", ("a100-8x", "h100-8x")),
        ("xid:79", ("a100-8x", "h100-8x", "v100s-8x")),
        ("remap-pending", ("h100-8x", "a10g-1x", "l40s-1x")),
        ("unreachable", MODELS),
        ("garbage", ("a100-8x", "v100s-8x", "a10g-1x")),
    ]
    taken: set[str] = set()
    out: dict[str, list[str]] = {}
    for fault, fits in wanted:
        cands = [h for h, m in zip(names, models, strict=True) if m in fits and h not in taken]
        if not cands:
            continue
        host = rng.choice(cands)
        taken.add(host)
        out[host] = [fault]
    return out


def create_fleet(
    n_hosts: int,
    *,
    models: Sequence[str] | None = None,
    faults: Mapping[str, list[str]] | None = None,
    seed: int = 0,
    prefix: str = "gpu",
    now: datetime | None = None,
) -> LabFleet:
    """Build a lab fleet of ``n_hosts`` named ``<prefix>-01``..; deterministic for a seed.

    ``models`` are used round robin; by default the fleet is mostly a100-8x and h100-8x with
    some v100s-8x and a few a10g-1x / l40s-1x. ``faults`` maps host name to faults; when it is
    None and the fleet has at least 32 hosts, one each of gpu-missing, driver-drift, ib-down,
    xid:79, remap-pending, unreachable and garbage is spread over the fleet for the demo.
    """
    if n_hosts < 1:
        raise ConfigError("a lab fleet needs at least one host")
    if n_hosts > 10**6:
        raise ConfigError("a lab fleet has at most 1000000 hosts")
    rng = random.Random(seed)
    mix = _mix(n_hosts, models)
    width = max(2, len(str(n_hosts)))
    names = [f"{prefix}-{i:0{width}d}" for i in range(1, n_hosts + 1)]
    salts = rng.sample(range(10**6), n_hosts)
    if faults is None:
        faults = _default_faults(names, mix, rng) if n_hosts >= 32 else {}
    unknown = sorted(set(faults) - set(names))
    if unknown:
        raise ConfigError(f"faults name hosts that are not in the lab: {', '.join(unknown)}")
    hosts: list[LabHost] = []
    rack, in_rack = 0, _HOSTS_PER_RACK
    for i, (name, model) in enumerate(zip(names, mix, strict=True)):
        # A new model starts a new rack.
        if in_rack >= _HOSTS_PER_RACK or (i and mix[i - 1] != model):
            rack, in_rack = rack + 1, 0
        in_rack += 1
        host_faults = list(faults.get(name, []))
        has_xid = any(_split_fault(f)[0] == "xid" for f in host_faults)
        hosts.append(
            LabHost(
                name=name,
                model=model,
                faults=host_faults,
                serial_salt=salts[i],
                rack=f"r{rack:02d}",
                xid_at=now if has_xid else None,
            )
        )
    return LabFleet(hosts=hosts, seed=seed)


def _fault_matches(fault: str, pattern: str) -> bool:
    return fault == pattern or _split_fault(fault)[0] == pattern


def apply_change(
    fleet: LabFleet,
    host: str,
    *,
    driver: str | None = None,
    clear_faults: Sequence[str] | None = None,
    add_faults: Sequence[str] | None = None,
    gpu_swap: bool = False,
    now: datetime | None = None,
) -> LabFleet:
    """Change one lab host as a technician would and return the new fleet.

    ``driver`` installs that driver version (and so ends any ``driver-drift``);
    ``clear_faults`` removes faults by exact name or kind (``"xid"`` clears every Xid,
    ``"all"`` everything); ``add_faults`` injects faults; ``gpu_swap`` replaces the GPU the
    GPU faults point at (see :func:`fault_gpu_index`): it gets a new serial and UUID, the
    faults stay until cleared.
    """
    current = fleet.host(host)
    faults = list(current.faults)
    if clear_faults:
        if "all" in clear_faults:
            faults = []
        else:
            faults = [f for f in faults if not any(_fault_matches(f, p) for p in clear_faults)]
    new_driver = current.driver
    if driver is not None:
        new_driver = driver
        faults = [f for f in faults if not _fault_matches(f, "driver-drift")]
    for f in add_faults or ():
        if f not in faults:
            faults.append(f)
    xid_at = current.xid_at
    if now is not None and any(_split_fault(f)[0] == "xid" for f in add_faults or ()):
        xid_at = now
    changed = LabHost.model_validate(
        current.model_dump()
        | {  # validates the new faults
            "faults": faults,
            "driver": new_driver,
            "xid_at": xid_at,
            "gpu_swap": current.gpu_swap + (1 if gpu_swap else 0),
        }
    )
    return LabFleet(hosts=[changed if h.name == host else h for h in fleet.hosts], seed=fleet.seed)


# --------------------------------------------------------------------------- inventory


def write_inventory(
    fleet: LabFleet,
    path: Path | str,
    *,
    transport: str = "sim",
    lab_dir: Path | str | None = None,
) -> Path:
    """Write an Ansible INI inventory: one group per model with the expected spec as vars.

    Hosts carry ``gpufleet_transport``, ``gpufleet_lab_dir`` (absolute; default: the
    inventory's directory) and ``gpufleet_rack``.
    """
    out = Path(path)
    labd = Path(lab_dir if lab_dir is not None else out.parent).resolve()
    by_model: dict[str, list[LabHost]] = {}
    for h in fleet.hosts:
        by_model.setdefault(h.model, []).append(h)
    lines = [
        f"# gpufleet lab inventory: {len(fleet.hosts)} simulated hosts (seed {fleet.seed})",
        "",
    ]
    for model in sorted(by_model, key=MODELS.index):
        spec = model_spec(model)
        lines.append(f"[{spec.group}]")
        lines += [
            f"{h.name} gpufleet_transport={transport} gpufleet_lab_dir={labd} "
            f"gpufleet_rack={h.rack}"
            for h in by_model[model]
        ]
        lines += ["", f"[{spec.group}:vars]"]
        vars_: dict[str, object] = {
            "gpufleet_pool": spec.pool,
            "gpufleet_gpu_count": spec.gpu_count,
            "gpufleet_gpu_model": spec.gpu_model,
            "gpufleet_gpu_memory_mib": spec.gpu_memory_mib,
            "gpufleet_fabric": spec.fabric,
        }
        if spec.fabric != "none":
            vars_["gpufleet_ib_ports"] = spec.ib_ports
            vars_["gpufleet_ib_rate_gbps"] = int(spec.ib_rate_gbps or 0)
        if spec.nvlink_per_gpu:
            vars_["gpufleet_nvlink_per_gpu"] = spec.nvlink_per_gpu
        vars_["gpufleet_nvswitch"] = "true" if spec.nvswitch else "false"
        lines += [f"{k}={v}" for k, v in vars_.items()]
        lines.append("")
    lines.append("[lab:children]")
    lines += [model_spec(m).group for m in sorted(by_model, key=MODELS.index)]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


# --------------------------------------------------------------------------- templates

_SLOT = re.compile(r"\x00(\w+)\x00")
_Pieces = tuple[str, ...]  # literal, slot name, literal, slot name, ..., literal


def _slot(name: str) -> str:
    return f"\x00{name}\x00"


def _compile(text: str) -> _Pieces:
    return tuple(_SLOT.split(text))


def _fill(pieces: _Pieces, values: Mapping[str, str]) -> str:
    out = list(pieces)
    for i in range(1, len(out), 2):
        out[i] = values[out[i]]
    return "".join(out)


def _sub_once(pattern: str, repl: str, text: str, what: str, *, optional: bool = False) -> str:
    """Substitute exactly one match (fails loudly if a capture does not look as expected)."""
    new, n = re.subn(pattern, repl, text, flags=re.M)
    if n != 1 and not (optional and n == 0):
        raise RuntimeError(f"lab template: {what}: expected one match of {pattern!r}, got {n}")
    return new


@dataclass(frozen=True)
class _Template:
    spec: ModelSpec
    driver: str
    product: str  # GPU product name as nvidia-smi prints it
    head: _Pieces  # slot "attached"
    blocks: tuple[_Pieces, ...]  # per captured GPU; slots serial/uuid/pdi(+bus fields)
    bus_ids: tuple[str, ...]  # lspci form, one per GPU of the host
    tail: str
    nvlink: tuple[_Pieces, ...]  # per captured GPU; slots idx/uuid; () = no NVLink
    ibstat: str | None
    topo: str | None  # real topo -m served as is (with the slot-free capture)


def _path(rel: str) -> Path:
    return captures_dir() / rel


def _xml_block_slots(block: str, replicate: bool) -> str:
    block = _sub_once(
        r"(<serial>)[^<]*(</serial>)", rf"\g<1>{_slot('serial')}\g<2>", block, "serial"
    )
    block = _sub_once(r"(<uuid>)[^<]*(</uuid>)", rf"\g<1>{_slot('uuid')}\g<2>", block, "uuid")
    if replicate:
        for tag, slot in (
            ("pci_bus", "bus"),
            ("pci_device", "dev"),
            ("pci_domain", "dom"),
            ("pci_bus_id", "busid"),
            ("minor_number", "minor"),
        ):
            block = _sub_once(rf"(<{tag}>)[^<]*(</{tag}>)", rf"\g<1>{_slot(slot)}\g<2>", block, tag)
        block = _sub_once(
            r'^(    <gpu id=")[^"]*(">)', rf"\g<1>{_slot('busid')}\g<2>", block, "gpu id"
        )
        block = _sub_once(
            r"(<gpu_module_id>)\d+(</gpu_module_id>)",
            rf"\g<1>{_slot('module')}\g<2>",
            block,
            "module",
            optional=True,
        )
    return block


def _text_block_slots(block: str, replicate: bool) -> str:
    block = _sub_once(r"^(    Serial Number\s+: ).*$", rf"\g<1>{_slot('serial')}", block, "serial")
    block = _sub_once(r"^(    GPU UUID\s+: ).*$", rf"\g<1>{_slot('uuid')}", block, "uuid")
    block = _sub_once(
        r"^(    GPU PDI\s+: ).*$", rf"\g<1>{_slot('pdi')}", block, "pdi", optional=True
    )
    if replicate:
        block = _sub_once(
            r"^GPU [0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d$",
            f"GPU {_slot('busid')}",
            block,
            "GPU header",
        )
        for key, slot in (("Bus", "bus"), ("Device", "dev"), ("Domain", "dom")):
            block = _sub_once(
                rf"^(        {key}\s+: 0x)[0-9A-Fa-f]+$", rf"\g<1>{_slot(slot)}", block, key
            )
        block = _sub_once(r"^(        Bus Id\s+: ).*$", rf"\g<1>{_slot('busid')}", block, "Bus Id")
        block = _sub_once(r"^(    Minor Number\s+: ).*$", rf"\g<1>{_slot('minor')}", block, "minor")
        block = _sub_once(
            r"^(        Module Id\s+: )\d+$",
            rf"\g<1>{_slot('module')}",
            block,
            "module",
            optional=True,
        )
    return block


def _disable_mig(xml: str) -> str:
    """MIG off, as ``nvidia-smi -mig 0`` + reset leaves it (the only capture had MIG on)."""
    xml = re.sub(r"<(current|pending)_mig>Enabled</", r"<\1_mig>Disabled</", xml)
    return re.sub(
        r"<mig_devices>.*?</mig_devices>",
        "<mig_devices>\n            None\n        </mig_devices>",
        xml,
        flags=re.S,
    )


def _lspci_bus(xml_bus_id: str) -> str:
    """ "00000000:00:0D.0" -> "0000:00:0d.0"."""
    dom, bus, rest = xml_bus_id.split(":")
    return f"{dom[-4:]}:{bus}:{rest}".lower()


@cache
def _exporter_bundle(rel: str) -> dict[str, str]:
    return load_exporter_bundle(_path(rel))


def _smi_template(
    spec: ModelSpec,
) -> tuple[str, _Pieces, tuple[_Pieces, ...], tuple[str, ...], str]:
    if spec.smi_format == "xml":
        text = _path(spec.smi_file).read_text(encoding="utf-8")
        if spec.replicate:
            text = _disable_mig(text)
        # Datacenter hosts run nvidia-persistenced; these captures come from boxes that did not.
        text = text.replace(
            "<persistence_mode>Disabled</persistence_mode>",
            "<persistence_mode>Enabled</persistence_mode>",
        )
        driver = re.search(r"<driver_version>([^<]+)</", text)
        starts = [m.start() for m in re.finditer(r"^    <gpu id=", text, re.M)]
        end = text.rindex("    </gpu>") + len("    </gpu>\n")
        head = _sub_once(
            r"(<attached_gpus>)\d+(</attached_gpus>)",
            rf"\g<1>{_slot('attached')}\g<2>",
            text[: starts[0]],
            "attached",
        )
        raw_blocks = [text[a:b] for a, b in zip(starts, [*starts[1:], end], strict=True)]
        bus_ids = tuple(_lspci_bus(re.findall(r"<pci_bus_id>([^<]+)<", b)[0]) for b in raw_blocks)
        blocks = [_xml_block_slots(b, spec.replicate) for b in raw_blocks]
        tail = text[end:]
    else:
        text = _exporter_bundle(spec.smi_file)["idle :: query (-q)"]
        # Datacenter hosts run nvidia-persistenced (see the XML branch).
        text = re.sub(r"^(    Persistence Mode\s+: )Disabled$", r"\g<1>Enabled", text, flags=re.M)
        driver = re.search(r"^Driver Version\s+: (\S+)$", text, re.M)
        starts = [m.start() for m in re.finditer(r"^GPU [0-9A-Fa-f]{8}:", text, re.M)]
        # nvidia-smi -q opens with an empty line; the bundle drops it with the section gap
        head_text = "\n" + text[: starts[0]].lstrip("\n")
        head = _sub_once(
            r"^(Attached GPUs\s+: )\d+$", rf"\g<1>{_slot('attached')}", head_text, "attached"
        )
        raw_blocks = [
            text[a:b].rstrip("\n") + "\n"
            for a, b in zip(starts, [*starts[1:], len(text)], strict=True)
        ]
        bus_ids = tuple(_lspci_bus(b.split("\n", 1)[0].split()[1]) for b in raw_blocks)
        blocks = [_text_block_slots(b, spec.replicate) for b in raw_blocks]
        tail = ""
    if driver is None:
        raise RuntimeError(f"lab template {spec.smi_file}: no driver version")
    if spec.replicate:
        bus_ids = spec.gpu_bus_ids
    if len(bus_ids) != spec.gpu_count or not (spec.replicate or len(blocks) == spec.gpu_count):
        raise RuntimeError(f"lab template {spec.name}: GPU count does not match the capture")
    return driver.group(1), _compile(head), tuple(_compile(b) for b in blocks), bus_ids, tail


def _nvlink_template(spec: ModelSpec) -> tuple[_Pieces, ...]:
    if spec.nvlink_file is None:
        return ()
    if spec.nvlink_file == "bundle":
        text = _exporter_bundle(spec.smi_file)["capabilities :: nvlink -s"]
    else:
        text = _path(spec.nvlink_file).read_text(encoding="utf-8")
    starts = [m.start() for m in re.finditer(r"^GPU \d+: ", text, re.M)]
    out = []
    for a, b in zip(starts, [*starts[1:], len(text)], strict=True):
        block = text[a:b].rstrip("\n") + "\n"
        block = _sub_once(r"^GPU \d+: ", f"GPU {_slot('idx')}: ", block, "nvlink GPU")
        block = _sub_once(r"\(UUID: [^)]*\)", f"(UUID: {_slot('uuid')})", block, "nvlink UUID")
        out.append(_compile(block))
    return tuple(out)


@cache
def _template(model: str) -> _Template:
    spec = model_spec(model)
    driver, head, blocks, bus_ids, tail = _smi_template(spec)
    ibstat = _path(spec.ibstat_file).read_text(encoding="utf-8") if spec.ibstat_file else None
    topo = _exporter_bundle(spec.smi_file)[spec.topo_capture] if spec.topo_capture else None
    product = re.search(
        r"<product_name>([^<]+)<|^    Product Name\s+: (.+)$", "".join(blocks[0]), re.M
    )
    assert product is not None
    return _Template(
        spec=spec,
        driver=driver,
        product=product[1] or product[2],
        head=head,
        blocks=blocks,
        bus_ids=bus_ids,
        tail=tail,
        nvlink=_nvlink_template(spec),
        ibstat=ibstat,
        topo=topo,
    )


# --------------------------------------------------------------------------- identities


def _digest(*parts: object) -> bytes:
    return hashlib.blake2b("|".join(map(str, parts)).encode(), digest_size=16).digest()


def _pick(n: int, *parts: object) -> int:
    return int.from_bytes(_digest(*parts)[:4], "big") % n


def fault_gpu_index(host: LabHost) -> int:
    """Index of the GPU the host's GPU faults (and a GPU swap) apply to; stable per host."""
    return _pick(host.spec.gpu_count, "suspect", host.name, host.serial_salt)


# Serial prefixes: the capture's own when it has a real one, else a plausible factory code
# (the exporter and A10G captures mask the serial to zeros).
_SERIAL_PREFIX = {
    "v100s-8x": "1562",
    "a100-8x": "1650",
    "h100-8x": "1654",
    "a10g-1x": "1323",
    "l40s-1x": "1322",
}


def _identity(host: LabHost, index: int) -> dict[str, str]:
    generation = host.gpu_swap if index == fault_gpu_index(host) else 0
    h = _digest("gpu", host.model, host.serial_salt, index, generation).hex()
    # Serial = prefix + salt + index + swap generation: unique for unique salts (13 digits).
    serial = f"{_SERIAL_PREFIX[host.model]}{host.serial_salt:06d}{index}{generation % 100:02d}"
    return {
        "serial": serial,
        "uuid": f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}",
        "pdi": f"0x{h[16:32]}",
    }


def _bus_values(bus_id: str, index: int, fmt: str) -> dict[str, str]:
    dom, bus, devfn = bus_id.split(":")
    dev = devfn.split(".")[0]
    full = f"0000{dom}:{bus}:{devfn}".upper()
    return {
        "busid": full,
        "bus": bus.upper(),
        "dev": dev.upper(),
        "dom": dom.upper() if fmt == "text" else dom,
        "minor": str(index),
        "module": str(index + 1),
    }


# --------------------------------------------------------------------------- rendering


def _effective_driver(host: LabHost, tpl: _Template) -> str:
    base = host.driver or tpl.driver
    for f in host.faults:
        kind, arg = _split_fault(f)
        if kind == "driver-drift":
            if arg:
                return arg
            return DEFAULT_DRIFT_DRIVER if base != DEFAULT_DRIFT_DRIVER else _ALT_DRIFT_DRIVER
    return base


def _set_ecc(block: str, fmt: str) -> str:
    if fmt == "text":
        return re.sub(r"^(\s+DRAM Uncorrectable\s+: )\d+$", r"\g<1>2", block, flags=re.M)
    if "<dram_uncorrectable>" in block:  # DTD v12+
        return re.sub(r"<dram_uncorrectable>\d+<", "<dram_uncorrectable>2<", block)

    def dbe(m: re.Match[str]) -> str:  # DTD v11: volatile/aggregate <double_bit> totals
        return re.sub(r"<(device_memory|total)>\d+<", r"<\1>2<", m.group(0))

    return re.sub(r"<double_bit>.*?</double_bit>", dbe, block, flags=re.S)


def _set_remap(block: str, fmt: str, what: str) -> str:
    if fmt == "xml":
        return block.replace(f"<remapped_row_{what}>No<", f"<remapped_row_{what}>Yes<")
    start = block.index("    Remapped Rows\n")
    key = "Pending" if what == "pending" else "Remapping Failure Occurred"
    rest = re.sub(rf"^(        {key}\s+: )No$", r"\g<1>Yes", block[start:], count=1, flags=re.M)
    return block[:start] + rest


def _gpu_sections(host: LabHost, tpl: _Template) -> tuple[list[int], str, str]:
    """(indices of GPUs the driver sees, nvidia-smi XML, nvidia-smi -q text)."""
    spec = tpl.spec
    kinds = {_split_fault(f)[0] for f in host.faults}
    suspect = fault_gpu_index(host)
    present = [i for i in range(spec.gpu_count) if not ("gpu-missing" in kinds and i == suspect)]
    blocks = []
    for i in present:
        values = _identity(host, i)
        if spec.replicate:
            values |= _bus_values(tpl.bus_ids[i], i, spec.smi_format)
        block = _fill(tpl.blocks[i % len(tpl.blocks)], values)
        if i == suspect:
            if "ecc-uncorrectable" in kinds:
                block = _set_ecc(block, spec.smi_format)
            if "remap-pending" in kinds:
                block = _set_remap(block, spec.smi_format, "pending")
            if "remap-failure" in kinds:
                block = _set_remap(block, spec.smi_format, "failure")
        blocks.append(block)
    head = _fill(tpl.head, {"attached": str(len(present))})
    sep = "\n" if spec.smi_format == "text" else ""
    body = head + sep.join(blocks) + tpl.tail
    driver = _effective_driver(host, tpl)
    if driver != tpl.driver:
        body = body.replace(tpl.driver, driver)
    if spec.smi_format == "xml":
        return present, body, ""
    return present, "", body


def _nvlink(host: LabHost, tpl: _Template, present: list[int]) -> str:
    if not tpl.nvlink:
        # A GPU without NVLink: the per-GPU header line and no links (generated, see module doc)
        return "".join(
            f"GPU {pos}: {tpl.product} (UUID: {_identity(host, i)['uuid']})\n"
            for pos, i in enumerate(present)
        )
    pieces = tpl.nvlink
    return "".join(
        _fill(pieces[i % len(pieces)], {"idx": str(pos), "uuid": _identity(host, i)["uuid"]})
        for pos, i in enumerate(present)
    )


_LEGEND = "".join(
    line + "\n"
    for line in (  # verbatim from the exporter's topo -m capture
        "Legend:",
        "",
        "  X    = Self",
        "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes "
        "(e.g., QPI/UPI)",
        "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges "
        "within a NUMA node",
        "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)",
        "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host "
        "Bridge)",
        "  PIX  = Connection traversing at most a single PCIe bridge",
        "  NV#  = Connection traversing a bonded set of # NVLinks",
    )
)


def _ibstat_cas(ibstat: str) -> list[tuple[str, str, str, str]]:
    """(name, CA type, link layer, rate) per CA, in output order."""
    out = []
    for block in re.split(r"(?m)^(?=CA ')", ibstat):
        m = re.match(r"CA '([^']+)'", block)
        if not m:
            continue
        ca_type, layer, rate = (
            re.search(rf"^\s+{k}: (\S+)", block, re.M) for k in ("CA type", "Link layer", "Rate")
        )
        out.append(
            (
                m.group(1),
                ca_type[1] if ca_type else "",
                layer[1] if layer else "",
                rate[1] if rate else "",
            )
        )
    return out


def _pci_order(name: str) -> tuple[str, int]:
    """mlx5_2 before mlx5_10: device names follow PCI order, ibstat sorts them as text."""
    m = re.fullmatch(r"(\D+)(\d+)", name)
    return (m[1], int(m[2])) if m else (name, 1 << 30)


def _fabric_cas(spec: ModelSpec, ibstat: str) -> list[str]:
    """The high-speed ports (the expected spec's ``ib_ports``), in PCI order."""
    layer = "InfiniBand" if spec.fabric == "ib" else "Ethernet"
    rate = f"{spec.ib_rate_gbps:g}"
    return sorted(
        (n for n, _, ll, r in _ibstat_cas(ibstat) if ll == layer and r == rate), key=_pci_order
    )


@dataclass(frozen=True)
class _Dev:
    label: str  # column/row name: "GPU3", "NIC0" (or "mlx5_0" on older drivers)
    gpu: int | None  # physical GPU slot
    nic: str | None
    numa: int
    switch: int | None  # PCIe switch shared by a GPU and its fabric NIC


def _topo(tpl: _Template, present: list[int], driver: str) -> str:
    """Generated ``topo -m`` (no permitted 8-GPU capture exists; format of the real one)."""
    if tpl.topo is not None:
        return tpl.topo
    spec = tpl.spec
    new_format = int(driver.split(".")[0]) >= 535  # "GPU NUMA ID" column and NIC legend
    half = max(1, spec.gpu_count // 2)
    nics = sorted((c[0] for c in _ibstat_cas(tpl.ibstat)), key=_pci_order) if tpl.ibstat else []
    fabric = _fabric_cas(spec, tpl.ibstat) if tpl.ibstat else []
    devs = [_Dev(f"GPU{pos}", i, None, int(i >= half), i) for pos, i in enumerate(present)]
    for k, name in enumerate(nics):
        slot = fabric.index(name) if name in fabric else None
        devs.append(
            _Dev(
                f"NIC{k}" if new_format else name,
                None,
                name,
                int(slot >= half) if slot is not None else k % 2,
                slot,
            )
        )

    def link(a: _Dev, b: _Dev) -> str:
        if a == b:
            return " X "
        if a.gpu is not None and b.gpu is not None and spec.nvlink_per_gpu:
            return f"NV{spec.nvlink_per_gpu}"
        if a.switch is not None and a.switch == b.switch:
            return "PXB"  # a GPU and its own NIC sit behind one PCIe switch
        return "NODE" if a.numa == b.numa else "SYS"

    per_socket = spec.nproc // 4  # cores per socket; hyper-thread siblings follow all cores
    affinity = (
        [
            f"{s * per_socket}-{(s + 1) * per_socket - 1},"
            f"{(s + 2) * per_socket}-{(s + 3) * per_socket - 1}"
            for s in (0, 1)
        ]
        if spec.gpu_count > 1
        else [f"0-{spec.nproc - 1}"] * 2
    )
    cols = ["CPU Affinity", "NUMA Affinity"] + (["GPU NUMA ID"] if new_format else [])
    lines = ["\t\x1b[4m" + "\t".join([d.label for d in devs] + cols) + "\x1b[0m"]
    for d in devs:
        row = [d.label] + [link(d, other) for other in devs]
        if d.gpu is not None:
            row += [affinity[d.numa], str(d.numa)]
            # the real output has an empty field before "GPU NUMA ID" (exporter capture)
            row += ["", "N/A"] if new_format else []
        elif not new_format:
            row += ["", ""]  # older drivers pad NIC rows with the empty affinity fields
        lines.append("\t".join(row))
    text = "\n".join(lines) + "\n\n" + _LEGEND
    if new_format and nics:
        text += "\nNIC Legend:\n\n" + "".join(f"  NIC{k}: {n}\n" for k, n in enumerate(nics))
    return text


def _ibstat(host: LabHost, tpl: _Template) -> str:
    assert tpl.ibstat is not None
    text = tpl.ibstat
    for f in host.faults:
        kind, arg = _split_fault(f)
        if kind not in ("ib-down", "ib-polling"):
            continue
        fabric = _fabric_cas(tpl.spec, text)
        ca = arg or fabric[_pick(len(fabric), "port", host.name, host.serial_salt)]
        phys = "Disabled" if kind == "ib-down" else "Polling"
        blocks = re.split(r"(?m)^(?=CA ')", text)
        for j, block in enumerate(blocks):
            if block.startswith(f"CA '{ca}'"):
                block = re.sub(r"(?m)^(\s+State: )\w+$", r"\g<1>Down", block, count=1)
                blocks[j] = re.sub(
                    r"(?m)^(\s+Physical state: )\w+$", rf"\g<1>{phys}", block, count=1
                )
                break
        else:
            raise ConfigError(f"{host.name}: {f}: no RDMA adapter {ca!r}")
        text = "".join(blocks)
    return text


_MT_PCI = {  # ibstat "CA type" (PCI device id, decimal) -> lspci -nn name
    "MT4129": "Mellanox Technologies MT2910 Family [ConnectX-7] [15b3:1021]",
    "MT4125": "Mellanox Technologies MT2892 Family [ConnectX-6 Dx] [15b3:101d]",
    "MT4126": "Mellanox Technologies ConnectX Family mlx5Gen Virtual Function [15b3:101e]",
    "MT41692": "Mellanox Technologies MT43244 BlueField-3 integrated ConnectX-7 network "
    "controller [15b3:a2dc] (rev 01)",
}


def _lspci(tpl: _Template) -> str:
    """Generated ``lspci -nn -D`` (every GPU, whether or not the driver sees it)."""
    spec = tpl.spec
    lines = [f"{b} 3D controller [0302]: {spec.pci_gpu}" for b in tpl.bus_ids]
    if tpl.ibstat:
        cas = sorted(_ibstat_cas(tpl.ibstat), key=lambda ca: _pci_order(ca[0]))
        for (name, mt, layer, _), bus in zip(cas, spec.nic_bus_ids, strict=True):
            cls = (
                "Infiniband controller [0207]"
                if layer == "InfiniBand"
                else "Ethernet controller [0200]"
            )
            funcs = (".0", ".1") if "bond" in name else (".0",)  # a bond spans two functions
            lines += [f"{bus[:-2]}{fn} {cls}: {_MT_PCI[mt]}" for fn in funcs]
    lines += spec.extra_pci
    return "\n".join(sorted(lines)) + "\n"


_XID_MESSAGES = {  # codes the iso capture does not contain; texts as the driver prints them
    79: "GPU has fallen off the bus.",
    13: "Graphics Exception: ChID 0008, Class 0000c9c0, Offset 00000510, Data 0017e2ac",
    31: "Ch 00000010, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ "
    "0x7f31_c0000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
    45: "Ch 00000008",
    74: "NVLink: fatal error detected on link 3(0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0)",
    92: "High single-bit ECC error rate detected",
    95: "Uncontained: FBHUB. RST: Yes, D-RST: No",
    119: "Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function 76 "
    "(GSP_RM_CONTROL) (0x20803032 0x58c).",
}
_XID_LINE = re.compile(
    r"^(?P<ts>\S+) NVRM: Xid \(PCI:(?P<pci>[^)]+)\): (?P<code>\d+), "
    r"(?P<who>pid=.*?, name=.*?), (?P<msg>.*)$"
)


@cache
def _xid_format() -> tuple[str, dict[int, str]]:
    """The first Xid line of the iso capture as a format, and the capture's messages by code."""
    text = _path("kernel-log/gpud_dmesg-time-format-iso.log").read_text(encoding="utf-8")
    fmt: str | None = None
    messages: dict[int, str] = {}
    for line in text.splitlines():
        m = _XID_LINE.match(line)
        if not m:
            continue
        if fmt is None:
            fmt = (
                "{ts} NVRM: Xid (PCI:{pci}): {code}, "
                + m["who"].replace("{", "{{").replace("}", "}}")
                + ", {msg}"
            )
        messages.setdefault(int(m["code"]), m["msg"])
    if fmt is None:
        raise RuntimeError("lab template: no Xid line in gpud_dmesg-time-format-iso.log")
    return fmt, messages


_XID_EPOCH = datetime(2025, 1, 14, 3, 12, 45, 118204, tzinfo=UTC)


def _xids(host: LabHost, tpl: _Template) -> str:
    fmt, captured = _xid_format()
    lines = []
    for n, f in enumerate(f for f in host.faults if _split_fault(f)[0] == "xid"):
        parts = f.split(":")
        code = int(parts[1])
        gpu = int(parts[2]) if len(parts) > 2 else fault_gpu_index(host)
        dom, bus, devfn = tpl.bus_ids[gpu].split(":")
        if host.xid_at is not None:
            ts = host.xid_at.astimezone(UTC) + timedelta(seconds=n)
        else:
            ts = _XID_EPOCH + timedelta(
                seconds=_pick(86400, "xid", host.name) + 97 * n,
                microseconds=_pick(10**6, "us", host.name, n),
            )
        msg = captured.get(code) or _XID_MESSAGES.get(code) or "Ch 00000008"
        lines.append(
            fmt.format(
                ts=ts.strftime("%Y-%m-%dT%H:%M:%S,%f+00:00"),
                pci=f"{dom}:{bus}:{devfn.split('.')[0]}",
                code=code,
                msg=msg,
            )
        )
    return "".join(line + "\n" for line in lines)


_CTK_VERSION = (
    "NVIDIA Container Toolkit CLI version 1.12.0\ncommit: 62bd015475656ef795cb0d59cc4030a6bd4a9526"
)

_OS_RELEASE = """PRETTY_NAME="Ubuntu 22.04.5 LTS"
NAME="Ubuntu"
VERSION_ID="22.04"
VERSION="22.04.5 LTS (Jammy Jellyfish)"
VERSION_CODENAME=jammy
ID=ubuntu
ID_LIKE=debian
HOME_URL="https://www.ubuntu.com/"
SUPPORT_URL="https://help.ubuntu.com/"
BUG_REPORT_URL="https://bugs.launchpad.net/ubuntu/"
PRIVACY_POLICY_URL="https://www.ubuntu.com/legal/terms-and-policies/privacy-policy"
UBUNTU_CODENAME=jammy
"""
_KERNEL = "5.15.0-125-generic"


def _meminfo(spec: ModelSpec) -> str:
    total = spec.mem_total_kib
    rows = [
        ("MemTotal", total),
        ("MemFree", total * 87 // 100),
        ("MemAvailable", total * 93 // 100),
        ("Buffers", 2154816),
        ("Cached", total * 5 // 100),
        ("SwapCached", 0),
        ("SwapTotal", 0),
        ("SwapFree", 0),
        ("HugePages_Total", 0),
    ]
    # /proc/meminfo: name padded to 16 columns, value right-aligned in 8 ("kB" except hugepages)
    return "".join(
        f"{k + ':':<16}{v:>8}{'' if k.startswith('HugePages') else ' kB'}\n" for k, v in rows
    )


def _modules(spec: ModelSpec) -> str:
    # /proc/modules as an unprivileged reader sees it (addresses zeroed)
    z = "Live 0x0000000000000000"
    rdma = spec.ibstat_file is not None
    rows = [
        f"nvidia_uvm 1437696 4 - {z} (POE)",
        *([f"nvidia_peermem 16384 0 - {z} (POE)"] if rdma else []),
        f"nvidia_drm 77824 0 - {z} (POE)",
        f"nvidia_modeset 1306624 1 nvidia_drm, {z} (POE)",
        f"nvidia 56717312 {106 if rdma else 26} nvidia_uvm,"
        f"{'nvidia_peermem,' if rdma else ''}nvidia_modeset, {z} (POE)",
    ]
    if rdma:
        rows += [
            f"rdma_ucm 28672 0 - {z} (OE)",
            f"ib_ipoib 139264 0 - {z} (OE)",
            f"ib_umad 36864 0 - {z} (OE)",
            f"mlx5_ib 458752 0 - {z} (OE)",
            f"ib_uverbs 163840 3 nvidia_peermem,rdma_ucm,mlx5_ib, {z} (OE)",
            f"ib_core 454656 7 rdma_ucm,ib_ipoib,ib_umad,mlx5_ib,ib_uverbs,rdma_cm,ib_cm, {z} (OE)",
            f"mlx5_core 2080768 1 mlx5_ib, {z} (OE)",
            f"mlxfw 36864 1 mlx5_core, {z} (OE)",
            f"mlx_compat 69632 9 rdma_ucm,ib_ipoib,ib_umad,mlx5_ib,ib_uverbs,ib_core,mlx5_core, "
            f"{z} (OE)",
            f"psample 20480 1 mlx5_core, {z}",
            f"tls 114688 1 mlx5_core, {z}",
        ]
    if spec.dmi[0] == "Amazon EC2":
        rows.append(f"ena 147456 0 - {z}")
    nvme = sum(d[0].startswith("nvme") for d in spec.disks)
    if nvme:
        rows += [f"nvme 49152 {nvme} - {z}", f"nvme_core 139264 {nvme + 1} nvme, {z}"]
    else:
        rows.append(f"virtio_blk 24576 2 - {z}")
    return "".join(r + "\n" for r in rows)


def _sysctl(spec: ModelSpec) -> str:
    tuned = spec.fabric != "none"  # training pools carry the NCCL/RDMA tuning
    values = {
        "vm.max_map_count": "262144" if tuned else "65530",
        "vm.swappiness": "60",
        "net.core.rmem_max": "2147483647" if tuned else "212992",
        "net.core.wmem_max": "2147483647" if tuned else "212992",
        "kernel.numa_balancing": "0" if tuned else "1",
        "net.ipv4.tcp_mtu_probing": "0",
    }
    return "".join(f"{k} = {values[k]}\n" for k in SYSCTL_KEYS)


def _lsblk(spec: ModelSpec) -> str:
    out = []
    for name, size, model in spec.disks:
        tran = "nvme" if name.startswith("nvme") else ""
        out.append(f'NAME="{name}" SIZE="{size}" TRAN="{tran}" ROTA="0" MODEL="{model}"')
    return "\n".join(out) + "\n"


def _not_found(name: str, tool: str) -> Section:
    return Section(name, "", f"sh: 1: {tool}: not found", _NOT_FOUND_RC)


def _garbage(host: LabHost) -> str:
    """Non-XML noise, as a wedged terminal or a broken pipe might leave."""
    rng = random.Random(f"garbage|{host.name}")
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=#;:%&*"
    return "\n".join("".join(rng.choice(alphabet) for _ in range(72)) for _ in range(24))


@dataclass(frozen=True)
class _Render:
    """What the section renderers of one host share (computed once per host)."""

    host: LabHost
    tpl: _Template
    present: list[int]
    xml: str
    qtext: str
    driver: str

    @property
    def spec(self) -> ModelSpec:
        return self.tpl.spec


def _ok(stdout: str) -> tuple[str, str, int]:
    return stdout, "", 0


def _not_found_out(tool: str) -> tuple[str, str, int]:
    return "", f"sh: 1: {tool}: not found", _NOT_FOUND_RC


def _xml_out(r: _Render) -> tuple[str, str, int]:
    if r.spec.smi_format == "xml":
        return _ok(r.xml)
    return (
        "",
        f"gpufleet lab: the 'nvidia-smi -q -x' capture is not available for lab model "
        f"{r.spec.name} (this host answers 'nvidia-smi -q')",
        2,
    )


def _q_out(r: _Render) -> tuple[str, str, int]:
    # Not run when the XML answered (the script skips it: empty, rc 0).
    return _ok("" if r.spec.smi_format == "xml" else r.qtext)


#: One renderer per registered section (:data:`gpufleet.collect.sections.REGISTRY`):
#: section name -> (stdout, stderr, rc) as a healthy host of the model answers; faults are
#: applied afterwards by :func:`render_sections`.
RENDERERS: dict[str, Callable[[_Render], tuple[str, str, int]]] = {
    "hostname": lambda r: _ok(r.host.name),
    "os-release": lambda r: _ok(_OS_RELEASE),
    "uname-r": lambda r: _ok(_KERNEL),
    "nproc": lambda r: _ok(str(r.spec.nproc)),
    "meminfo": lambda r: _ok(_meminfo(r.spec)),
    "dmi": lambda r: _ok("\n".join(r.spec.dmi) + "\n"),
    "modules": lambda r: _ok(_modules(r.spec)),
    "sysctl": lambda r: _ok(_sysctl(r.spec)),
    "nvidia-smi-xml": _xml_out,
    "nvidia-smi-q": _q_out,
    "topo-m": lambda r: _ok(_topo(r.tpl, r.present, r.driver)),
    "nvlink-s": lambda r: _ok(_nvlink(r.host, r.tpl, r.present)),
    "ibstat": lambda r: (
        _ok(_ibstat(r.host, r.tpl)) if r.tpl.ibstat is not None else _not_found_out("ibstat")
    ),
    "lspci-nn": lambda r: _ok(_lspci(r.tpl)),
    "kernel-xid": lambda r: _ok(_xids(r.host, r.tpl)),
    "lsblk": lambda r: _ok(_lsblk(r.spec)),
    # fm(): "active" when systemctl says so; otherwise pgrep fails too and fm echoes "inactive".
    "fabricmanager": lambda r: _ok("active" if r.spec.nvswitch else "inactive"),
    # No capture of `nv-fabricmanager --version` exists in the fixtures; this line follows the
    # tool's wording, and the parser only takes the first dotted version from it. The fabric
    # manager package version always equals the driver's.
    "fabricmanager-version": lambda r: (
        _ok(f"Fabric Manager version is : {r.driver}")
        if r.spec.nvswitch
        else _not_found_out("nv-fabricmanager")
    ),
    # Real `nvidia-ctk --version` output (NVIDIA/nvidia-container-toolkit issue #50).
    "container-toolkit": lambda r: _ok(_CTK_VERSION),
}


def render_sections(host: LabHost) -> dict[str, Section]:
    """Every registered section (:data:`SECTIONS`) as the host answers the collection script."""
    tpl = _template(host.model)
    spec = tpl.spec
    kinds = {_split_fault(f)[0] for f in host.faults}
    present, xml, qtext = _gpu_sections(host, tpl)
    ctx = _Render(host, tpl, present, xml, qtext, _effective_driver(host, tpl))
    s: dict[str, Section] = {}
    for name in SECTIONS:
        try:
            render = RENDERERS[name]
        except KeyError:
            raise NotImplementedError(f"the lab renders no section {name!r}") from None
        s[name] = Section(name, *render(ctx))

    if "nvidia-smi-missing" in kinds:
        for name in ("nvidia-smi-xml", "nvidia-smi-q", "topo-m", "nvlink-s"):
            s[name] = _not_found(name, "nvidia-smi")
    else:
        if "garbage" in kinds:
            s["nvidia-smi-xml"] = Section("nvidia-smi-xml", _garbage(host), "", 0)
            s["nvidia-smi-q"] = Section("nvidia-smi-q", "", "", 0)
        if "truncated" in kinds:
            name = "nvidia-smi-xml" if spec.smi_format == "xml" else "nvidia-smi-q"
            full = s[name].stdout
            cut = len(full) // 2
            if spec.smi_format == "text":
                # A text report cut inside a GPU section reads like a complete one, so the
                # cut is placed where that section starts: the GPU count then gives it away.
                cut = full.rfind("\nGPU ", 0, cut) + 1
            s[name] = Section(name, full[:cut], "", 0)
    # A tool's final newline is eaten by the framing (split_bundle drops it), so sections are
    # kept in that canonical form and split_bundle(render_output(h)) == render_sections(h).
    return {
        name: Section(name, _chomp(s[name].stdout), _chomp(s[name].stderr), s[name].rc)
        for name in SECTIONS
    }


def _chomp(text: str) -> str:
    return text[:-1] if text.endswith("\n") else text


def render_output(host: LabHost) -> str:
    """The framed output of the collection script on ``host`` (see :mod:`..collect.bundle`)."""
    return render_bundle(list(render_sections(host).values()))
