"""The registry of collected sections: one entry per thing the remote script gathers.

Each :class:`SectionSpec` says, in one place, what a section is: its name (the framing label,
see :mod:`gpufleet.collect.bundle`), the shell command the remote script runs for it, what that
command reads (the files under ``$GPUFLEET_SYSROOT`` or the program it runs, so a lab can serve
it), the parser, the :class:`~gpufleet.domain.facts.HostFacts` fields it fills, and whether it
is essential or best effort. Everything else is derived from :data:`REGISTRY`:

* the remote POSIX ``sh`` script (:func:`gpufleet.collect.script.remote_script`),
* the assembler (:func:`gpufleet.collect.assemble.assemble_facts`),
* the simulated lab's renderer (``gpufleet.lab.renderers``, one renderer per name here),
* the real-sshd lab of the tests (``tests/sshlab.py``: one fake file or tool per entry).

Adding a fact is: a parser, one entry here, and the facts field it fills.

Failure policy, per entry:

``essential``
    The GPU report. The parser reads the raw sections itself; output that cannot be parsed
    refuses the whole collection (:class:`ParseError`) so garbage never replaces good facts.
``REPORT`` (best effort)
    A missing section or a failing tool is recorded in ``HostFacts.problems`` naming the
    section (``quiet_missing``: a tool that is not installed, rc 127, is not a problem); an
    unparsable answer too. The fields get their "not collected" value.
``SILENT``
    Small identity values (hostname, kernel, nproc, DMI): a failure leaves the field ``None``
    and adds no problem; the parser sees the stripped text and is not called for empty text.

In every policy a value that parses but does not fit (:class:`FitError`, ``ValueError``, a
bounds check of the facts model) refuses the collection, naming the host and section.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from gpufleet.collect import shell_functions as sh
from gpufleet.collect.bundle import Section
from gpufleet.collect.dmi import DMI_FILES, parse_dmi
from gpufleet.collect.ib import parse_ibstat
from gpufleet.collect.kernel_log import parse_xids
from gpufleet.collect.nvidia_smi import parse_nvidia_smi_text, parse_nvidia_smi_xml
from gpufleet.collect.nvidia_smi.listing import LIST_SECTION, name_mig_devices
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
from gpufleet.domain.facts import NvidiaSmiReport, UnreadableXid

__all__ = [
    "NOT_FOUND_RC",
    "RECLAIM_REGISTRY",
    "REGISTRY",
    "SYSCTL_KEYS",
    "FitError",
    "OnFailure",
    "Read",
    "SectionSpec",
    "file_section",
    "first_line",
    "names",
    "tool_section",
]

#: Exit status of a command that is not installed (POSIX sh).
NOT_FOUND_RC = 127

#: sysctls compared with baselines; kept short so the script stays cheap.
SYSCTL_KEYS: tuple[str, ...] = (
    "vm.max_map_count",
    "vm.swappiness",
    "net.core.rmem_max",
    "net.core.wmem_max",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
    "kernel.numa_balancing",
    "net.ipv4.tcp_mtu_probing",
)


class FitError(ValueError):
    """A value parsed but does not fit the facts; the message is shown as it is."""


class OnFailure(StrEnum):
    """What a failing or unparsable best-effort section leaves behind (see the module doc)."""

    REPORT = "report"
    SILENT = "silent"


@dataclass(frozen=True)
class Read:
    """What a parser is given: the section's text and the collection around it."""

    text: str
    #: ``host:section``, the source named in errors.
    source: str
    host: str
    #: Non-fatal findings of the parser go here (they end up in ``HostFacts.problems``).
    problems: list[str]
    #: Every section of the collection (essential parsers read their partners from it).
    sections: Mapping[str, Section]
    #: Fields filled so far (essential sections are read first).
    facts: Mapping[str, Any]


#: A parser returns the facts fields it fills (a subset of the entry's ``fields``).
Parser = Callable[[Read], Mapping[str, Any]]


def _nothing() -> dict[str, Any]:
    return {}


