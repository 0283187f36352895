"""Lab hosts of Iluvatar CoreX GPUs (issue 28): the ``bi-v150-16x`` model and its fault.

Captures served (tests/fixtures/captured/iluvatar, PROVENANCE.md there): ERNIE's ``ixsmi`` of
IX-ML 4.3.0 listing 16 BI-V150 GPUs (8 dual-GPU cards: ``N/A`` power on every even GPU), as
captured. No real ``lspci`` line of an Iluvatar GPU exists, so the lab's host lists none on its
PCI bus (the count check then compares ixsmi with the spec's 16, the count ixsmi and the
device plugin use); DMI, CPUs, memory and disks are the lab's choice.

Fault: ``gpu-missing`` drops one GPU (its two lines and the border under them) from ixsmi's
table, as a GPU the driver lost would be; the card it shares is then unpaired (the
``boards`` of the plugin are unknown for that host). The mixed demo fleet gets one such host,
healthy, from 16 hosts on (``make demo``: 32).
"""

from __future__ import annotations

from gpufleet.lab.captures import read_capture
from gpufleet.lab.catalogue import _M2_1T92, _NVME_PM983, NO_NVIDIA_FABRIC, ModelSpec
from gpufleet.lab.fleet import LabHost
from gpufleet.lab.templates import _pick
from gpufleet.lab.vendors import DEMO_FROM, Answer, LabVendor

BI_V150_16X = ModelSpec(
    name="bi-v150-16x",
    group="gpu_bi_v150",
    pool="train-bi-v150",
    gpu_model="BI-V150",
    gpu_count=16,
    gpu_memory_mib=32768,
    smi_format="none",
    smi_file="iluvatar/ernie_ixsmi_4.3.0_16xbi-v150.txt",
    replicate=False,
    gpu_bus_ids=(),
    pci_gpu="",
    **NO_NVIDIA_FABRIC,
    extra_pci=tuple(f"0000:{b}:00.0 {_NVME_PM983}" for b in ("e1", "e2")),
    dmi=("Lab", "BI-V150 8-card host"),
    nproc=128,
    mem_total_kib=1056462336,
    disks=(("nvme0n1", _M2_1T92, "SAMSUNG MZ1L21T9HCLS-00A07"),),
    vendor="iluvatar",
    serial_prefix="IX",
)


def render(host: LabHost, spec: ModelSpec) -> dict[str, Answer]:
    """ixsmi's summary as ``host`` answers it (its fault applied)."""
    text = read_capture(spec.smi_file)
    if "gpu-missing" in host.faults:
        gone = str(_pick(spec.gpu_count, "iluvatar", host.name, host.serial_salt))
        lines = text.splitlines(keepends=True)
        at = next(i for i, ln in enumerate(lines)
                  if ln.startswith("| ") and ln.split()[1:3] == [gone, "Iluvatar"])
        del lines[at : at + 3]  # the GPU's two lines and the border under them
        text = "".join(lines)
    return {"ixsmi": (text, "", 0)}


def bus_ids(spec: ModelSpec) -> tuple[str, ...]:
    """None: no real lspci capture of an Iluvatar GPU (module docstring)."""
    return ()


def check_fault(spec: ModelSpec, kind: str, arg: str | None) -> str | None:
    return "it takes no argument" if arg is not None else None


LAB = LabVendor(
    vendor="iluvatar",
    models=(BI_V150_16X,),
    render=render,
    bus_ids=bus_ids,
    faults={"gpu-missing": "one GPU missing from ixsmi's table"},
    check_fault=check_fault,
    demo=((BI_V150_16X.name, ()),),
    demo_from=DEMO_FROM,
    rank=70,
)
