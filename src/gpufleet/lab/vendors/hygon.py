"""Lab hosts of Hygon DCUs (issue 28): the ``k100ai-4x`` model and its fault.

Captures served (tests/fixtures/captured/hygon, PROVENANCE.md there): PaddleNLP's ``hy-smi``
of 4 K100_AI DCUs on DTK 24.04.1, as captured. The host has no DTK ``rocm-smi --json`` capture
of its own (the one real JSON is another host's single DCU): that optional section answers as
where the tool is missing, and the records carry no model, serial or memory (hy-smi prints
none), so the model's ``gpu_model`` is empty (not checked).

lspci: the captured plain line (``Co-processor: Chengdu Haiguang IC Design Co., Ltd. Device
6210 (rev 01)``) in ``-nn`` form, with the class id of a co-processor (``0b40``) and Hygon's
PCI vendor id (``1d94``, Linux ``pci_ids.h``); the first two addresses are the capture's
(``37:00.0``, ``3a:00.0``), the other two assigned by the lab.

Fault: ``dcu-missing`` drops one DCU's row from hy-smi's table (lspci still lists it). DMI,
CPUs, memory and disks are the lab's choice. The mixed demo fleet gets one such host, healthy,
from 16 hosts on (``make demo``: 32).
"""

from __future__ import annotations

from gpufleet.lab.captures import read_capture
from gpufleet.lab.catalogue import _M2_1T92, _NVME_PM983, NO_NVIDIA_FABRIC, ModelSpec
from gpufleet.lab.fleet import LabHost
from gpufleet.lab.templates import _pick
from gpufleet.lab.vendors import DEMO_FROM, Answer, LabVendor

K100AI_4X = ModelSpec(
    name="k100ai-4x",
    group="dcu_k100_ai",
    pool="train-k100",
    gpu_model="",  # hy-smi names no model: not checked
    gpu_count=4,
    gpu_memory_mib=65520,  # the 0x6210 DCU's VRAM in the DTK rocm-smi JSON capture
    smi_format="none",
    smi_file="hygon/paddlenlp_dcu_llama_hy-smi_dtk24.04.1_k100ai_4dcu.txt",
    replicate=False,
    gpu_bus_ids=tuple(f"0000:{b}:00.0" for b in ("37", "3a", "9c", "9f")),
    pci_gpu="Co-processor [0b40]: Chengdu Haiguang IC Design Co., Ltd. "
    "Device [1d94:6210] (rev 01)",
    **NO_NVIDIA_FABRIC,
    extra_pci=tuple(f"0000:{b}:00.0 {_NVME_PM983}" for b in ("e1", "e2")),
    dmi=("Sugon", "X7840 H0"),
    nproc=128,
    mem_total_kib=1056462336,
    disks=(("nvme0n1", _M2_1T92, "SAMSUNG MZ1L21T9HCLS-00A07"),),
    vendor="hygon",
    serial_prefix="HY",
)


def render(host: LabHost, spec: ModelSpec) -> dict[str, Answer]:
    """hy-smi's table as ``host`` answers it (its fault applied); no DTK rocm-smi (module
    docstring)."""
    text = read_capture(spec.smi_file)
    if "dcu-missing" in host.faults:
        gone = str(_pick(spec.gpu_count, "hygon", host.name, host.serial_salt))
        text = "".join(
            ln for ln in text.splitlines(keepends=True) if ln.split()[:1] != [gone]
        )
    missing = ("", "sh: 1: rocm-smi: not found", 127)
    return {"hy_smi": (text, "", 0), "hygon_rocm_smi_json": missing}


def bus_ids(spec: ModelSpec) -> tuple[str, ...]:
    """The DCUs' PCI addresses (module docstring)."""
    return spec.gpu_bus_ids


def check_fault(spec: ModelSpec, kind: str, arg: str | None) -> str | None:
    return "it takes no argument" if arg is not None else None


LAB = LabVendor(
    vendor="hygon",
    models=(K100AI_4X,),
    render=render,
    bus_ids=bus_ids,
    faults={"dcu-missing": "one DCU missing from hy-smi's table (lspci still lists it)"},
    check_fault=check_fault,
    demo=((K100AI_4X.name, ()),),
    demo_from=DEMO_FROM,
    rank=30,
)