@dataclass(frozen=True)
class SectionSpec:
    """One collected section (see the module docstring)."""

    name: str
    #: The ``sh`` command run by the script (after ``sec NAME``); ``$TO`` is the timeout
    #: wrapper, ``$R`` the sysroot, ``$rc`` the exit status of the previous section.
    command: str
    #: HostFacts fields this section fills (empty: read together with ``read_with``).
    fields: tuple[str, ...]
    parse: Parser | None
    essential: bool = False
    #: The parser reads the raw sections itself (``Read.sections``), whatever their rc.
    raw: bool = False
    on_failure: OnFailure = OnFailure.REPORT
    #: rc 127 (tool not installed) is a normal answer, not a problem.
    quiet_missing: bool = False
    #: Parsed only when a GPU report was read (topology and NVLink need the driver).
    needs_gpu: bool = False
    #: The command runs under ``timeout`` (``$TO``): a hung tool (a wedged GPU) cannot stall
    #: the collection. ``timeout_s`` overrides the script's per-tool default.
    timed: bool = False
    timeout_s: int | None = None
    #: Files read under ``$GPUFLEET_SYSROOT`` (one output line per file when several).
    files: tuple[str, ...] = ()
    #: The program run and its arguments (what a lab host fakes to serve this section).
    tool: str | None = None
    args: str = ""
    #: This section's output is read by the parser of another entry (its name).
    read_with: str | None = None
    #: Name used in error messages when it differs from ``name`` (``nvidia-smi``).
    label: str | None = None
    #: ``sh`` function definitions the command needs; lines run right after the section.
    functions: str = ""
    after: str = ""
    #: Field values when the section was not collected (default: ``None`` for each field).
    when_missing: Callable[[], dict[str, Any]] = _nothing

    def __post_init__(self) -> None:
        if not self.fields and self.read_with is None:
            raise ValueError(f"section {self.name}: fills no field and is read with no other")
        if self.fields and self.parse is None:
            raise ValueError(f"section {self.name}: fills {self.fields} but has no parser")
        if self.essential and not self.raw:
            raise ValueError(f"section {self.name}: an essential section reads its raw output")

    @property
    def source_label(self) -> str:
        return self.label or self.name

    def missing_values(self) -> dict[str, Any]:
        return {**dict.fromkeys(self.fields), **self.when_missing()}


def file_section(
    name: str, path: str, fields: tuple[str, ...], parse: Parser, **kw: Any
) -> SectionSpec:
    """A section that is one file under the sysroot (read with shell builtins, no process)."""
    return SectionSpec(name, f'readf "$R/{path}"', fields, parse, files=(path,), **kw)


def tool_section(
    name: str, tool: str, args: str, fields: tuple[str, ...], parse: Parser | None, **kw: Any
) -> SectionSpec:
    """A section that is the output of one program (under ``timeout`` unless told)."""
    kw.setdefault("timed", True)
    wrap = "$TO " if kw["timed"] else ""
    if kw["timed"] and kw.get("timeout_s"):
        wrap = f"${{TO:+timeout -k 2 {int(kw['timeout_s'])}}} "
    command = f"{wrap}{tool} {args}".rstrip()
    return SectionSpec(name, command, fields, parse, tool=tool, args=args, **kw)


def names(registry: Sequence[SectionSpec] | None = None) -> tuple[str, ...]:
    """Section names in the order the script emits them."""
    return tuple(s.name for s in (REGISTRY if registry is None else registry))


def first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:200]
    return ""


# --------------------------------------------------------------------------- parsers


def _one(fieldname: str, fn: Callable[[str], Any]) -> Parser:
    return lambda r: {fieldname: fn(r.text)}


def _one_src(fieldname: str, fn: Callable[[str, str], Any]) -> Parser:
    return lambda r: {fieldname: fn(r.text, r.source)}


def _cpu_count(r: Read) -> dict[str, Any]:
    text = r.text
    if not text.isdigit():
        return {"cpu_count": None}
    if len(text) > 9:
        raise FitError(f"cpu_count: {text[:20]}... is no CPU count")
    return {"cpu_count": int(text)}


