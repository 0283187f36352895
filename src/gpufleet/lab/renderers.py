"""Rendering a lab host's answer to the collection script: one renderer per registered section
(:data:`RENDERERS`, keyed like :data:`gpufleet.collect.sections.REGISTRY`), then the faults.

Rendering is pure and deterministic: templates are parsed once per model and split into
literal pieces and identity slots, so rendering 1000 hosts takes about a second.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache

from gpufleet.collect.bundle import Section, render_bundle
from gpufleet.collect.sections import ACCELERATORS, names
from gpufleet.errors import ConfigError
from gpufleet.lab.accelerators import vendor_answers, vendor_answers_names, vendor_lspci
from gpufleet.lab.captures import read_capture
from gpufleet.lab.catalogue import ModelSpec
from gpufleet.lab.faults import (
    _ALT_DRIFT_DRIVER,
    DEFAULT_DRIFT_DRIVER,
    RACK_TRAY_MODELS,
    _split_fault,
)
from gpufleet.lab.fleet import LabHost
from gpufleet.lab.hostfiles import (
    _CTK_VERSION,
    _KERNEL,
    _OS_RELEASE,
    _chomp,
    _lsblk,
    _meminfo,
    _modules,
    _sysctl,
    render_reclaim_sections,
)
from gpufleet.lab.racks import edit_tray_block
from gpufleet.lab.readings import vary_readings
from gpufleet.lab.templates import (
    _bus_values,
    _fill,
    _identity,
    _path,
    _pick,
    _Template,
    _template,
    fault_gpu_index,
    system_identity,
)
from gpufleet.lab.topology import _ibstat, _lspci, _topo

_NOT_FOUND_RC = 127
#: The sections a lab host answers: every registered one, in script order.
SECTIONS: tuple[str, ...] = names()


# --------------------------------------------------------------------------- rendering


def _effective_driver(host: LabHost, tpl: _Template) -> str:
    base = host.driver or tpl.driver
    for f in host.faults:
        kind, arg = _split_fault(f)
        if kind == "driver-drift":
            if arg:
                return arg
            return DEFAULT_DRIFT_DRIVER if base != DEFAULT_DRIFT_DRIVER else _ALT_DRIFT_DRIVER
    return base


def _set_ecc(block: str, fmt: str) -> str:
    if fmt == "text":
        return re.sub(r"^(\s+DRAM Uncorrectable\s+: )\d+$", r"\g<1>2", block, flags=re.M)
    if "<dram_uncorrectable>" in block:  # DTD v12+
        return re.sub(r"<dram_uncorrectable>\d+<", "<dram_uncorrectable>2<", block)

    def dbe(m: re.Match[str]) -> str:  # DTD v11: volatile/aggregate <double_bit> totals
        return re.sub(r"<(device_memory|total)>\d+<", r"<\1>2<", m.group(0))

    return re.sub(r"<double_bit>.*?</double_bit>", dbe, block, flags=re.S)


def _set_remap(block: str, fmt: str, what: str) -> str:
    if fmt == "xml":
        return block.replace(f"<remapped_row_{what}>No<", f"<remapped_row_{what}>Yes<")
    start = block.index("    Remapped Rows\n")
    key = "Pending" if what == "pending" else "Remapping Failure Occurred"
    rest = re.sub(rf"^(        {key}\s+: )No$", r"\g<1>Yes", block[start:], count=1, flags=re.M)
    return block[:start] + rest


# A compute process left on a GPU after its lease (reclaim): the process as the driver lists
# it (fields and values as in the gpud nvidia-smi -q capture, 535.154.05), its memory in use.
_LEFT_PID, _LEFT_NAME, _LEFT_MIB = 58130, "/usr/bin/python", 20322
_LEFT_XML = (
    "<processes>\n            <process_info>\n"
    "                <gpu_instance_id>N/A</gpu_instance_id>\n"
    "                <compute_instance_id>N/A</compute_instance_id>\n"
    f"                <pid>{_LEFT_PID}</pid>\n                <type>C</type>\n"
    f"                <process_name>{_LEFT_NAME}</process_name>\n"
    f"                <used_memory>{_LEFT_MIB} MiB</used_memory>\n"
    "            </process_info>\n        </processes>"
)


def _set_gpu_process(block: str, fmt: str) -> str:
    if fmt == "xml":
        block = re.sub(r"<processes\s*/>|<processes>\s*</processes>", _LEFT_XML, block, count=1)
        return re.sub(
            r"(<fb_memory_usage>.*?<used>)\d+( MiB</used>)",
            rf"\g<1>{_LEFT_MIB}\g<2>",
            block,
            count=1,
            flags=re.S,
        )
    block = re.sub(
        r"^(    Processes\s+): None$",
        "    Processes\n"
        "        GPU instance ID                   : N/A\n"
        "        Compute instance ID               : N/A\n"
        f"        Process ID                        : {_LEFT_PID}\n"
        "            Type                          : C\n"
        f"            Name                          : {_LEFT_NAME}\n"
        f"            Used GPU Memory               : {_LEFT_MIB} MiB",
        block,
        count=1,
        flags=re.M,
    )
    start = block.index("FB Memory Usage")
    rest = re.sub(r"^(        Used\s+: )\d+( MiB)$", rf"\g<1>{_LEFT_MIB}\g<2>", block[start:],
                  count=1, flags=re.M)
    return block[:start] + rest


def _gpu_sections(host: LabHost, tpl: _Template) -> tuple[list[int], str, str]:
    """(indices of GPUs the driver sees, nvidia-smi XML, nvidia-smi -q text)."""
    spec = tpl.spec
    kinds = {_split_fault(f)[0] for f in host.faults}
    suspect = fault_gpu_index(host)
    present = [i for i in range(spec.gpu_count) if not ("gpu-missing" in kinds and i == suspect)]
    blocks = []
    for i in present:
        values = _identity(host, i)
        if spec.replicate:
            values |= _bus_values(tpl.bus_ids[i], i, spec.smi_format)
        block = _fill(tpl.blocks[i % len(tpl.blocks)], values)
        if i == suspect:
            if "ecc-uncorrectable" in kinds:
                block = _set_ecc(block, spec.smi_format)
            if "remap-pending" in kinds:
                block = _set_remap(block, spec.smi_format, "pending")
            if "remap-failure" in kinds:
                block = _set_remap(block, spec.smi_format, "failure")
            if "gpu-process" in kinds:
                block = _set_gpu_process(block, spec.smi_format)
        if spec.name in RACK_TRAY_MODELS:  # rack and tray identity, fabric faults (racks.py)
            block = edit_tray_block(block, host, i)
        blocks.append(block)
    head = _fill(tpl.head, {"attached": str(len(present))})
    sep = "\n" if spec.smi_format == "text" else ""
    body = head + sep.join(blocks) + tpl.tail
    driver = _effective_driver(host, tpl)
    if driver != tpl.driver:
        body = body.replace(tpl.driver, driver)
    if spec.smi_format == "xml":
        return present, body, ""
    return present, "", body


def _list(r: _Render) -> str:
    """``nvidia-smi -L``: each GPU's line (the layout of the exporter bundles' ``-L``, the
    host's identity) and, in MIG mode, the captured MIG lines under it (issue 26 item 7)."""
    mig = "".join(f"{line}\n" for line in r.tpl.mig_list)
    return "".join(
        f"GPU {pos}: {r.tpl.product} (UUID: {_identity(r.host, i)['uuid']})\n{mig}"
        for pos, i in enumerate(r.present)
    )


