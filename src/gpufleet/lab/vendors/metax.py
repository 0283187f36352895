"""Lab hosts of MetaX GPUs (issue 28): the ``c500-8x`` model and its fault.

Captures served (tests/fixtures/captured/metax, PROVENANCE.md there): ms-swift's ``mx-smi``
2.2.9 of 8 MetaX C500 (KMD 3.4.4, MACA 3.3.0.15; bus 0e..38) and ``mx-smi topo -m`` of the
same host (two MetaXLink islands), as captured. No real ``lspci`` line of a MetaX GPU exists,
so the lab's host lists none on its PCI bus (the count check then compares mx-smi with the
spec's count only); DMI, CPUs, memory and disks are the lab's choice.

Fault: ``mx-gpu-missing`` drops one GPU from both answers: its two lines and border from
mx-smi's table, its row and column from the topology matrix, and ``Attached GPUs`` counts
one less in each (EDITED copies of the captures, made here). No capture shows a
``GPU-State`` other than ``Available``: a lost GPU is the error state this model can show.
The mixed demo fleet gets one such host, healthy, from 16 hosts on (``make demo``: 32).
"""

from __future__ import annotations

import re

from gpufleet.lab.captures import read_capture
from gpufleet.lab.catalogue import _M2_1T92, _NVME_PM983, NO_NVIDIA_FABRIC, ModelSpec
from gpufleet.lab.fleet import LabHost
from gpufleet.lab.templates import _pick
from gpufleet.lab.vendors import DEMO_FROM, Answer, LabVendor

TOPO_FILE = "metax/ms-swift_mx-smi_topo-m_8xc500.txt"
_CELL = 8  # the matrix's column width in the capture

C500_8X = ModelSpec(
    name="c500-8x",
    group="gpu_c500",
    pool="train-c500",
    gpu_model="C500",
    gpu_count=8,
    gpu_memory_mib=65536,
    smi_format="none",
    smi_file="metax/ms-swift_mx-smi_2.2.9_8xc500.txt",
    replicate=False,
    gpu_bus_ids=(),
    pci_gpu="",
    **NO_NVIDIA_FABRIC,
    extra_pci=tuple(f"0000:{b}:00.0 {_NVME_PM983}" for b in ("e1", "e2")),
    dmi=("Lab", "C500 host"),
    nproc=128,
    mem_total_kib=1056462336,
    disks=(("nvme0n1", _M2_1T92, "SAMSUNG MZ1L21T9HCLS-00A07"),),
    vendor="metax",
    serial_prefix="MX",
)


def _fewer_attached(text: str, count: int) -> str:
    out, n = re.subn(r"(?m)^(Attached GPUs\s+: )\d+$", rf"\g<1>{count - 1}", text, count=1)
    if n != 1:
        raise ValueError("no 'Attached GPUs' line in the capture")
    return out


def _without_gpu(smi: str, topo: str, gone: int, count: int) -> tuple[str, str]:
    lines = smi.splitlines(keepends=True)
    at = next(i for i, ln in enumerate(lines) if re.match(rf"^\| {gone}\s", ln))
    del lines[at : at + 3]  # the GPU's two lines and the border under them
    col = _CELL * (gone + 1)
    matrix = []
    for ln in topo.splitlines(keepends=True):
        if ln.startswith(f"GPU{gone} "):
            continue
        if ln.startswith(("GPU", " " * _CELL + "GPU0")):
            ln = ln[:col] + ln[col + _CELL :]
        matrix.append(ln)
    return _fewer_attached("".join(lines), count), _fewer_attached("".join(matrix), count)


def render(host: LabHost, spec: ModelSpec) -> dict[str, Answer]:
    """mx-smi's table and topology as ``host`` answers them (its fault applied)."""
    smi, topo = read_capture(spec.smi_file), read_capture(TOPO_FILE)
    if "mx-gpu-missing" in host.faults:
        gone = _pick(spec.gpu_count, "metax", host.name, host.serial_salt)
        smi, topo = _without_gpu(smi, topo, gone, spec.gpu_count)
    return {"mx_smi": (smi, "", 0), "mx_smi_topo": (topo, "", 0)}


def bus_ids(spec: ModelSpec) -> tuple[str, ...]:
    """None: no real lspci capture of a MetaX GPU (module docstring)."""
    return ()


def check_fault(spec: ModelSpec, kind: str, arg: str | None) -> str | None:
    return "it takes no argument" if arg is not None else None


LAB = LabVendor(
    vendor="metax",
    models=(C500_8X,),
    render=render,
    bus_ids=bus_ids,
    faults={"mx-gpu-missing": "one GPU missing from mx-smi's table and topology"},
    check_fault=check_fault,
    demo=((C500_8X.name, ()),),
    demo_from=DEMO_FROM,
    rank=60,
)
