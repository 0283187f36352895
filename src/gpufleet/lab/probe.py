"""A lab host's answer to the inspection probe (``gpufleet inspect``), from real captures.

``gpu``   the ``load :: query-gpu`` CSV row of the model's nvidia_gpu_exporter bundle (header
          and values exactly as captured, with units: the capture's ``--format=csv``), one row
          per GPU with the host's GPU identity (index, UUID, PCI bus id) put in; models
          without such a bundle (the XML-captured ones: A100, V100S, A10G) answer with rows
          DERIVED from the model's real ``nvidia-smi -q -x`` capture as the lab renders it
          for the host (issue 24): the XML is parsed by the collection's own parser and each
          probe field written from it (``--format=csv,nounits``; ``[N/A]`` where the XML
          has no value), so every value is the capture's, none invented
``kmsg``  the host's Xid faults, as the collection's kernel-log section renders them
``ib``    the ports and counters of the captured ``/sys/class/infiniband`` tree of an H100
          host (``ib/gpud_sys-class-infiniband-h100.0``) for models with RDMA adapters
``disk``  ``df -P -k /`` of a 1 TiB root file system, 20% used
``uptime`` ten days
``fabric`` (rack trays only, issue 27) the fabric fields of the tray's rendered GB200 capture,
          as the ``gpu`` part derives its rows; other lab models leave the part out (no
          capture of their nvidia-smi's answer to those fields)
``driver`` (NVIDIA hosts) seconds since the driver module was loaded: a minute after boot
``boot``  a boot id derived from the host and its ``boot`` count (a reboot changes it; the
          kernel log of the new boot holds only the Xid faults the host has now)

A host of another vendor (Ascend, AMD) answers its vendor plugin's probe sections instead of
``gpu`` (``@@probe <vendor>.<section>``), each as its lab model (``lab/vendors``) answers that
section of the collection: the real captures with the vendor's faults applied (an Ascend NPU
in ``Alarm`` from the real Alarm capture, one missing, a RoCE port down; an AMD card missing).

Probe faults change the answer between sweeps (the GPU is the host's fault GPU unless the
fault names one: ``hot:3``): ``hot`` (92 C), ``ecc-uncorrectable`` (2 volatile and aggregate
uncorrectable), ``power-brake`` (HW power brake slowdown active, clocks and power down),
``straggler`` (SM clock and power far below the model's under full load), ``ib-link-downed``
(``link_downed`` of the first port raised to N, default 1), ``xid:<code>`` (kernel log),
``disk-full`` (98% used); ``nvidia-smi-missing`` makes the GPU query fail (exit 127).

Issue 24 (no data is a fault): ``driver-not-loaded`` answers nvidia-smi's real message for a
driver it cannot reach (exit 9, as in the collection lab's ``driver-down``) and no ``driver``
age; ``probe-timeout`` is what ``timeout`` leaves of a hung query (no output, exit 124);
``gpu-handle-error`` is an EDITED capture: the model's real query rows with the fault GPU's
row replaced by the line nvidia-smi prints for a GPU it cannot reach ("Unable to determine
the device handle for GPU<bus id>: Unknown Error", the wording of the real reports quoted in
``domain/checks/gpu.py``), exit 15; ``xid-cut`` adds a real Xid line of the capture's format
cut after its PCI address (as a ring buffer or a log shipper cuts it).
"""

from __future__ import annotations

import re
import uuid
from functools import cache
from pathlib import Path
from typing import Any

from gpufleet.lab.captures import captures_dir, load_exporter_bundle
from gpufleet.lab.faults import RACK_TRAY_MODELS, _split_fault
from gpufleet.lab.fleet import LabHost
from gpufleet.lab.renderers import _gpu_sections, _xids
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


#: nvidia-smi's words when the driver is not loaded (the collection lab's ``driver-down``).
_DRIVER_DOWN = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running."
)


