"""A lab host's answer to the inspection probe (``gpufleet inspect``), from real captures.

``gpu``   the ``load :: query-gpu`` CSV row of the model's nvidia_gpu_exporter bundle (header
          and values exactly as captured, with units: the capture's ``--format=csv``), one row
          per GPU with the host's GPU identity (index, UUID, PCI bus id) put in; models
          without such a bundle (the XML-captured ones) answer ``nvidia-smi`` exit 6 with a
          message saying so
``kmsg``  the host's Xid faults, as the collection's kernel-log section renders them
``ib``    the ports and counters of the captured ``/sys/class/infiniband`` tree of an H100
          host (``ib/gpud_sys-class-infiniband-h100.0``) for models with RDMA adapters
``disk``  ``df -P -k /`` of a 1 TiB root file system, 20% used
``uptime`` ten days

Probe faults change the answer between sweeps (the GPU is the host's fault GPU unless the
fault names one: ``hot:3``): ``hot`` (92 C), ``ecc-uncorrectable`` (2 volatile and aggregate
uncorrectable), ``power-brake`` (HW power brake slowdown active, clocks and power down),
``straggler`` (SM clock and power far below the model's under full load), ``ib-link-downed``
(``link_downed`` of the first port raised to N, default 1), ``xid:<code>`` (kernel log),
``disk-full`` (98% used); ``nvidia-smi-missing`` makes the GPU query fail (exit 127).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from gpufleet.lab.captures import captures_dir, load_exporter_bundle
from gpufleet.lab.faults import _split_fault
from gpufleet.lab.fleet import LabHost
from gpufleet.lab.renderers import _xids
from gpufleet.lab.templates import _identity, _template, fault_gpu_index

_IB_TREE = "ib/gpud_sys-class-infiniband-h100.0"
_LOAD_CSV = "load :: query-gpu (csv, what the exporter parses)"
_COUNTERS = (
    "link_downed",
    "link_error_recovery",
    "symbol_error",
    "port_rcv_errors",
    "port_rcv_remote_physical_errors",
    "port_xmit_discards",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
)


@cache
def _csv_template(smi_file: str) -> tuple[list[str], list[str]] | None:
    """(header cells, value cells) of the captured load row; None: no exporter bundle."""
    path = captures_dir() / smi_file
    if "nvidia_gpu_exporter" not in smi_file or not path.exists():
        return None
    text = load_exporter_bundle(path).get(_LOAD_CSV)
    if not text:
        return None
    lines = [line for line in text.splitlines() if line.strip()]
    return [c.strip() for c in lines[0].split(",")], [c.strip() for c in lines[1].split(",")]


def _col(header: list[str], name: str) -> int:
    for i, h in enumerate(header):
        if h.split(" [")[0] == name:
            return i
    raise KeyError(name)


def _gpu_part(host: LabHost) -> str:
    spec = host.spec
    tpl = _csv_template(spec.smi_file)
    if tpl is None:
        # nvidia-smi's own exit code for a query it cannot answer
        return f"lab: no --query-gpu capture for a {host.model} host\n@@rc 6"
    header, values = tpl
    faults = [_split_fault(f) for f in host.faults]
    if any(k == "nvidia-smi-missing" for k, _ in faults):
        return "sh: 1: nvidia-smi: not found\n@@rc 127"
    suspect = fault_gpu_index(host)
    bus_ids = _template(host.model).bus_ids
    rows: list[str] = []
    for i in range(spec.gpu_count):
        if any(k == "gpu-missing" for k, _ in faults) and i == suspect:
            continue
        row = list(values)

        def put(name: str, value: str, row: list[str] = row) -> None:
            row[_col(header, name)] = value

        ident = _identity(host, i)
        dom, bus, devfn = bus_ids[i].split(":")
        put("index", str(i))
        put("uuid", ident["uuid"])
        put("serial", ident["serial"])
        put("pci.bus_id", f"0000{dom}:{bus}:{devfn}".upper())
        for kind, arg in faults:
            target = int(arg) if arg is not None and arg.isdigit() else suspect
            if target != i and kind in ("hot", "power-brake", "straggler", "ecc-uncorrectable"):
                continue
            if kind == "hot":
                put("temperature.gpu", "92")
            elif kind == "ecc-uncorrectable":
                put("ecc.errors.uncorrected.volatile.total", "2")
                put("ecc.errors.uncorrected.aggregate.total", "2")
            elif kind == "power-brake":
                put("clocks_event_reasons.hw_power_brake_slowdown", "Active")
                put("clocks_event_reasons.hw_slowdown", "Active")
                put("clocks.current.sm", "1140 MHz")
                put("power.draw", "301.12 W")
            elif kind == "straggler":
                put("clocks.current.sm", "1095 MHz")
                put("power.draw", "288.40 W")
        rows.append(", ".join(row))
    return "\n".join([", ".join(header), *rows, "@@rc 0"])


@cache
def _ib_ports() -> tuple[tuple[str, str, tuple[tuple[str, int], ...]], ...]:
    root = captures_dir() / _IB_TREE
    out = []
    for ca in sorted(p.name for p in root.iterdir()):
        for port_dir in sorted((root / ca / "ports").iterdir()):
            state = _read(port_dir / "state").split(": ", 1)[-1]
            counters = tuple(
                (c, int(_read(port_dir / "counters" / c) or 0))
                for c in _COUNTERS
                if (port_dir / "counters" / c).exists()
            )
            out.append((f"{ca}/{port_dir.name}", state, counters))
    return tuple(out)


def _read(path: Path) -> str:
    return path.read_text().strip() if path.exists() else ""


def _ib_part(host: LabHost) -> str:
    if host.spec.ibstat_file is None:
        return ""
    downed = 0
    for kind, arg in (_split_fault(f) for f in host.faults):
        if kind == "ib-link-downed":
            downed = int(arg) if arg else 1
    lines = []
    for n, (name, state, counters) in enumerate(_ib_ports()):
        values = dict(counters)
        if n == 0 and downed:
            values["link_downed"] = values.get("link_downed", 0) + downed
        lines.append(
            f"port {name} state={state} " + " ".join(f"{k}={v}" for k, v in values.items())
        )
    return "\n".join(lines)


def render_probe(host: LabHost) -> str:
    """The probe's answer for ``host`` (see the module doc)."""
    full = any(_split_fault(f)[0] == "disk-full" for f in host.faults)
    size = 1024**3  # KiB: 1 TiB
    used = size * 98 // 100 if full else size // 5
    kmsg = _xids(host, _template(host.model))
    parts = {
        "gpu": _gpu_part(host),
        "kmsg": kmsg.rstrip("\n"),
        "ib": _ib_part(host),
        "disk": "Filesystem 1024-blocks Used Available Capacity Mounted on\n"
        f"/dev/nvme0n1p2 {size} {used} {size - used} {used * 100 // size}% /",
        "uptime": "864000.00 1700000.00",
        "end": "",
    }
    return "".join(f"@@probe {k}\n{v}\n" if v else f"@@probe {k}\n" for k, v in parts.items())