def _nvlink(host: LabHost, tpl: _Template, present: list[int]) -> str:
    if not tpl.nvlink:
        # A GPU without NVLink: the per-GPU header line and no links (generated, see module doc)
        return "".join(
            f"GPU {pos}: {tpl.product} (UUID: {_identity(host, i)['uuid']})\n"
            for pos, i in enumerate(present)
        )
    pieces = tpl.nvlink
    return "".join(
        _fill(pieces[i % len(pieces)], {"idx": str(pos), "uuid": _identity(host, i)["uuid"]})
        for pos, i in enumerate(present)
    )



_XID_MESSAGES = {  # codes the iso capture does not contain; texts as the driver prints them
    79: "GPU has fallen off the bus.",
    13: "Graphics Exception: ChID 0008, Class 0000c9c0, Offset 00000510, Data 0017e2ac",
    31: "Ch 00000010, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ "
    "0x7f31_c0000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
    45: "Ch 00000008",
    74: "NVLink: fatal error detected on link 3(0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0)",
    92: "High single-bit ECC error rate detected",
    95: "Uncontained: FBHUB. RST: Yes, D-RST: No",
    119: "Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function 76 "
    "(GSP_RM_CONTROL) (0x20803032 0x58c).",
}
_XID_LINE = re.compile(
    r"^(?P<ts>\S+) NVRM: Xid \(PCI:(?P<pci>[^)]+)\): (?P<code>\d+), "
    r"(?P<who>pid=.*?, name=.*?), (?P<msg>.*)$"
)