def _dotted(obj: Any, path: str) -> Any:
    for name in path.split("."):
        if obj is None:
            return None
        obj = getattr(obj, name, None)
    return obj


def _cell(field: str, value: Any) -> str:
    if value is None:
        return "[N/A]"
    if isinstance(value, bool):
        if field.startswith("clocks_event_reasons."):
            return "Active" if value else "Not Active"
        if field.startswith("fabric.health."):  # as the XML prints them
            return "True" if value else "False"
        return "Yes" if value else "No"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def _derived_rows(host: LabHost) -> tuple[list[str], dict[int, list[str]]]:
    """(header, per present GPU index its cells) derived from the model's real -q -x capture
    as rendered for ``host`` (identity and the XML-level faults already in it)."""
    from gpufleet.collect.inspect import PROBE_FIELDS
    from gpufleet.collect.nvidia_smi.csv import _CSV_COLUMNS
    from gpufleet.collect.nvidia_smi.xml import parse_nvidia_smi_xml

    tpl = _template(host.model)
    _, xml, _ = _gpu_sections(host, tpl)
    report = parse_nvidia_smi_xml(xml, f"lab {host.model} capture")
    rows: dict[int, list[str]] = {}
    for g in report.gpus:
        rows[g.index] = [_cell(f, _dotted(g, _CSV_COLUMNS[f][0])) for f in PROBE_FIELDS]
    return list(PROBE_FIELDS), rows


def _fabric_part(host: LabHost) -> str:
    """The ``fabric`` part of a rack tray (issue 27): its fabric fields written from the real
    GB200 capture as the lab renders it for the host (rack, tray and fabric faults in it),
    the way :func:`_derived_rows` writes the ``gpu`` part; ``[N/A]`` where the XML has none."""
    from gpufleet.collect.inspect import FABRIC_FIELDS
    from gpufleet.collect.nvidia_smi.csv import _CSV_COLUMNS
    from gpufleet.collect.nvidia_smi.xml import parse_nvidia_smi_xml

    _, xml, _ = _gpu_sections(host, _template(host.model))
    report = parse_nvidia_smi_xml(xml, f"lab {host.model} capture")
    rows = [", ".join(FABRIC_FIELDS)] + [
        ", ".join(_cell(f, _dotted(g, _CSV_COLUMNS[f][0])) for f in FABRIC_FIELDS)
        for g in report.gpus
    ]
    return "\n".join(rows) + "\n@@rc 0"


def _gpu_part(host: LabHost) -> str:
    spec = host.spec
    faults = [_split_fault(f) for f in host.faults]
    kinds = {k for k, _ in faults}
    if "nvidia-smi-missing" in kinds:
        return "sh: 1: nvidia-smi: not found\n@@rc 127"
    if "driver-not-loaded" in kinds:
        return f"{_DRIVER_DOWN}\n@@rc 9"
    if "probe-timeout" in kinds:
        return "@@rc 124"
    suspect = fault_gpu_index(host)
    bus_ids = _template(host.model).bus_ids
    tpl = _csv_template(spec.smi_file)
    if tpl is None:
        header, derived = _derived_rows(host)
        base = {i: cells for i, cells in derived.items()}
    else:
        header, values = tpl
        base = {
            i: list(values)
            for i in range(spec.gpu_count)
            if not ("gpu-missing" in kinds and i == suspect)
        }
    rows: list[str] = []
    for i, row in sorted(base.items()):
        if "gpu-handle-error" in kinds and i == suspect:
            dom, bus, devfn = bus_ids[i].split(":")
            bus_id = f"{dom}:{bus}:{devfn}".upper()  # as the real reports quote it
            rows.append(f"Unable to determine the device handle for GPU{bus_id}: Unknown Error")
            continue

        def put(name: str, value: str, row: list[str] = row) -> None:
            row[_col(header, name)] = value

        ident = _identity(host, i)
        dom, bus, devfn = bus_ids[i].split(":")
        put("index", str(i))
        put("uuid", ident["uuid"])
        if tpl is not None:
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
    rc = 15 if "gpu-handle-error" in kinds else 0
    return "\n".join([", ".join(header), *rows, f"@@rc {rc}"])


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


