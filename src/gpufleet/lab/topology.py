"""The lab's fabric answers: ``nvidia-smi topo -m``, ``ibstat`` and ``lspci`` of a lab host's
model (moved out of :mod:`gpufleet.lab.renderers`, which renders every section with them)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpufleet.errors import ConfigError
from gpufleet.lab.catalogue import ModelSpec
from gpufleet.lab.faults import _split_fault
from gpufleet.lab.fleet import LabHost
from gpufleet.lab.templates import _pick, _Template

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
