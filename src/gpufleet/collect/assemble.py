"""Turn the sections of one collection into :class:`HostFacts`.

The GPU report is essential: if ``nvidia-smi`` answered (rc 0) but its output cannot be
parsed, the whole collection is refused (:class:`ParseError`) so a garbage answer never
overwrites good facts. Every other section is best effort: a failure is recorded in
``HostFacts.problems`` naming the section, and the rest is kept. A section that failed is
``None`` in the facts (not collected), never ``[]`` (collected, nothing there); the kernel
log is read line by line, keeping every readable Xid and listing the unreadable lines.

A value that parses but does not fit the facts' bounds (an absurd memory size, a
200-character kernel release, 100k GPUs) refuses the whole collection too, with a
:class:`ParseError` naming the host, section and field: the host is ``bad output`` and its
last good facts stay, the same on every database.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, TypeVar

from pydantic import ValidationError

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
from gpufleet.domain.facts import FACTS_VERSION, HostFacts, NvidiaSmiReport, UnreadableXid
from gpufleet.errors import ParseError

T = TypeVar("T")

_NOT_FOUND_RC = 127
# HostFacts field -> the section it comes from, to name the source of a value that does not fit.
_FIELD_SECTIONS = {
    "hostname": "hostname",
    "os": "os-release",
    "kernel": "uname-r",
    "cpu_count": "nproc",
    "memory_total_kib": "meminfo",
    "system_vendor": "dmi",
    "system_product": "dmi",
    "modules": "modules",
    "sysctls": "sysctl",
    "nvidia_smi": "nvidia-smi",
    "ib_ports": "ibstat",
    "pci_devices": "lspci-nn",
    "xids": "kernel-xid",
    "xid_unreadable": "kernel-xid",
    "block_devices": "lsblk",
    "fabricmanager_version": "fabricmanager-version",
    "container_toolkit": "container-toolkit",
}


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
        except ValidationError as exc:  # parsed, but does not fit: refuse the collection
            raise ParseError(f"{host}:{name}", _fit_error(exc)) from None
        except ValueError as exc:  # e.g. int() of a 5000-digit number
            raise ParseError(f"{host}:{name}", f"value does not fit: {exc}") from None

    report, smi_error = _gpu_report(sections, host)
    kernel = _text(sections, "uname-r")
    nproc = _text(sections, "nproc")
    unreadable: list[UnreadableXid] = []
    xids = parsed("kernel-xid", lambda t, s: parse_xids(t, s, unreadable=unreadable))
    for bad in unreadable:
        problems.append(f"{host}:kernel-xid:{bad.line}: {bad.text}")
    dmi = (_text(sections, "dmi") or "").splitlines()
    fm = sections.get("fabricmanager")
    fm_text = fm.stdout.strip().splitlines()[-1] if fm and fm.stdout.strip() else ""

    data: dict[str, Any] = {
        "facts_version": FACTS_VERSION,
        "collected_at": collected_at,
        "hostname": _text(sections, "hostname"),
        "os": parsed("os-release", lambda t, s: parse_os_release(t)),
        "kernel": kernel,
        "cpu_count": _cpu_count(nproc, host),
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
        ),
        "pci_devices": parsed("lspci-nn", parse_lspci),
        "xids": xids,
        "xid_unreadable": unreadable,
        "block_devices": parsed("lsblk", lambda t, s: parse_lsblk_pairs(t)),
        "fabricmanager_active": (fm_text == "active") if fm_text else None,
        "fabricmanager_version": parsed(
            "fabricmanager-version", parse_tool_version, quiet_missing=True
        ),
        "container_toolkit": parsed("container-toolkit", parse_tool_version, quiet_missing=True),
        "problems": problems,
    }
    try:
        return HostFacts(**data)
    except ValidationError as exc:
        field = str(exc.errors()[0]["loc"][0]) if exc.errors()[0]["loc"] else ""
        section = _FIELD_SECTIONS.get(field, "facts")
        raise ParseError(f"{host}:{section}", _fit_error(exc)) from None


def _fit_error(exc: ValidationError) -> str:
    """The first complaint of a bounds check: "field: message (got 'value...')"."""
    err = exc.errors()[0]
    field = ".".join(str(p) for p in err["loc"]) or "value"
    value = err.get("input")
    if not isinstance(value, str | int | float):
        return f"{field}: {err['msg']}"
    got = repr(value)
    got = got if len(got) <= 60 else got[:57] + "..."
    return f"{field}: {err['msg']} (got {got})"


def _cpu_count(text: str | None, host: str) -> int | None:
    if not text or not text.isdigit():
        return None
    if len(text) > 9:
        raise ParseError(f"{host}:nproc", f"cpu_count: {text[:20]}... is no CPU count")
    return int(text)


def _gpu_report(
    sections: Mapping[str, Section], host: str
) -> tuple[NvidiaSmiReport | None, str | None]:
    try:
        return _gpu_report_of(sections, host)
    except ParseError:
        raise
    except ValueError as exc:  # a value that does not fit, not caught by the parser
        raise ParseError(f"{host}:nvidia-smi", f"value does not fit: {exc}") from None


def _gpu_report_of(
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