def _boot_key(host: LabHost) -> str:
    return f"gpufleet-lab:{host.name}:{host.serial_salt}:{host.boot}"


def _vendor_parts(host: LabHost) -> dict[str, str]:
    """A host of another vendor: its plugin's probe sections, each answered as the vendor's
    lab model answers that section of the collection (its real captures, its faults
    applied), then the exit status."""
    from gpufleet.domain.vendors import plugin
    from gpufleet.lab.vendors import lab_vendor

    lab, inspector = lab_vendor(host.spec.vendor), plugin(host.spec.vendor).inspector
    if lab is None or inspector is None:
        raise ValueError(f"{host.name}: no lab model or inspection probe for {host.spec.vendor}")
    answers = lab.render(host, host.spec)
    out: dict[str, str] = {}
    for sec in inspector.inspect_sections:
        stdout, stderr, rc = answers[sec.name]
        out[f"{host.spec.vendor}.{sec.name}"] = f"{stdout}{stderr}".rstrip("\n") + f"\n@@rc {rc}"
    return out


def render_probe(host: LabHost, script: str | None = None) -> str:
    """The probe's answer for ``host`` (see the module doc). ``script``: the probe asked
    (None: the parts of the host's own vendor); a part it does not ask is not answered, and
    the NVIDIA ``gpu`` part asked of another vendor's host finds no nvidia-smi."""
    full = any(_split_fault(f)[0] == "disk-full" for f in host.faults)
    size = 1024**3  # KiB: 1 TiB
    used = size * 98 // 100 if full else size // 5
    nvidia = host.spec.vendor == "nvidia"
    kmsg = _xids(host, _template(host.model)) if nvidia else ""  # no NVRM lines elsewhere
    if nvidia and any(_split_fault(f)[0] == "xid-cut" for f in host.faults):
        whole = _xids(host.model_copy(update={"faults": ["xid:79"]}), _template(host.model))
        kmsg += whole[: whole.index("(PCI:") + len("(PCI:0000:")] + "\n"
    boot = uuid.uuid5(uuid.NAMESPACE_URL, _boot_key(host))
    loaded = nvidia and not any(_split_fault(f)[0] == "driver-not-loaded" for f in host.faults)
    asked = None if script is None else set(re.findall(r"(?m)^echo '@@probe (\S+)'$", script))
    # a CPU or storage node has no accelerator part of its own (lab/catalogue.py cpu-node)
    own = {"gpu": _gpu_part(host)} if nvidia else (
        _vendor_parts(host) if host.spec.role == "gpu" else {})
    if host.model in RACK_TRAY_MODELS:  # the only lab models whose capture has a fabric
        own["fabric"] = _fabric_part(host)
    if asked is not None:
        own = {k: v for k, v in own.items() if k in asked}
        if "gpu" in asked and not nvidia:  # the lab's own "not found" answer, as above
            own["gpu"] = "sh: 1: nvidia-smi: not found\n@@rc 127"
    parts = {
        **own,
        "kmsg": kmsg.rstrip("\n"),
        "ib": _ib_part(host),
        "disk": "Filesystem 1024-blocks Used Available Capacity Mounted on\n"
        f"/dev/nvme0n1p2 {size} {used} {size - used} {used * 100 // size}% /",
        "uptime": "864000.00 1700000.00",
        **({"driver": "863940"} if loaded and (asked is None or "driver" in asked) else {}),
        "boot": str(boot),
        "end": "",
    }
    return "".join(f"@@probe {k}\n{v}\n" if v else f"@@probe {k}\n" for k, v in parts.items())
