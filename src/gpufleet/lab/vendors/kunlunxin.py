"""Lab hosts of Kunlunxin XPUs (issue 28): the ``r300-2x`` model and its fault.

Captures served (tests/fixtures/captured/kunlunxin, PROVENANCE.md there): PaddlePaddle docs'
``xpu_smi`` of 2 R300 XPUs (runtime 4.31, driver 4.0; bus 53:00.0, 56:00.0; serials
anonymised ``02Kxxx`` upstream, read as printed), as captured.

lspci: PaddleNLP's plain ``lspci`` of an R300 host (tests/fixtures/captured/lspci) prints
``Communication controller: Device 1d22:3684``; its first two addresses are this capture's
(53:00.0, 56:00.0), so the lab lists those two functions in ``-nn`` form, with the class id of
a communication controller (``0780``). DMI, CPUs, memory and disks are the lab's choice.

Fault: ``xpu-missing`` drops one XPU's rows (DEVICES and VIDEO tables) from xpu_smi's answer;
lspci still lists it. xpu_smi 4.x states no health or error count: a device the tool lost is
the error state this model can show. Not yet in the mixed demo fleet.
"""

from __future__ import annotations

import re

from gpufleet.lab.captures import read_capture
from gpufleet.lab.catalogue import _M2_1T92, _NVME_PM983, NO_NVIDIA_FABRIC, ModelSpec
from gpufleet.lab.fleet import LabHost
from gpufleet.lab.templates import _pick
from gpufleet.lab.vendors import Answer, LabVendor

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


def render(host: LabHost, spec: ModelSpec) -> dict[str, Answer]:
    """xpu_smi's answer as ``host`` gives it (its fault applied)."""
    text = read_capture(spec.smi_file)
    if "xpu-missing" in host.faults:
        gone = _pick(spec.gpu_count, "kunlunxin", host.name, host.serial_salt)
        row = re.compile(rf"^\|\s+{gone} \|")
        text = "".join(ln for ln in text.splitlines(keepends=True) if not row.match(ln))
    return {"xpu_smi": (text, "", 0)}


def bus_ids(spec: ModelSpec) -> tuple[str, ...]:
    """The XPUs' PCI addresses (module docstring)."""
    return spec.gpu_bus_ids


def check_fault(spec: ModelSpec, kind: str, arg: str | None) -> str | None:
    return "it takes no argument" if arg is not None else None


LAB = LabVendor(
    vendor="kunlunxin",
    models=(R300_2X,),
    render=render,
    bus_ids=bus_ids,
    faults={"xpu-missing": "one XPU missing from xpu_smi's tables (lspci still lists it)"},
    check_fault=check_fault,
    rank=50,
)
