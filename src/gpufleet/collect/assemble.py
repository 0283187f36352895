"""Turn the sections of one collection into :class:`HostFacts`.

The GPU report is essential: if ``nvidia-smi`` answered (rc 0) but its output cannot be
parsed, the whole collection is refused (:class:`ParseError`) so a garbage answer never
overwrites good facts. Every other section is best effort: a failure is recorded in
``HostFacts.problems`` naming the section, and the rest is kept.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, TypeVar

from gpufleet.collect.bundle import Section
from gpufleet.collect.ib import parse_ibstat
from gpufleet.collect.kernel_log import parse_xids
from gpufleet.collect.nvidia_smi import parse_nvidia_smi_text, parse_nvidia_smi_xml
from gpufleet.collect.pci import parse_lspci
from gpufleet.collect.system import (
    parse_lsblk_pairs,
    parse_meminfo_total_kib,
    parse_modules,
    parse_os_release,
    parse_sysctl,
    parse_tool_version,
)
from gpufleet.collect.topology import parse_nvlink_status, parse_topo_matrix
from gpufleet.domain.facts import HostFacts, NvidiaSmiReport
from gpufleet.errors import ParseError

T = TypeVar("T")

_NOT_FOUND_RC = 127


def assemble_facts(sections: Mapping[str, Section], collected_at: datetime, host: str) -> HostFacts:
    """Build the facts of ``host`` from its sections; raise ParseError on a bad GPU report."""
    problems: list[str] = []

    def parsed(name: str, fn: Callable[[str, str], T], *, quiet_missing: bool = False) -> T | None:
        sec = sections.get(name)
        if sec is None:
            problems.append(f"{name}: section missing from collection output")
            return None
        if sec.rc != 0:
            if not (quiet_missing and sec.rc == _NOT_FOUND_RC):
                problems.append(f"{name}: exited {sec.rc}: {_first_line(sec.stderr)}")
            return None
        try:
            return fn(sec.stdout, f"{host}:{name}")
        except ParseError as exc:
            problems.append(str(exc))
            return None

    report, smi_error = _gpu_report(sections, host)
    kernel = _text(sections, "uname-r")
    nproc = _text(sections, "nproc")
    dmi = (_text(sections, "dmi") or "").splitlines()
    fm = sections.get("fabricmanager")
    fm_text = fm.stdout.strip().splitlines()[-1] if fm and fm.stdout.strip() else ""

    data: dict[str, Any] = {
        "collected_at": collected_at,
        "hostname": _text(sections, "hostname"),
        "os": parsed("os-release", lambda t, s: parse_os_release(t)),
        "kernel": kernel,
        "cpu_count": int(nproc) if nproc and nproc.isdigit() else None,
        "memory_total_kib": parsed("meminfo", lambda t, s: parse_meminfo_total_kib(t)),
        "system_vendor": dmi[0].strip() if len(dmi) > 0 and dmi[0].strip() else None,
        "system_product": dmi[1].strip() if len(dmi) > 1 and dmi[1].strip() else None,
        "modules": parsed("modules", lambda t, s: parse_modules(t)) or [],
        "sysctls": parsed("sysctl", lambda t, s: parse_sysctl(t)) or {},
        "nvidia_smi": report,
        "nvidia_smi_error": smi_error,
        "topology": parsed("topo-m", parse_topo_matrix, quiet_missing=True) if report else None,
        "nvlink": parsed("nvlink-s", parse_nvlink_status, quiet_missing=True) if report else None,
        "ib_ports": parsed(
            "ibstat", lambda t, s: parse_ibstat(t, s, problems=problems), quiet_missing=True
        )
        or [],
        "pci_devices": parsed("lspci-nn", parse_lspci) or [],
        "xids": parsed("kernel-xid", parse_xids) or [],
        "block_devices": parsed("lsblk", lambda t, s: parse_lsblk_pairs(t)) or [],
        "fabricmanager_active": (fm_text == "active") if fm_text else None,
        "fabricmanager_version": parsed(
            "fabricmanager-version", parse_tool_version, quiet_missing=True
        ),
        "container_toolkit": parsed("container-toolkit", parse_tool_version, quiet_missing=True),
        "problems": problems,
    }
    return HostFacts(**data)


def _gpu_report(
    sections: Mapping[str, Section], host: str
) -> tuple[NvidiaSmiReport | None, str | None]:
    xml = sections.get("nvidia-smi-xml")
    if xml is not None and xml.rc == 0 and xml.stdout.strip():
        return parse_nvidia_smi_xml(xml.stdout, f"{host}:nvidia-smi -q -x"), None
    text = sections.get("nvidia-smi-q")
    if text is not None and text.rc == 0 and text.stdout.strip():
        return parse_nvidia_smi_text(text.stdout, f"{host}:nvidia-smi -q"), None
    if xml is None:
        return None, "nvidia-smi was not run"
    if xml.rc == _NOT_FOUND_RC:
        return None, "nvidia-smi not found (driver not installed?)"
    detail = _first_line(xml.stderr) or _first_line(xml.stdout) or "no output"
    return None, f"nvidia-smi failed (rc={xml.rc}): {detail}"


def _text(sections: Mapping[str, Section], name: str) -> str | None:
    sec = sections.get(name)
    if sec is None or sec.rc != 0:
        return None
    return sec.stdout.strip() or None


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:200]
    return ""
