"""Lab hosts of AMD Instinct GPUs (issue 15): the ``mi100-4x`` model and its fault.

Captures served (tests/fixtures/captured/amd, PROVENANCE.md there): telegraf's
``rocm-smi --json`` of 4x MI100 on ROCm 6.0.2 (a superset of the keys the collection asks
for), as captured. Fault: ``gpu-missing`` drops one card from rocm-smi's JSON (lspci still
lists it). A lab change's driver (``LabHost.driver``) replaces rocm-smi's ``Driver version``.
The mixed demo fleet gets one such host.
"""

from __future__ import annotations

import json
import re

from gpufleet.lab.captures import read_capture
from gpufleet.lab.catalogue import _M2_1T92, _NVME_PM983, NO_NVIDIA_FABRIC, ModelSpec
from gpufleet.lab.fleet import LabHost
from gpufleet.lab.templates import _pick
from gpufleet.lab.vendors import Answer, LabVendor, replace_driver

# 4x Instinct MI100, ROCm 6.0.2: telegraf's `rocm-smi --json` capture served as it is;
# lspci lines generated from its "PCI Bus" / "Device ID" / "Card series" values.
MI100_4X = ModelSpec(
    name="mi100-4x",
    group="gpu_mi100",
    pool="train-mi100",
    gpu_model="MI100",
    gpu_count=4,
    gpu_memory_mib=32752,
    smi_format="none",
    smi_file="amd/telegraf_mi100_rocm602.json",
    replicate=False,
    gpu_bus_ids=(),
    pci_gpu="Display controller [0380]: Advanced Micro Devices, Inc. [AMD/ATI] "
    "Arcturus GL-XL [Instinct MI100] [1002:738c] (rev 01)",
    **NO_NVIDIA_FABRIC,
    extra_pci=tuple(f"0000:{b}:00.0 {_NVME_PM983}" for b in ("e1", "e2")),
    dmi=("Supermicro", "AS -4124GS-TNR"),
    nproc=128,
    mem_total_kib=1056462336,
    disks=(("nvme0n1", _M2_1T92, "SAMSUNG MZ1L21T9HCLS-00A07"),),
    vendor="amd",
    serial_prefix="6920",
)


def render(host: LabHost, spec: ModelSpec) -> dict[str, Answer]:
    """``rocm-smi --json`` as ``host`` answers it (its fault and driver applied)."""
    text = replace_driver(read_capture(spec.smi_file), r'("Driver version": ")([^"]+)', host)
    if "gpu-missing" in host.faults:
        # rocm-smi no longer lists one card (lspci still does); the capture is indent-4 JSON,
        # so dropping the card's object and dumping again keeps every other byte
        doc = json.loads(text)
        card = _pick(spec.gpu_count, "amd", host.name, host.serial_salt)
        del doc[f"card{card}"]
        text = json.dumps(doc, indent=4) + "\n"
    return {"rocm_smi_json": (text, "", 0)}


def bus_ids(spec: ModelSpec) -> tuple[str, ...]:
    """The cards' PCI addresses as the rocm-smi capture prints them."""
    return tuple(re.findall(r'"PCI Bus": "([0-9a-fA-F:.]+)"', read_capture(spec.smi_file)))


def check_fault(spec: ModelSpec, kind: str, arg: str | None) -> str | None:
    return "it takes no argument" if arg is not None else None


LAB = LabVendor(
    vendor="amd",
    models=(MI100_4X,),
    render=render,
    bus_ids=bus_ids,
    faults={"gpu-missing": "one card missing from rocm-smi (lspci still lists it)"},
    check_fault=check_fault,
    demo=((MI100_4X.name, ()),),
    rank=20,
)