@cache
def _xid_format() -> tuple[str, dict[int, str]]:
    """The first Xid line of the iso capture as a format, and the capture's messages by code."""
    text = _path("kernel-log/gpud_dmesg-time-format-iso.log").read_text(encoding="utf-8")
    fmt: str | None = None
    messages: dict[int, str] = {}
    for line in text.splitlines():
        m = _XID_LINE.match(line)
        if not m:
            continue
        if fmt is None:
            fmt = (
                "{ts} NVRM: Xid (PCI:{pci}): {code}, "
                + m["who"].replace("{", "{{").replace("}", "}}")
                + ", {msg}"
            )
        messages.setdefault(int(m["code"]), m["msg"])
    if fmt is None:
        raise RuntimeError("lab template: no Xid line in gpud_dmesg-time-format-iso.log")
    return fmt, messages


_XID_EPOCH = datetime(2025, 1, 14, 3, 12, 45, 118204, tzinfo=UTC)


def _xids(host: LabHost, tpl: _Template) -> str:
    fmt, captured = _xid_format()
    lines = []
    for n, f in enumerate(f for f in host.faults if _split_fault(f)[0] == "xid"):
        parts = f.split(":")
        code = int(parts[1])
        gpu = int(parts[2]) if len(parts) > 2 else fault_gpu_index(host)
        dom, bus, devfn = tpl.bus_ids[gpu].split(":")
        if host.xid_at is not None:
            ts = host.xid_at.astimezone(UTC) + timedelta(seconds=n)
        else:
            ts = _XID_EPOCH + timedelta(
                seconds=_pick(86400, "xid", host.name) + 97 * n,
                microseconds=_pick(10**6, "us", host.name, n),
            )
        msg = captured.get(code) or _XID_MESSAGES.get(code) or "Ch 00000008"
        lines.append(
            fmt.format(
                ts=ts.strftime("%Y-%m-%dT%H:%M:%S,%f+00:00"),
                pci=f"{dom}:{bus}:{devfn.split('.')[0]}",
                code=code,
                msg=msg,
            )
        )
    return "".join(line + "\n" for line in lines)


def _not_found(name: str, tool: str) -> Section:
    return Section(name, "", f"sh: 1: {tool}: not found", _NOT_FOUND_RC)


def _garbage(host: LabHost) -> str:
    """Non-XML noise, as a wedged terminal or a broken pipe might leave."""
    rng = random.Random(f"garbage|{host.name}")
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=#;:%&*"
    return "\n".join("".join(rng.choice(alphabet) for _ in range(72)) for _ in range(24))


@dataclass(frozen=True)
class _Render:
    """What the section renderers of one host share (computed once per host)."""

    host: LabHost
    tpl: _Template
    present: list[int]
    xml: str
    qtext: str
    driver: str

    @property
    def spec(self) -> ModelSpec:
        return self.tpl.spec


def _ok(stdout: str) -> tuple[str, str, int]:
    return stdout, "", 0


def _not_found_out(tool: str) -> tuple[str, str, int]:
    return "", f"sh: 1: {tool}: not found", _NOT_FOUND_RC


def _xml_out(r: _Render) -> tuple[str, str, int]:
    if r.spec.smi_format == "xml":
        return _ok(r.xml)
    return (
        "",
        f"gpufleet lab: the 'nvidia-smi -q -x' capture is not available for lab model "
        f"{r.spec.name} (this host answers 'nvidia-smi -q')",
        2,
    )


def _q_out(r: _Render) -> tuple[str, str, int]:
    # Not run when the XML answered (the script skips it: empty, rc 0).
    return _ok("" if r.spec.smi_format == "xml" else r.qtext)


