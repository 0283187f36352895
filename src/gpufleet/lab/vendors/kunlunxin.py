"""Lab hosts of Kunlunxin XPUs (issue 28): the ``r300-2x`` and ``p800-8x`` models, their faults.

Captures served (tests/fixtures/captured/kunlunxin, PROVENANCE.md there): PaddlePaddle docs'
``xpu_smi`` of 2 R300 XPUs (runtime 4.31, driver 4.0; bus 53:00.0, 56:00.0; serials
anonymised ``02Kxxx`` upstream, read as printed), as captured.

lspci: PaddleNLP's plain ``lspci`` of an R300 host (tests/fixtures/captured/lspci) prints
``Communication controller: Device 1d22:3684``; its first two addresses are this capture's
(53:00.0, 56:00.0), so the lab lists those two functions in ``-nn`` form, with the class id of
a communication controller (``0780``). DMI, CPUs, memory and disks are the lab's choice.

Fault: ``xpu-missing`` drops one XPU's rows (DEVICES and VIDEO tables) from xpu_smi's answer;
lspci still lists it. xpu_smi 4.x states no health or error count: a device the tool lost is
the error state this model can show.

``p800-8x`` serves ERNIE's ``xpu-smi`` of 8 P800 OAM (driver 5.0.21.21), as captured; no real
lspci line of a P800 exists, so its host lists none (the spec's count judges). Its error state
is the ``Volatile Uncorr. ECC`` count: the fault ``xpu-ecc`` sets one device's count from the
captured 0 to 1 (an EDITED copy made here), which the inspection reads as
``ecc_volatile_uncorrectable``. ``xpu-missing`` applies to it too (its three lines and
border dropped). The mixed demo fleet gets one healthy P800 host from 16 hosts on
(``make demo``: 32).
"""

from __future__ import annotations

import re

from gpufleet.lab.captures import read_capture
from gpufleet.lab.catalogue import _M2_1T92, _NVME_PM983, NO_NVIDIA_FABRIC, ModelSpec
from gpufleet.lab.fleet import LabHost
from gpufleet.lab.templates import _pick
from gpufleet.lab.vendors import DEMO_FROM, Answer, LabVendor

R300_2X = ModelSpec(
    name="r300-2x",
    group="xpu_r300",
    pool="infer-r300",
    gpu_model="R300",
    gpu_count=2,
    gpu_memory_mib=32768,
    smi_format="none",
    smi_file="kunlunxin/paddle-docs_xpu_smi_r300.txt",
    replicate=False,
    gpu_bus_ids=("0000:53:00.0", "0000:56:00.0"),
    pci_gpu="Communication controller [0780]: Device [1d22:3684]",
    **NO_NVIDIA_FABRIC,
    extra_pci=tuple(f"0000:{b}:00.0 {_NVME_PM983}" for b in ("e1", "e2")),
    dmi=("Lab", "R300 host"),
    nproc=64,
    mem_total_kib=527995616,
    disks=(("nvme0n1", _M2_1T92, "SAMSUNG MZ1L21T9HCLS-00A07"),),
    vendor="kunlunxin",
    serial_prefix="XPU",
)


P800_8X = ModelSpec(
    name="p800-8x",
    group="xpu_p800_oam",
    pool="train-p800",
    gpu_model="P800",
    gpu_count=8,
    gpu_memory_mib=98304,
    smi_format="none",
    smi_file="kunlunxin/ernie_xpu_smi_p800_8x.txt",
    replicate=False,
    gpu_bus_ids=(),
    pci_gpu="",
    **NO_NVIDIA_FABRIC,
    extra_pci=tuple(f"0000:{b}:00.0 {_NVME_PM983}" for b in ("e1", "e2")),
    dmi=("Lab", "P800 host"),
    nproc=128,
    mem_total_kib=1056462336,
    disks=(("nvme0n1", _M2_1T92, "SAMSUNG MZ1L21T9HCLS-00A07"),),
    vendor="kunlunxin",
    serial_prefix="XPU",
)


def faulty_device(host: LabHost, spec: ModelSpec) -> int:
    """The DevID the host's faults apply to (stable per host)."""
    return _pick(spec.gpu_count, "kunlunxin", host.name, host.serial_salt)


def _box_without(text: str, gone: int) -> str:
    lines = text.splitlines(keepends=True)
    at = next(i for i, ln in enumerate(lines) if re.match(rf"^\|\s+{gone}  P800", ln))
    del lines[at : at + 4]  # the device's three lines and the border under them
    return "".join(lines)


def _box_ecc(text: str, dev: int) -> str:
    lines = text.splitlines(keepends=True)
    at = next(i for i, ln in enumerate(lines) if re.match(rf"^\|\s+{dev}  P800", ln))
    lines[at], n = re.subn(r" 0 \|$", " 1 |", lines[at].rstrip("\n"))
    if n != 1:
        raise ValueError(f"XPU {dev}: no ECC count 0 in the capture")
    lines[at] += "\n"
    return "".join(lines)


def render(host: LabHost, spec: ModelSpec) -> dict[str, Answer]:
    """xpu_smi's answer as ``host`` gives it (its faults applied)."""
    text = read_capture(spec.smi_file)
    box = spec.name == P800_8X.name
    dev = faulty_device(host, spec)
    if "xpu-ecc" in host.faults:
        text = _box_ecc(text, dev)
    if "xpu-missing" in host.faults:
        if box:
            text = _box_without(text, dev)
        else:
            row = re.compile(rf"^\|\s+{dev} \|")
            text = "".join(ln for ln in text.splitlines(keepends=True) if not row.match(ln))
    return {"xpu_smi": (text, "", 0)}


def bus_ids(spec: ModelSpec) -> tuple[str, ...]:
    """The XPUs' PCI addresses (module docstring)."""
    return spec.gpu_bus_ids


def check_fault(spec: ModelSpec, kind: str, arg: str | None) -> str | None:
    if arg is not None:
        return "it takes no argument"
    if kind == "xpu-ecc" and spec.name != P800_8X.name:
        return "xpu_smi 4.x prints no ECC count (only the P800's xpu-smi 5.x does)"
    return None


LAB = LabVendor(
    vendor="kunlunxin",
    models=(R300_2X, P800_8X),
    render=render,
    bus_ids=bus_ids,
    faults={
        "xpu-missing": "one XPU missing from xpu_smi's tables (lspci still lists it)",
        "xpu-ecc": "one P800 reports an uncorrectable ECC error (Volatile Uncorr. ECC 1)",
    },
    check_fault=check_fault,
    demo=((P800_8X.name, ()),),
    demo_from=DEMO_FROM,
    rank=50,
)
