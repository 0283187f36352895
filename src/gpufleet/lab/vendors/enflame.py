"""Lab hosts of Enflame GCUs (issue 28): the ``s60-2x`` model and its fault.

Captures served (tests/fixtures/captured/enflame, PROVENANCE.md there): PaddlePaddle's
``efsmi`` V1.2.0.301 of 2 S60 cards (bus 00:01:00.0 / 00:09:00.0), as captured, and the plain
``lspci`` lines of PaddleNLP's S60 host (tests/fixtures/captured/lspci,
``Processing accelerators: Shanghai Enflame Technology Co. Ltd S60 [Enflame] (rev 01)`` at
01:00.0 and 09:00.0), in that plain form (the capture shows no numeric ids).

The captured host runs card 0 with ECC off (49120 MiB) and card 1 with ECC on (42976 MiB):
the model expects the ECC-off capacity (card 0's), so card 1's ECC shows as memory short of it
(``gpu_memory``: advisory for the ``test`` profile, binding for ``inference``: the host is
available for ``test`` only). DMI, CPUs, memory and disks are the
lab's choice.

Fault: ``gcu-missing`` drops one card (its rule, two lines and border) from efsmi's table;
lspci still lists it. The mixed demo fleet gets one such host, healthy, from 16 hosts on
(``make demo``: 32).
"""

from __future__ import annotations

from gpufleet.lab.captures import read_capture
from gpufleet.lab.catalogue import _M2_1T92, _NVME_PM983, NO_NVIDIA_FABRIC, ModelSpec
from gpufleet.lab.fleet import LabHost
from gpufleet.lab.templates import _pick
from gpufleet.lab.vendors import DEMO_FROM, Answer, LabVendor

S60_2X = ModelSpec(
    name="s60-2x",
    group="gcu_s60",
    pool="infer-s60",
    gpu_model="S60",
    gpu_count=2,
    gpu_memory_mib=49120,
    smi_format="none",
    smi_file="enflame/paddle-docs_gcu_efsmi_1.2.0.301_s60.txt",
    replicate=False,
    gpu_bus_ids=("0000:01:00.0", "0000:09:00.0"),
    pci_gpu="Processing accelerators: Shanghai Enflame Technology Co. Ltd S60 [Enflame] (rev 01)",
    **NO_NVIDIA_FABRIC,
    extra_pci=tuple(f"0000:{b}:00.0 {_NVME_PM983}" for b in ("e1", "e2")),
    dmi=("Lab", "S60 host"),
    nproc=64,
    mem_total_kib=527995616,
    disks=(("nvme0n1", _M2_1T92, "SAMSUNG MZ1L21T9HCLS-00A07"),),
    vendor="enflame",
    serial_prefix="GCU",
)


def render(host: LabHost, spec: ModelSpec) -> dict[str, Answer]:
    """efsmi's summary as ``host`` answers it (its fault applied)."""
    text = read_capture(spec.smi_file)
    if "gcu-missing" in host.faults:
        gone = str(_pick(spec.gpu_count, "enflame", host.name, host.serial_salt))
        lines = text.splitlines(keepends=True)
        at = next(i for i, ln in enumerate(lines)
                  if ln.startswith("| ") and ln.split()[1:3] == [gone, "S60"])
        del lines[at - 1 : at + 3]  # the rule before the card, its two lines and border
        text = "".join(lines)
    return {"efsmi": (text, "", 0)}


def bus_ids(spec: ModelSpec) -> tuple[str, ...]:
    """The GCUs' PCI addresses, as the lspci capture lists them."""
    return spec.gpu_bus_ids


def check_fault(spec: ModelSpec, kind: str, arg: str | None) -> str | None:
    return "it takes no argument" if arg is not None else None


LAB = LabVendor(
    vendor="enflame",
    models=(S60_2X,),
    render=render,
    bus_ids=bus_ids,
    faults={"gcu-missing": "one GCU missing from efsmi's table (lspci still lists it)"},
    check_fault=check_fault,
    demo=((S60_2X.name, ()),),
    demo_from=DEMO_FROM,
    rank=80,
)