def _dmi(r: Read) -> dict[str, Any]:
    dmi = parse_dmi(r.text)
    return {"system_vendor": dmi.vendor, "system_product": dmi.product, "dmi": dmi}


def _gpu_report(r: Read) -> dict[str, Any]:
    """The XML report, else the ``-q`` text one; why there is none when neither answered."""
    xml = r.sections.get("nvidia-smi-xml")
    if xml is not None and xml.rc == 0 and xml.stdout.strip():
        report = parse_nvidia_smi_xml(xml.stdout, f"{r.host}:nvidia-smi -q -x")
        return {"nvidia_smi": _named(r, report), "nvidia_smi_error": None}
    text = r.sections.get("nvidia-smi-q")
    if text is not None and text.rc == 0 and text.stdout.strip():
        report = parse_nvidia_smi_text(text.stdout, f"{r.host}:nvidia-smi -q")
        return {"nvidia_smi": _named(r, report), "nvidia_smi_error": None}
    if xml is None:
        error = "nvidia-smi was not run"
    elif xml.rc == NOT_FOUND_RC:
        error = "nvidia-smi not found (driver not installed?)"
    else:
        detail = first_line(xml.stderr) or first_line(xml.stdout) or "no output"
        error = f"nvidia-smi failed (rc={xml.rc}): {detail}"
    return {"nvidia_smi": None, "nvidia_smi_error": error}


def _named(r: Read, report: NvidiaSmiReport) -> NvidiaSmiReport:
    """Issue 26: the MIG devices' profiles, from ``nvidia-smi -L`` (listing.py)."""
    listed = r.sections.get(LIST_SECTION)
    return name_mig_devices(report, listed, f"{r.host}:nvidia-smi -L", r.problems)


def _xids(r: Read) -> dict[str, Any]:
    unreadable: list[UnreadableXid] = []
    try:
        xids = parse_xids(r.text, r.source, unreadable=unreadable)
    finally:
        for bad in unreadable:
            r.problems.append(f"{r.source}:{bad.line}: {bad.text}")
    return {"xids": xids, "xid_unreadable": unreadable}


def _fabricmanager(r: Read) -> dict[str, Any]:
    # fm() always answers: its last line says "active" or "inactive", whatever the rc.
    fm = r.sections.get("fabricmanager")
    text = fm.stdout.strip().splitlines()[-1] if fm and fm.stdout.strip() else ""
    return {"fabricmanager_active": (text == "active") if text else None}


# --------------------------------------------------------------------------- the registry

_GPU = "nvidia-smi-xml"