#: One renderer per registered section (:data:`gpufleet.collect.sections.REGISTRY`):
#: section name -> (stdout, stderr, rc) as a healthy host of the model answers; faults are
#: applied afterwards by :func:`render_sections`.
RENDERERS: dict[str, Callable[[_Render], tuple[str, str, int]]] = {
    "hostname": lambda r: _ok(r.host.name),
    "os-release": lambda r: _ok(_OS_RELEASE),
    "uname-r": lambda r: _ok(_KERNEL),
    "nproc": lambda r: _ok(str(r.spec.nproc)),
    "meminfo": lambda r: _ok(_meminfo(r.spec)),
    "dmi": lambda r: _ok("".join(f"{k}={v}\n" for k, v in system_identity(r.host).items())),
    "modules": lambda r: _ok(_modules(r.spec)),
    "sysctl": lambda r: _ok(_sysctl(r.spec)),
    "nvidia-smi-xml": _xml_out,
    "nvidia-smi-q": _q_out,
    "nvidia-smi-L": lambda r: _ok(_list(r)),
    "topo-m": lambda r: _ok(_topo(r.tpl, r.present, r.driver)),
    "nvlink-s": lambda r: _ok(_nvlink(r.host, r.tpl, r.present)),
    "ibstat": lambda r: (
        _ok(_ibstat(r.host, r.tpl)) if r.tpl.ibstat is not None else _not_found_out("ibstat")
    ),
    "lspci-nn": lambda r: _ok(_lspci(r.tpl)),
    "kernel-xid": lambda r: _ok(_xids(r.host, r.tpl)),
    "lsblk": lambda r: _ok(_lsblk(r.spec)),
    # fm(): "active" when systemctl says so; otherwise pgrep fails too and fm echoes "inactive".
    "fabricmanager": lambda r: _ok("active" if r.spec.nvswitch else "inactive"),
    # No capture of `nv-fabricmanager --version` exists in the fixtures; this line follows the
    # tool's wording, and the parser only takes the first dotted version from it. The fabric
    # manager package version always equals the driver's.
    "fabricmanager-version": lambda r: (
        _ok(f"Fabric Manager version is : {r.driver}")
        if r.spec.nvswitch
        else _not_found_out("nv-fabricmanager")
    ),
    # Real `nvidia-ctk --version` output (NVIDIA/nvidia-container-toolkit issue #50).
    "container-toolkit": lambda r: _ok(_CTK_VERSION),
}


def _vendor_not_installed(name: str) -> Callable[[_Render], tuple[str, str, int]]:
    return lambda r: vendor_answers(r.host, r.spec)[name]


# The vendor sections (issue 15): an NVIDIA host has no Ascend/AMD tool (rc 127); the
# reader section runs nothing (``true``).
RENDERERS.update({name: _vendor_not_installed(name) for name in vendor_answers_names()})
RENDERERS[ACCELERATORS] = lambda r: _ok("")

_NVIDIA_SECTIONS = ("nvidia-smi-xml", "nvidia-smi-q", "nvidia-smi-L", "topo-m", "nvlink-s")


def _render_vendor_host(host: LabHost) -> dict[str, Section]:
    """A host of another accelerator vendor (lab/accelerators.py): the OS files as every lab
    host, no nvidia-smi, no RDMA tools, its vendor's captures."""
    spec = host.spec
    vendor = vendor_answers(host, spec)
    modules = "".join(
        line for line in _modules(spec).splitlines(keepends=True) if not line.startswith("nvidia")
    )
    lspci = (_node_lspci(spec) if spec.role != "gpu" else vendor_lspci(spec)) + list(
        spec.extra_pci
    )
    answers: dict[str, tuple[str, str, int]] = {
        "hostname": _ok(host.name),
        "os-release": _ok(_OS_RELEASE),
        "uname-r": _ok(_KERNEL),
        "nproc": _ok(str(spec.nproc)),
        "meminfo": _ok(_meminfo(spec)),
        "dmi": _ok("".join(f"{k}={v}\n" for k, v in system_identity(host).items())),
        "modules": _ok(modules),
        "sysctl": _ok(_sysctl(spec)),
        **{name: _not_found_out("nvidia-smi") for name in _NVIDIA_SECTIONS},
        "ibstat": _not_found_out("ibstat"),
        "lspci-nn": _ok("".join(line + "\n" for line in sorted(lspci))),
        "kernel-xid": _ok(""),
        "lsblk": _ok(_lsblk(spec)),
        "fabricmanager": _ok("inactive"),
        "fabricmanager-version": _not_found_out("nv-fabricmanager"),
        "container-toolkit": _not_found_out("nvidia-ctk"),
        ACCELERATORS: _ok(""),
        **vendor,
    }
    missing = [n for n in SECTIONS if n not in answers]
    if missing:
        raise ConfigError(f"lab model {spec.name} does not answer section(s) {missing}")
    return {
        name: Section(name, _chomp(answers[name][0]), _chomp(answers[name][1]), answers[name][2])
        for name in SECTIONS
    }


