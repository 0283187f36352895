"""Lab hosts of Cambricon MLUs (issue 28): the ``mlu370-x8-2x`` model and its fault.

Captures served (tests/fixtures/captured/cambricon, PROVENANCE.md there): PaddlePaddle's
``cnmon`` v5.10.13 of 2 MLU370-X8 cards (bus ids 39:00.0, 3D:00.0), as captured. No real
``lspci`` line of an MLU exists, so the lab's host lists none on its PCI bus (the count check
then compares cnmon with the spec's count only); DMI, CPUs, memory and disks are the lab's
choice. Fault: ``mlu-missing`` drops one card (its two lines and border) from cnmon's table.
The mixed demo fleet gets one such host, healthy, from 16 hosts on (``make demo``: 32).
"""

from __future__ import annotations

from gpufleet.lab.captures import read_capture
from gpufleet.lab.catalogue import _M2_1T92, _NVME_PM983, NO_NVIDIA_FABRIC, ModelSpec
from gpufleet.lab.fleet import LabHost
from gpufleet.lab.templates import _pick
from gpufleet.lab.vendors import DEMO_FROM, Answer, LabVendor

MLU370_X8_2X = ModelSpec(
    name="mlu370-x8-2x",
    group="mlu_370_x8",
    pool="train-mlu370",
    gpu_model="MLU370-X8",
    gpu_count=2,
    gpu_memory_mib=23374,
    smi_format="none",
    smi_file="cambricon/paddle-docs_mlu_cnmon_v5.10.13_mlu370-x8.txt",
    replicate=False,
    gpu_bus_ids=(),
    pci_gpu="",
    **NO_NVIDIA_FABRIC,
    extra_pci=tuple(f"0000:{b}:00.0 {_NVME_PM983}" for b in ("e1", "e2")),
    dmi=("Lab", "MLU370-X8 host"),
    nproc=64,
    mem_total_kib=527995616,
    disks=(("nvme0n1", _M2_1T92, "SAMSUNG MZ1L21T9HCLS-00A07"),),
    vendor="cambricon",
    serial_prefix="MLU",
)


def render(host: LabHost, spec: ModelSpec) -> dict[str, Answer]:
    """cnmon's summary as ``host`` answers it (its fault applied)."""
    text = read_capture(spec.smi_file)
    if "mlu-missing" in host.faults:
        gone = _pick(spec.gpu_count, "cambricon", host.name, host.serial_salt)
        lines = text.splitlines(keepends=True)
        at = next(i for i, ln in enumerate(lines) if ln.startswith(f"| {gone}     /"))
        del lines[at : at + 3]  # the card's two lines and the border under them
        text = "".join(lines)
    return {"cnmon": (text, "", 0)}


def bus_ids(spec: ModelSpec) -> tuple[str, ...]:
    """None: no real lspci capture of an MLU (module docstring)."""
    return ()


def check_fault(spec: ModelSpec, kind: str, arg: str | None) -> str | None:
    return "it takes no argument" if arg is not None else None


LAB = LabVendor(
    vendor="cambricon",
    models=(MLU370_X8_2X,),
    render=render,
    bus_ids=bus_ids,
    faults={"mlu-missing": "one MLU missing from cnmon's table"},
    check_fault=check_fault,
    demo=((MLU370_X8_2X.name, ()),),
    demo_from=DEMO_FROM,
    rank=40,
)