#: Every collected section, in the order the script emits them.
REGISTRY: tuple[SectionSpec, ...] = (
    file_section(
        "hostname",
        "proc/sys/kernel/hostname",
        ("hostname",),
        _one("hostname", str),
        on_failure=OnFailure.SILENT,
    ),
    file_section("os-release", "etc/os-release", ("os",), _one("os", parse_os_release)),
    file_section(
        "uname-r",
        "proc/sys/kernel/osrelease",
        ("kernel",),
        _one("kernel", str),
        on_failure=OnFailure.SILENT,
    ),
    tool_section(
        "nproc", "nproc", "", ("cpu_count",), _cpu_count, timed=False, on_failure=OnFailure.SILENT
    ),
    file_section(
        "meminfo",
        "proc/meminfo",
        ("memory_total_kib",),
        _one("memory_total_kib", parse_meminfo_total_kib),
    ),
    SectionSpec(
        "dmi",
        "dmi",
        ("system_vendor", "system_product", "dmi"),
        _dmi,
        on_failure=OnFailure.SILENT,
        files=tuple(f"sys/class/dmi/id/{f}" for f in DMI_FILES),
        functions=sh.DMI,
    ),
    file_section(
        "modules",
        "proc/modules",
        ("modules",),
        _one("modules", parse_modules),
        when_missing=lambda: {"modules": []},
    ),
    tool_section(
        "sysctl",
        "sysctl",
        "-e " + " ".join(SYSCTL_KEYS),
        ("sysctls",),
        _one("sysctls", parse_sysctl),
        timed=False,
        when_missing=lambda: {"sysctls": {}},
    ),
    tool_section(
        _GPU,
        "nvidia-smi",
        "-q -x",
        ("nvidia_smi", "nvidia_smi_error"),
        _gpu_report,
        essential=True,
        raw=True,
        label="nvidia-smi",
        after="nvx_rc=$rc",
    ),
    SectionSpec(
        "nvidia-smi-q",
        "nvsmi_q",
        (),
        None,
        tool="nvidia-smi",
        args="-q",
        timed=True,
        read_with=_GPU,
        functions=sh.NVSMI_Q,
    ),
    tool_section(LIST_SECTION, "nvidia-smi", "-L", (), None, read_with=_GPU, needs_gpu=True),
    tool_section(
        "topo-m",
        "nvidia-smi",
        "topo -m",
        ("topology",),
        _one_src("topology", parse_topo_matrix),
        quiet_missing=True,
        needs_gpu=True,
    ),
    tool_section(
        "nvlink-s",
        "nvidia-smi",
        "nvlink -s",
        ("nvlink",),
        _one_src("nvlink", parse_nvlink_status),
        quiet_missing=True,
        needs_gpu=True,
    ),
    tool_section(
        "ibstat",
        "ibstat",
        "",
        ("ib_ports",),
        lambda r: {"ib_ports": parse_ibstat(r.text, r.source, problems=r.problems)},
        quiet_missing=True,
    ),
    tool_section(
        "lspci-nn", "lspci", "-nn -D", ("pci_devices",), _one_src("pci_devices", parse_lspci)
    ),
    SectionSpec(
        "kernel-xid",
        "xids",
        ("xids", "xid_unreadable"),
        _xids,
        tool="dmesg",
        functions=sh.XIDS,
        when_missing=lambda: {"xid_unreadable": []},
    ),
    tool_section(
        "lsblk",
        "lsblk",
        "-b -d -n -P -o NAME,SIZE,TRAN,ROTA,MODEL",
        ("block_devices",),
        _one("block_devices", parse_lsblk_pairs),
        timed=False,
    ),
    SectionSpec(
        "fabricmanager",
        "fm",
        ("fabricmanager_active",),
        _fabricmanager,
        raw=True,
        tool="systemctl",
        args="--quiet is-active nvidia-fabricmanager",
        functions=sh.FM,
    ),
    tool_section(
        "fabricmanager-version",
        "nv-fabricmanager",
        "--version",
        ("fabricmanager_version",),
        _one_src("fabricmanager_version", parse_tool_version),
        quiet_missing=True,
    ),
    SectionSpec(
        "container-toolkit",
        "ctk",
        ("container_toolkit",),
        _one_src("container_toolkit", parse_tool_version),
        quiet_missing=True,
        tool="nvidia-ctk",
        args="--version",
        functions=sh.CTK,
    ),
)


# --------------------------------------------------------------------------- accelerator vendors

#: The section that reads every vendor's sections into the facts' accelerator fields
#: (``collect/accelerators.py``); it runs nothing itself (``true``, a shell builtin).
ACCELERATORS = "accelerators"


def _accelerators(r: Read) -> dict[str, Any]:
    from gpufleet.collect.accelerators import read_accelerators

    if ACCELERATORS not in r.sections:  # the output ended before the last section
        r.problems.append(f"{ACCELERATORS}: section missing from collection output")
    return read_accelerators(r.sections, r.facts.get("pci_devices"), r.host, r.problems)