def _node_lspci(spec: ModelSpec) -> list[str]:
    """A GPU-less node's bus: its model's ``lspci -nn`` capture without the NVIDIA devices,
    each address with its PCI domain (see the catalogue)."""
    if spec.lspci_capture is None:
        raise ConfigError(f"lab model {spec.name}: a {spec.role} node needs an lspci capture")
    return [
        line if re.match(r"[0-9a-fA-F]{4}:", line) else f"0000:{line}"
        for line in read_capture(spec.lspci_capture).splitlines()
        if line.strip() and "[10de:" not in line
    ]


def render_sections(host: LabHost) -> dict[str, Section]:
    """Every registered section (:data:`SECTIONS`) as the host answers the collection script,
    its readings moved ``host.readings`` rounds (:func:`~gpufleet.lab.readings.vary_readings`)."""
    sections = _render_sections(host)
    if not host.readings:
        return sections
    return {
        n: Section(n, vary_readings(s.stdout, host.readings), s.stderr, s.rc)
        for n, s in sections.items()
    }


def _render_sections(host: LabHost) -> dict[str, Section]:
    if host.spec.vendor != "nvidia" or host.spec.role != "gpu":
        return _render_vendor_host(host)
    tpl = _template(host.model)
    spec = tpl.spec
    kinds = {_split_fault(f)[0] for f in host.faults}
    present, xml, qtext = _gpu_sections(host, tpl)
    ctx = _Render(host, tpl, present, xml, qtext, _effective_driver(host, tpl))
    s: dict[str, Section] = {}
    for name in SECTIONS:
        try:
            render = RENDERERS[name]
        except KeyError:
            raise ConfigError(
                f"section {name!r} is in the collection registry but the lab has no renderer "
                "for it (add one to RENDERERS)"
            ) from None
        s[name] = Section(name, *render(ctx))

    if "nvidia-smi-missing" in kinds:
        for name in _NVIDIA_SECTIONS:
            s[name] = _not_found(name, "nvidia-smi")
    else:
        if "garbage" in kinds:
            s["nvidia-smi-xml"] = Section("nvidia-smi-xml", _garbage(host), "", 0)
            s["nvidia-smi-q"] = Section("nvidia-smi-q", "", "", 0)
        if "truncated" in kinds:
            name = "nvidia-smi-xml" if spec.smi_format == "xml" else "nvidia-smi-q"
            full = s[name].stdout
            cut = len(full) // 2
            if spec.smi_format == "text":
                # A text report cut inside a GPU section reads like a complete one, so the
                # cut is placed where that section starts: the GPU count then gives it away.
                cut = full.rfind("\nGPU ", 0, cut) + 1
            s[name] = Section(name, full[:cut], "", 0)
    # A tool's final newline is eaten by the framing (split_bundle drops it), so sections are
    # kept in that canonical form and split_bundle(render_output(h)) == render_sections(h).
    return {
        name: Section(name, _chomp(s[name].stdout), _chomp(s[name].stderr), s[name].rc)
        for name in SECTIONS
    }


def render_output(host: LabHost, asked: Sequence[str] | None = None) -> str:
    """The framed output of the collection script on ``host`` (see :mod:`..collect.bundle`).

    ``asked``: the sections the script runs, in its order (None: the collection's). Reclaim
    sections are answered as :func:`render_reclaim_sections` renders them; a section the lab
    cannot render is left out of the bundle, as if its tool printed no frame (fail closed)."""
    sections = render_sections(host)
    if asked is None:
        return render_bundle(list(sections.values()))
    if any(n not in sections for n in asked):
        sections |= render_reclaim_sections(host)
    return render_bundle([sections[n] for n in asked if n in sections])
