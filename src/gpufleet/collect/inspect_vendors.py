"""The vendor plugins' part of the inspection probe (issue 24 item 3): Ascend, AMD and any
vendor whose plugin declares a :class:`~gpufleet.domain.vendors.VendorInspector`.

For each vendor of a host (other than NVIDIA, which the core probe asks through
``nvidia-smi``) the probe runs the plugin's ``inspect_sections``, each framed
``@@probe <vendor>.<section>``, its output (stderr included) and ``@@rc N``. The parser
groups the parts by vendor, hands the outputs of the sections that exited 0 to the plugin's
``parse_inspect`` and turns the records into vendor-neutral samples and faults
(:mod:`gpufleet.domain.device_health`). No data is a fault: the vendor's primary section
failing or any answer that cannot be read leaves the devices unknown (None) with a failure
to observe (:class:`~gpufleet.domain.samples.ProbeFailure`, judged by the ``observe`` rules as
NVIDIA's are: ``gpu_tool_missing`` for exit 127, ``probe_timeout`` for 124, else
``gpu_tool_error``; a plugin that raises something else than
:class:`~gpufleet.errors.ParseError` too: its bug refuses that host, never the sweep); another
section failing is such a failure too. Nothing here names a vendor.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpufleet.domain.device_health import DeviceFault, device_faults, device_ports, device_samples
from gpufleet.domain.samples import GpuSample, PortSample, ProbeFailure
from gpufleet.domain.vendors import VendorInspector, plugin
from gpufleet.errors import GpufleetError, ParseError

#: Section name of a vendor whose plugin has no inspection probe (fail closed: a fault).
UNINSPECTED = "uninspected"


def _inspector(vendor: str) -> VendorInspector | None:
    return plugin(vendor).inspector


def vendor_probe_lines(vendors: Sequence[str], timeout_s: int = 20) -> list[str]:
    """The probe's lines for ``vendors`` (sh; ``$R`` is the sysroot, as in the core probe)."""
    lines = [f'TO="timeout {int(timeout_s)}"']
    defined: set[str] = set()
    for vendor in vendors:
        ins = _inspector(vendor)
        if ins is None:
            lines.append(f"echo '@@probe {vendor}.{UNINSPECTED}'")
            continue
        for sec in ins.inspect_sections:
            if sec.functions and sec.functions not in defined:
                defined.add(sec.functions)
                lines.append(sec.functions)
            lines += [
                f"echo '@@probe {vendor}.{sec.name}'",
                f"{sec.command} 2>&1",
                'echo "@@rc $?"',
            ]
    return lines


@dataclass(frozen=True)
class VendorProbe:
    """The vendors' parts of one probe answer: their devices (None: some vendor's could not
    be read), their devices' network ports, the faults their tools report, the failures to
    observe and the unreadable parts."""

    devices: tuple[GpuSample, ...] | None
    ports: tuple[PortSample, ...]
    faults: tuple[DeviceFault, ...]
    problems: tuple[str, ...]
    failures: tuple[ProbeFailure, ...] = ()


def _split_rc(text: str) -> tuple[str, str]:
    """(output, exit status as printed) of one framed section (``?``: no ``@@rc`` line)."""
    lines = text.splitlines()
    if lines and lines[-1].startswith("@@rc "):
        words = lines[-1].split()
        return "\n".join(lines[:-1]), words[1] if len(words) > 1 else "?"
    return text, "?"


def vendor_parts(parts: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """The probe's ``<vendor>.<section>`` parts by vendor, then section."""
    out: dict[str, dict[str, str]] = {}
    for name, text in parts.items():
        vendor, dot, section = name.partition(".")
        if dot and vendor and section:
            out.setdefault(vendor, {})[section] = text
    return out


def parse_vendor_parts(parts: Mapping[str, str], source: str = "probe") -> VendorProbe | None:
    """The vendors' parts of a split probe answer (:func:`gpufleet.collect.inspect.split_probe`);
    None when it has none."""
    grouped = vendor_parts(parts)
    if not grouped:
        return None
    devices: list[GpuSample] = []
    unknown = False
    ports: list[PortSample] = []
    faults: list[DeviceFault] = []
    problems: list[str] = []
    failures: list[ProbeFailure] = []

    def failed(vendor: str, reason: str, rc: str = "") -> None:
        kind = {"127": "gpu_tool_missing", "124": "probe_timeout"}.get(rc, "gpu_tool_error")
        detail = f"{source}: {vendor}: {reason}"
        problems.append(detail)
        failures.append(ProbeFailure(kind, detail))

    for vendor, sections in sorted(grouped.items()):
        try:
            ins = _inspector(vendor)
        except (KeyError, GpufleetError) as exc:
            ins, why = None, f"no vendor plugin of that name ({exc})"
        else:
            why = "its vendor plugin has no inspection probe"
        if ins is None:
            unknown = True
            failed(vendor, why)
            continue
        commands = {s.name: s.command for s in ins.inspect_sections}
        outputs: dict[str, str] = {}
        for name, text in sections.items():
            if name not in commands:
                unknown = True
                failed(vendor, f"unexpected probe part {name[:40]!r}")
                continue
            body, rc = _split_rc(text)
            if rc == "0":
                outputs[name] = body
                continue
            first = body.strip().splitlines()[0][:160] if body.strip() else "no output"
            failed(vendor, f"{name} ({commands[name][:60]}) exited {rc}: {first}", rc)
        if ins.primary not in outputs:
            unknown = True
            if ins.primary not in sections:
                failed(vendor, f"no answer to {ins.primary}")
            continue
        try:
            inv = ins.parse_inspect(outputs)
        except ParseError as exc:
            unknown = True
            failed(vendor, str(exc))
            continue
        except Exception as exc:  # a plugin's bug fails this host closed, never the sweep
            unknown = True
            failed(vendor, f"its plugin cannot read the answer: {type(exc).__name__}: {exc}"[:300])
            continue
        devices += device_samples(inv)
        ports += device_ports(inv)
        faults += device_faults(inv)
    return VendorProbe(
        None if unknown else tuple(devices),
        tuple(ports),
        tuple(faults),
        tuple(problems),
        tuple(failures),
    )