def _accelerator_sections() -> tuple[SectionSpec, ...]:
    """The vendor plugins' sections (:func:`gpufleet.domain.vendors.collectors`), read
    together by one entry after ``lspci`` (the reader compares with the bus); a vendor's tool
    missing is rc 127."""
    from gpufleet.collect.accelerators import FIELDS, empty
    from gpufleet.domain.vendors import collectors

    specs = [
        SectionSpec(
            s.name,
            s.command,
            (),
            None,
            read_with=ACCELERATORS,
            tool=s.tool,
            args=s.args,
            files=s.files,
            functions=s.functions,
            # the per-chip loops run each tool under $TO inside their function
            timed=s.command.startswith("$TO ") or "$TO " in s.functions,
        )
        for c in collectors()
        for s in c.sections
    ]
    reader = SectionSpec(
        ACCELERATORS, "true", FIELDS, _accelerators, raw=True, tool="true", when_missing=empty
    )
    return (*specs, reader)


REGISTRY = REGISTRY + _accelerator_sections()


def field_sections(registry: Sequence[SectionSpec] | None = None) -> dict[str, str]:
    """HostFacts field -> the section it comes from (to name the source of a bad value)."""
    return {
        f: spec.source_label
        for spec in (REGISTRY if registry is None else registry)
        for f in spec.fields
    }


def _check(registry: Sequence[SectionSpec]) -> None:
    seen: dict[str, str] = {}
    by_name = {s.name for s in registry}
    for spec in registry:
        if spec.name in seen:
            raise ValueError(f"section {spec.name} registered twice")
        seen[spec.name] = spec.name
        if spec.read_with is not None and spec.read_with not in by_name:
            raise ValueError(f"section {spec.name}: read with unknown section {spec.read_with}")


_check(REGISTRY)


# --------------------------------------------------------------------------- reclaim sections

# Reclaim (gpufleet reclaim, service/allocation/reclaim.py): run after the collection sections in the same
# script when a released host is checked before it goes back to the pool. The GPU processes,
# memory and pending row remaps come from the GPU report above; these add what the lessee may
# have left on the host. Parsed by gpufleet.collect.reclaim.read_reclaim. The scratch function
# reads RECLAIM_SCRATCH (paths) and RECLAIM_CLEAN (1: delete their contents first), which the
# service sets in front of the script.
_SCRATCH = """\
scratch() {
  for d in $RECLAIM_SCRATCH; do
    [ -e "$R$d" ] || continue
    if [ "$RECLAIM_CLEAN" = 1 ]; then find "$R$d" -mindepth 1 -delete || return 1; fi
    find "$R$d" -mindepth 1 -maxdepth 1 || return 1
  done
  return 0
}"""


def _reclaim_parser(fieldname: str, fn: Callable[[str, str], Any]) -> Parser:
    return lambda r: {fieldname: fn(r.text, r.source)}


def _reclaim_registry() -> tuple[SectionSpec, ...]:
    from gpufleet.collect.reclaim import (
        parse_crontab_users,
        parse_mounts,
        parse_ps,
        parse_scratch,
    )

    return (
        file_section(
            "reclaim-mounts", "proc/mounts", ("mounts",), _reclaim_parser("mounts", parse_mounts)
        ),
        tool_section(
            "reclaim-ps",
            "ps",
            "-eo user:32=,uid=,pid=,comm=",
            ("processes",),
            _reclaim_parser("processes", parse_ps),
        ),
        SectionSpec(
            "reclaim-crontabs",
            'ls -1A "$R/var/spool/cron/crontabs"',
            ("crontab_users",),
            _reclaim_parser("crontab_users", parse_crontab_users),
            tool="ls",
            args="-1A /var/spool/cron/crontabs",
        ),
        SectionSpec(
            "reclaim-scratch",
            "scratch",
            ("scratch_left",),
            _reclaim_parser("scratch_left", parse_scratch),
            tool="find",
            functions=_SCRATCH,
        ),
    )


#: Reclaim-only sections (fields of :class:`gpufleet.domain.reclaim.ReclaimFindings`).
RECLAIM_REGISTRY: tuple[SectionSpec, ...] = _reclaim_registry()
_check(REGISTRY + RECLAIM_REGISTRY)
