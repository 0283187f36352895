"""Every public parser of :mod:`gpufleet.collect` fails closed.

Given a damaged version of a real input, a parser returns a result or raises
:class:`~gpufleet.errors.ParseError` (naming the source and, where it knows them, the line and
field): never a pydantic ``ValidationError``, ``ValueError``, ``KeyError``, ``TypeError``,
``OverflowError``, ``RecursionError`` ... Such a leak ends a whole collection or inspection run
instead of refusing the one host whose tool printed nonsense.

The inputs are the real captures in ``tests/fixtures/captured`` (see their PROVENANCE.md), and,
for the sections no capture exists of (os-release, /proc/modules, sysctl, lsblk, meminfo, dmi,
tool versions, the reclaim sections, the framed bundle and the probe), what the lab renders for
them (in the tools' formats, the probe's GPU and IB parts from the captures). Hypothesis damages
them the way a broken tool, a cut stream or a strange host would: a number replaced by a
negative, a huge, a non-ASCII or a non-finite one; a word replaced by garbage, by a very long
string or by framing text; lines deleted, duplicated, swapped, inserted (random bytes read as
text included) or re-indented; the text cut at any point; in JSON, any value replaced by a value
of another type or size, a key dropped, deep nesting.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.collect import (
    active,
    bundle,
    dmi,
    ib,
    inspect,
    inspect_vendors,
    kernel_log,
    pci,
    reclaim,
    sacct,
    slurm,
    slurm_state,
    system,
    topology,
)
from gpufleet.collect.assemble import assemble_facts
from gpufleet.collect.bundle import Section
from gpufleet.collect.nvidia_smi import csv as smi_csv
from gpufleet.collect.nvidia_smi import listing as smi_listing
from gpufleet.collect.nvidia_smi import text as smi_text
from gpufleet.collect.nvidia_smi import xml as smi_xml
from gpufleet.domain.facts import UnreadableXid
from gpufleet.domain.slurm_reservations import parse_reservations
from gpufleet.errors import ParseError
from gpufleet.lab.captures import captures_dir, load_exporter_bundle
from gpufleet.lab.fleet import LabHost
from gpufleet.lab.hostfiles import render_reclaim_sections
from gpufleet.lab.probe import render_probe
from gpufleet.lab.renderers import render_output, render_sections
from gpufleet.vendors.cambricon import cnmon as cambricon_cnmon
from gpufleet.vendors.cambricon import plugin as cambricon_plugin
from gpufleet.vendors.enflame import efsmi as enflame_efsmi
from gpufleet.vendors.enflame import plugin as enflame_plugin
from gpufleet.vendors.hygon import hy_smi as hygon_smi
from gpufleet.vendors.hygon import plugin as hygon_plugin
from gpufleet.vendors.iluvatar import ixsmi as iluvatar_ixsmi
from gpufleet.vendors.iluvatar import plugin as iluvatar_plugin
from gpufleet.vendors.kunlunxin import plugin as kunlunxin_plugin
from gpufleet.vendors.kunlunxin import xpu_smi as kunlunxin_smi
from gpufleet.vendors.metax import mx_smi as metax_smi
from gpufleet.vendors.metax import plugin as metax_plugin

CAPTURED = captures_dir()
AT = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)

#: Replacements for a number.
NUMBERS = [
    "-1",
    "0",
    "-0",
    "255",
    "256",
    "4294967296",
    "18446744073709551616",
    "9" * 40,
    "9" * 5000,  # past int()'s 4300-digit limit
    "1e999",
    "1e308",
    "nan",
    "inf",
    "-inf",
    "3.5",
    "-3.5",
    "1_000",
    "²",  # str.isdigit() but not int()
    "٣",  # an Arabic-Indic digit: int() reads it
    "0x1f",
    "+7",
    ".",
    "e",
    "",
]
#: Replacements for a word.
WORDS = [
    "",
    " ",
    "N/A",
    "[N/A]",
    "[GPU is lost]",
    "Unknown Error",
    "None",
    "null",
    "true",
    "x" * 70,
    "x" * 300,
    "y" * 5000,
    "\x00",
    "\ufffd",
    "\ud800",  # a lone surrogate, as a JSON escape or a surrogateescape decoding leaves
    "\udc80",
    "é",
    "\u2028",
    "\x1b[4m",
    "{",
    "}",
    "[",
    "]",
    "'",
    '"',
    "\\",
    "\\x",
    "\\0",
    "=",
    ":",
    ",",
    " : ",
    "\t",
    "<",
    "&amp;",
    "&#0;",
    "]]>",
    "@@gpufleet:done@@",
    "@@probe end",
    "NVRM: Xid (PCI:0000:01:00): 79, pid=1, name=x, y",
    "NVRM: Xid (PCI:0000:01:00): 99999999999",
]
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_WORD = re.compile(r"[^\s,:=;\"'<>()\[\]{}/]+")


def _bytes_text(data: bytes) -> str:
    """Random bytes as the transports read them (``collect/ssh.py``, ``collect/local.py``)."""
    return data.decode("utf-8", "replace")


_JUNK_LINE = st.one_of(
    st.sampled_from(WORDS),
    st.text(max_size=80),
    st.binary(max_size=80).map(_bytes_text),
)


def _replace_match(draw: st.DrawFn, text: str, pattern: re.Pattern[str], new: str) -> str:
    matches = [m.span() for m in pattern.finditer(text)]
    if not matches:
        return text
    start, end = matches[draw(st.integers(0, len(matches) - 1))]
    return text[:start] + new + text[end:]


@st.composite
def _mutated(draw: st.DrawFn, bases: Sequence[str]) -> str:
    """One of ``bases``, damaged by one to three edits."""
    text = draw(st.sampled_from(bases))
    for _ in range(draw(st.integers(1, 3))):
        op = draw(
            st.sampled_from(
                [
                    "number",
                    "number",
                    "word",
                    "word",
                    "del",
                    "dup",
                    "swap",
                    "insert",
                    "indent",
                    "cut",
                ]
            )
        )
        if op == "number":
            new = draw(st.one_of(st.sampled_from(NUMBERS), st.integers().map(str)))
            text = _replace_match(draw, text, _NUMBER, new)
            continue
        if op == "word":
            text = _replace_match(draw, text, _WORD, draw(_JUNK_LINE))
            continue
        if op == "cut":
            text = text[: draw(st.integers(0, len(text)))]
            continue
        lines = text.split("\n")
        i = draw(st.integers(0, len(lines) - 1))
        if op == "del":
            del lines[i]
        elif op == "dup":
            lines.insert(i, lines[i])
        elif op == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "insert":
            lines.insert(i, draw(_JUNK_LINE))
        else:  # indent: more, fewer, or a tab
            lines[i] = draw(st.sampled_from(["  ", "\t", "", " " * 40])) + lines[i].lstrip()
        text = "\n".join(lines)
    return text


_DEEP = '"@@deep@@"'
_JSON_VALUES: list[Any] = [
    None,
    True,
    -1,
    0,
    2**64,
    10**400,
    -(10**30),
    1e308,
    -1.5,
    "",
    "x" * 5000,
    "FAILED",
    "0,1,-2",
    "²",
    "\ud800",
    "gpu-[01-99999999]",
    "gpu-[5-1]",
    "a[",
    [],
    {},
    [None],
    {"set": True, "number": 10**20},
    {"set": True, "infinite": False, "number": -(10**20)},
    "@@deep@@",
]


def _paths(doc: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [at]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out.extend(_paths(v, (*at, k)))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out.extend(_paths(v, (*at, i)))
    return out


@st.composite
def _mutated_json(draw: st.DrawFn, bases: Sequence[str]) -> str:
    """One of ``bases`` (JSON documents), with one to three values replaced or keys dropped."""
    doc = json.loads(draw(st.sampled_from(bases)))
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(doc)
        path = paths[draw(st.integers(1, len(paths) - 1))] if len(paths) > 1 else ()
        if not path:
            break
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        if draw(st.booleans()) and isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent[path[-1]] = copy.deepcopy(draw(st.sampled_from(_JSON_VALUES)))
    text = json.dumps(doc)
    if _DEEP in text:  # nesting deeper than any parser's recursion
        text = text.replace(_DEEP, "[" * 100_000 + "]" * 100_000, 1)
    return text


# ------------------------------------------------------------------------------ the inputs


def _read(rel: str) -> str:
    return (CAPTURED / rel).read_text(errors="surrogateescape")


def _head(text: str, size: int = 40_000) -> str:
    """The first whole lines of a long log, up to ``size`` characters (keeps examples fast)."""
    if len(text) <= size:
        return text
    return text[: text.rfind("\n", 0, size) + 1]


def _glob(folder: str, pattern: str = "*") -> list[str]:
    return [
        _read(str(p.relative_to(CAPTURED)))
        for p in sorted((CAPTURED / folder).glob(pattern))
        if p.is_file() and p.name != "PROVENANCE.md"
    ]


_HOSTS = (
    LabHost(name="gpu-01", model="h100-8x", serial_salt=1, faults=["xid:79"]),
    LabHost(name="gpu-02", model="a100-8x", serial_salt=2),
    LabHost(name="gpu-03", model="l40s-1x", serial_salt=3),
)


@cache
def _lab_section(name: str) -> list[str]:
    return [render_sections(h)[name].stdout for h in _HOSTS]


@cache
def _h100_q() -> str:
    return render_sections(_HOSTS[0])["nvidia-smi-q"].stdout


@cache
def _query_gpu_csvs() -> list[str]:
    out: list[str] = []
    for path in sorted((CAPTURED / "nvidia-smi-csv").glob("nvidia_gpu_exporter_*.txt")):
        sections = load_exporter_bundle(path)
        out.extend(v for k, v in sections.items() if "query-gpu (csv" in k and v.strip())
    return out


@cache
def _mig_lists() -> list[str]:
    """Every bundle's ``nvidia-smi -L`` (the MIG ones name their MIG devices' profiles)."""
    return [
        load_exporter_bundle(path)["capabilities :: list (-L)"]
        for path in sorted((CAPTURED / "nvidia-smi-csv").glob("nvidia_gpu_exporter_*.txt"))
    ]


def _mig_list(text: str) -> object:
    return smi_listing.parse_mig_list(text, "nvidia-smi -L")


@cache
def _probes() -> list[str]:
    hosts = [*_HOSTS, LabHost(name="gpu-04", model="h100-8x", serial_salt=4, faults=["hot"])]
    return [render_probe(h) for h in hosts]


@cache
def _vendor_probes() -> list[str]:
    """The probe answers of the lab's Ascend and AMD hosts (real captures), healthy and with
    each of their faults (an NPU in Alarm, missing, its RoCE port down or unhealthy, npu-smi's
    error about it; a card missing)."""
    hosts = [
        LabHost(name="npu-01", model="ascend-910b3-8x", serial_salt=1),
        LabHost(name="npu-02", model="ascend-910b3-8x", serial_salt=2, faults=["npu-alarm:3"]),
        LabHost(name="npu-03", model="ascend-910b3-8x", serial_salt=3, faults=["npu-missing"]),
        LabHost(name="npu-04", model="ascend-910b3-8x", serial_salt=4, faults=["npu-link-down"]),
        LabHost(
            name="npu-05",
            model="ascend-910b3-8x",
            serial_salt=5,
            faults=["npu-net-unhealthy:1", "npu-smi-error:6"],
        ),
        LabHost(name="amd-01", model="mi100-4x", serial_salt=1),
        LabHost(name="amd-02", model="mi100-4x", serial_salt=2, faults=["gpu-missing"]),
        LabHost(name="dcu-01", model="k100ai-4x", serial_salt=1),
        LabHost(name="dcu-02", model="k100ai-4x", serial_salt=2, faults=["dcu-missing"]),
    ]
    return [render_probe(h) for h in hosts]


def _vendor_probe(text: str) -> object:
    return inspect.parse_probe(text, AT)


@cache
def _probe_part(name: str) -> list[str]:
    parts = [inspect.split_probe(p)[name] for p in _probes()]
    # the lab's models without a --query-gpu capture answer "exit 6": not an input to damage
    return [p for p in parts if "@@rc 6" not in p]


@cache
def _reclaim(name: str) -> list[str]:
    host = LabHost(
        name="gpu-05",
        model="h100-8x",
        serial_salt=5,
        faults=["stale-mount", "lessee-process", "lessee-crontab"],
    )
    text = render_reclaim_sections(host)[name].stdout
    return [text or "/scratch/a b\n/scratch/job-17\n"]


# ------------------------------------------------------------------------------ the parsers


@dataclass(frozen=True)
class Case:
    """A parser (one or more calls of it) and the inputs it is fed, damaged."""

    name: str
    calls: tuple[Callable[[str], object], ...]
    bases: Callable[[], list[str]]
    json: bool = False


def _xids_listed(text: str) -> object:
    unreadable: list[UnreadableXid] = []
    return kernel_log.parse_xids(text, "kernel log", unreadable=unreadable), unreadable


def _ibstat_problems(text: str) -> object:
    problems: list[str] = []
    return ib.parse_ibstat(text, problems=problems), problems


CASES = [
    Case(
        "ibstat",
        (ib.parse_ibstat, _ibstat_problems),
        lambda: _glob("ib", "gpud_ibstat.*.txt"),
    ),
    Case("ibstatus", (ib.parse_ibstatus,), lambda: _glob("ib", "gpud_ibstatus.*.txt")),
    Case("os-release", (system.parse_os_release,), lambda: _lab_section("os-release")),
    Case("modules", (system.parse_modules,), lambda: _lab_section("modules")),
    Case("sysctl", (system.parse_sysctl,), lambda: _lab_section("sysctl")),
    Case("lsblk", (system.parse_lsblk_pairs,), lambda: _lab_section("lsblk")),
    Case("meminfo", (system.parse_meminfo_total_kib,), lambda: _lab_section("meminfo")),
    Case(
        "tool-version",
        (lambda t: system.parse_tool_version(t, "nvidia-ctk --version"),),
        lambda: _lab_section("container-toolkit") + _lab_section("fabricmanager-version")[:1],
    ),
    Case("dmi", (dmi.parse_dmi,), lambda: _lab_section("dmi")),
    Case("sinfo-text", (slurm.parse_sinfo_json,), lambda: _glob("slurm", "sinfo-*.json")),
    Case(
        "sinfo-json", (slurm.parse_sinfo_json,), lambda: _glob("slurm", "sinfo-*.json"), json=True
    ),
    Case("sinfo-gres-text", (slurm_state.parse_node_gres,), lambda: _glob("slurm", "sinfo-*.json")),
    Case(
        "sinfo-gres-json", (slurm_state.parse_node_gres,), lambda: _glob("slurm", "sinfo-*.json"),
        json=True,
    ),
    Case("squeue", (slurm_state.parse_squeue,), lambda: _glob("slurm", "squeue-*.txt")),
    Case(
        "scontrol-reservations", (parse_reservations,),
        lambda: _glob("slurm", "scontrol-show-reservation-*.txt"),
    ),
    Case("sacct-text", (sacct.parse_sacct_json,), lambda: _glob("slurm", "sacct-*.json")),
    Case(
        "sacct-json", (sacct.parse_sacct_json,), lambda: _glob("slurm", "sacct-*.json"), json=True
    ),
    Case("dcgm-text", (active.parse_dcgm_diag_json,), lambda: _glob("dcgm")),
    Case(
        "dcgm-json",
        (active.parse_dcgm_diag_json,),
        lambda: _glob("dcgm", "*.json"),
        json=True,
    ),
    Case(
        "nccl-tests",
        (active.parse_nccl_tests,),
        lambda: _glob("active", "superbench_nccl_*.log"),
    ),
    Case("gpu-burn", (active.parse_gpu_burn,), lambda: _glob("active", "superbench_gpu_burn*")),
    Case(
        "query-gpu-csv",
        (smi_csv.parse_query_gpu_csv, smi_csv.parse_query_gpu_report),
        _query_gpu_csvs,
    ),
    Case("inspect-gpus", (inspect.parse_gpus,), lambda: _probe_part("gpu")),
    Case("inspect-ports", (inspect.parse_ports,), lambda: _probe_part("ib")),
    Case("inspect-df", (inspect.parse_df,), lambda: _probe_part("disk")),
    Case("inspect-probe", (lambda t: inspect.parse_probe(t, AT),), _probes),
    Case(
        "inspect-vendor-probe",
        (_vendor_probe, lambda t: inspect_vendors.parse_vendor_parts(inspect.split_probe(t))),
        _vendor_probes,
    ),
    Case(
        "reclaim-mounts",
        (lambda t: reclaim.parse_mounts(t, "mounts"),),
        lambda: _reclaim("reclaim-mounts"),
    ),
    Case("reclaim-ps", (lambda t: reclaim.parse_ps(t, "ps"),), lambda: _reclaim("reclaim-ps")),
    Case(
        "reclaim-crontabs",
        (lambda t: reclaim.parse_crontab_users(t, "crontabs"),),
        lambda: _reclaim("reclaim-crontabs"),
    ),
    Case(
        "reclaim-scratch",
        (lambda t: reclaim.parse_scratch(t, "scratch"),),
        lambda: _reclaim("reclaim-scratch"),
    ),
    Case(
        "reclaim-cleanup",
        (lambda t: reclaim.parse_cleanup(t, "cleanup"),),
        # our own script's lines (collect/reclaim.py CLEANUP), as read back from a real run in
        # tests/e2e/test_reclaim_cleanup.py: a kill, an unmount (escaped space), a failed rm
        lambda: [
            "processes 0 gflessee\nmounts 0 /data/team\\040a\ncrontabs 1 gflessee\n",
            "processes 127 alice\n",
        ],
    ),
    Case(
        "nvidia-smi-q",
        (smi_text.parse_nvidia_smi_text,),
        # the captures (R525..R560) and the lab's H100 report (R535+ clock event counters)
        lambda: [*_glob("nvidia-smi-q", "gpud_nvidia-smi-query.*.valid*.txt"), _h100_q()],
    ),
    Case(
        "nvidia-smi-xml",
        (smi_xml.parse_nvidia_smi_xml,),
        lambda: [t for t in _glob("nvidia-smi-xml", "*.xml") if len(t) < 100_000],
    ),
    Case("nvidia-smi-L", (_mig_list,), _mig_lists),  # issue 26 item 7: MIG profiles
    Case("topo-m", (topology.parse_topo_matrix,), lambda: _glob("nvidia-smi-topo", "*topo-m*")),
    Case(
        "nvlink-s",
        (topology.parse_nvlink_status,),
        lambda: _glob("nvidia-smi-topo", "*nvlink*"),
    ),
    Case("lspci", (pci.parse_lspci,), lambda: [_head(t) for t in _glob("lspci", "*.txt")]),
    # Hygon (issue 28): hy-smi / DTK rocm-smi tables in their four header versions, DTK's
    # rocm-smi --json, and the plugin's reader of the sections
    Case(
        "hygon-hy-smi",
        (hygon_smi.parse_hy_smi, lambda t: hygon_plugin.parse_sections({"hy_smi": t})),
        lambda: _glob("hygon", "*smi*.txt"),
    ),
    Case(
        "hygon-rocm-smi-json",
        (hygon_smi.parse_rocm_smi_dtk_json,),
        lambda: _glob("hygon", "*.json"),
        json=True,
    ),
    Case(
        "hygon-rocm-smi-json-text",
        (hygon_smi.parse_rocm_smi_dtk_json,),
        lambda: _glob("hygon", "*.json"),
    ),
    # Cambricon (issue 28): cnmon in its three layouts (the anonymised v5.10.31 capture is
    # refused as published: its EDITED copy, as tests/vendors/test_cambricon_cnmon.py reads it)
    Case(
        "cambricon-cnmon",
        (cambricon_cnmon.parse_cnmon, lambda t: cambricon_plugin.parse_sections({"cnmon": t})),
        lambda: [t.replace("xxxxx MiB", "99999 MiB") for t in _glob("cambricon", "*.txt")],
    ),
    # Kunlunxin (issue 28): xpu_smi 4.x (K200, R300) and xpu-smi 5.x (P800)
    Case(
        "kunlunxin-xpu-smi",
        (kunlunxin_smi.parse_xpu_smi, lambda t: kunlunxin_plugin.parse_sections({"xpu_smi": t})),
        lambda: _glob("kunlunxin", "*.txt"),
    ),
    # MetaX (issue 28): mx-smi 2.1.6 / 2.2.9, topo -m / -n
    Case(
        "metax-mx-smi",
        (metax_smi.parse_mx_smi, lambda t: metax_plugin.parse_sections({"mx_smi": t})),
        lambda: _glob("metax", "*mx-smi_2*.txt"),
    ),
    Case("metax-mx-smi-topo", (metax_smi.parse_mx_smi_topo,), lambda: _glob("metax", "*topo*")),
    # Iluvatar (ixsmi, IX-ML 4.1.0 / 4.3.0) and Enflame (efsmi V1.2.0.301), issue 28
    Case(
        "iluvatar-ixsmi",
        (iluvatar_ixsmi.parse_ixsmi, lambda t: iluvatar_plugin.parse_sections({"ixsmi": t})),
        lambda: _glob("iluvatar", "*.txt"),
    ),
    Case(
        "enflame-efsmi",
        (enflame_efsmi.parse_efsmi, lambda t: enflame_plugin.parse_sections({"efsmi": t})),
        lambda: _glob("enflame", "*.txt"),
    ),
    Case(
        "kernel-xids",
        (kernel_log.parse_xids, _xids_listed),
        lambda: [_head(t) for t in _glob("kernel-log", "*.log")],
    ),
    Case("bundle", (bundle.split_bundle,), lambda: [render_output(h) for h in _HOSTS]),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_damaged_input_gives_a_result_or_a_parse_error(case: Case, data: st.DataObject) -> None:
    bases = case.bases()
    assert bases, f"{case.name}: no inputs found"
    text = data.draw(_mutated_json(bases) if case.json else _mutated(bases), label="input")
    for call in case.calls:
        try:
            call(text)
        except ParseError as exc:
            assert exc.source and exc.message  # names what it could not read


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_undamaged_inputs_parse(case: Case) -> None:
    """The bases are what the parsers read (a mutation of something already refused would
    test little): every base of every case parses."""
    for text in case.bases():
        for call in case.calls:
            call(text)


def test_the_cases_cover_every_public_parser() -> None:
    """A parser added to gpufleet.collect (or to the Hygon or Cambricon plugin) without a case
    here fails this test."""
    src = Path(inspect.__file__).parent
    public = {
        f"{path.stem}.{m.group(1)}"
        for path in [
            *src.glob("*.py"),
            *src.glob("nvidia_smi/*.py"),
            *src.parent.joinpath("vendors", "hygon").glob("*.py"),
            *src.parent.joinpath("vendors", "cambricon").glob("*.py"),
            *src.parent.joinpath("vendors", "kunlunxin").glob("*.py"),
            *src.parent.joinpath("vendors", "metax").glob("*.py"),
            *src.parent.joinpath("vendors", "iluvatar").glob("*.py"),
            *src.parent.joinpath("vendors", "enflame").glob("*.py"),
        ]
        for m in re.finditer(r"^def ((?:parse|split)_\w+)\(", path.read_text(), re.M)
    }
    covered = {
        "ib.parse_ibstat",
        "ib.parse_ibstatus",
        "system.parse_os_release",
        "system.parse_modules",
        "system.parse_sysctl",
        "system.parse_lsblk_pairs",
        "system.parse_meminfo_total_kib",
        "system.parse_tool_version",
        "dmi.parse_dmi",
        "slurm.parse_sinfo_json",
        "slurm_state.parse_node_gres",
        "slurm_state.parse_squeue",
        "sacct.parse_sacct_json",
        "active.parse_dcgm_diag_json",
        "active.parse_nccl_tests",
        "active.parse_gpu_burn",
        "csv.parse_query_gpu_csv",
        "csv.parse_query_gpu_report",
        "inspect.parse_gpus",
        "inspect.parse_ports",
        "inspect.parse_df",
        "inspect.parse_probe",
        "inspect.split_probe",
        "inspect_vendors.parse_vendor_parts",
        "reclaim.parse_mounts",
        "reclaim.parse_ps",
        "reclaim.parse_crontab_users",
        "reclaim.parse_scratch",
        "reclaim.parse_cleanup",
        "text.parse_nvidia_smi_text",
        "xml.parse_nvidia_smi_xml",
        "topology.parse_topo_matrix",
        "listing.parse_mig_list",
        "topology.parse_nvlink_status",
        "pci.parse_lspci",
        "kernel_log.parse_xids",
        "bundle.split_bundle",
        "hy_smi.parse_hy_smi",
        "hy_smi.parse_rocm_smi_dtk_json",
        "plugin.parse_sections",  # hygon's, cambricon's, kunlunxin's and metax's
        "cnmon.parse_cnmon",
        "xpu_smi.parse_xpu_smi",
        "mx_smi.parse_mx_smi",
        "mx_smi.parse_mx_smi_topo",
        "ixsmi.parse_ixsmi",
        "efsmi.parse_efsmi",
    }
    assert public == covered


# ------------------------------------------------------------------- the leaks, one by one


def _h100(section: str) -> str:
    return render_sections(LabHost(name="p", model="h100-8x", serial_salt=1))[section].stdout


def _first(path: str) -> str:
    return _glob(*path.rsplit("/", 1))[0]


DIGITS = "9" * 5000  # int() refuses it with a ValueError
DEEP = "[" * 100_000 + "]" * 100_000  # json.loads: RecursionError

#: Inputs that raised something else than ParseError before the parsers were made to fail
#: closed: (id, call, damaged real input, a word the ParseError's message must hold).
LEAKS: list[tuple[str, Callable[[], object], str]] = [
    (
        "ibstat CA name over 64 characters (ValidationError)",
        lambda: ib.parse_ibstat(
            _first("ib/gpud_ibstat.47.0.h100.all.active.0.txt").replace(
                "mlx5_0", "mlx5_" + "0" * 100, 1
            ),
            "h:ibstat",
        ),
        "ca: String should have at most 64 characters",
    ),
    (
        "ibstat 5000-digit port count (ValueError)",
        lambda: ib.parse_ibstat(
            re.sub(
                r"Number of ports: \d+",
                f"Number of ports: {DIGITS}",
                _first("ib/gpud_ibstat.47.0.h100.all.active.0.txt"),
                count=1,
            )
        ),
        "ports printed",
    ),
    (
        "ibstat 5000-digit port number (ValueError)",
        lambda: ib.parse_ibstat(
            re.sub(
                r"Port 1:",
                f"Port {DIGITS}:",
                _first("ib/gpud_ibstat.47.0.h100.all.active.0.txt"),
                count=1,
            )
        ),
        "port number",
    ),
    (
        "ibstatus rate 4294967296 (ValidationError)",
        lambda: ib.parse_ibstatus(
            re.sub(
                r"rate:\s+\d+",
                "rate: 4294967296",
                _first("ib/gpud_ibstatus.39.0.a100.all.active.0.txt"),
                count=1,
            )
        ),
        "rate_gbps",
    ),
    (
        "os-release PRETTY_NAME of 200 characters (ValidationError)",
        lambda: system.parse_os_release(f'ID=ubuntu\nPRETTY_NAME="{"U" * 200}"\n'),
        "pretty_name",
    ),
    (
        "lsblk SIZE of 23 digits (ValidationError)",
        lambda: system.parse_lsblk_pairs('NAME="nvme0n1" SIZE="99999999999999999999999"'),
        "size_bytes",
    ),
    (
        "lsblk SIZE of 5000 digits (ValueError)",
        lambda: system.parse_lsblk_pairs(f'NAME="nvme0n1" SIZE="{DIGITS}"'),
        "SIZE",
    ),
    (
        "lsblk SIZE '²' (isdigit but no int: ValueError)",
        lambda: system.parse_lsblk_pairs('NAME="nvme0n1" SIZE="²"'),
        "SIZE",
    ),
    (
        "meminfo MemTotal of 5000 digits (ValueError)",
        lambda: system.parse_meminfo_total_kib(f"MemTotal: {DIGITS} kB\n"),
        "MemTotal",
    ),
    (
        "dmi product_name of 200 characters (ValidationError)",
        lambda: dmi.parse_dmi(_lab_section("dmi")[0] + "\nproduct_name=" + "P" * 200),
        "product",
    ),
    (
        "sinfo 5000-digit number (ValueError)",
        lambda: slurm.parse_sinfo_json(
            re.sub(r'"major": \d+', f'"major": {DIGITS}', _first("slurm/sinfo-22.05.json"), count=1)
        ),
        "not JSON",
    ),
    (
        "sinfo nested past the stack (RecursionError)",
        lambda: slurm.parse_sinfo_json(f'{{"nodes": {DEEP}}}'),
        "not JSON",
    ),
    (
        "sinfo state_flags a number (TypeError)",
        lambda: slurm.parse_sinfo_json(
            '{"nodes": [{"name": "n1", "state": "IDLE", "state_flags": 5}]}'
        ),
        "state_flags",
    ),
    (
        "sacct nested past the stack (RecursionError)",
        lambda: sacct.parse_sacct_json(f'{{"jobs": {DEEP}}}'),
        "not JSON",
    ),
    (
        "dcgm gpu_ids '0,²' (ValueError)",
        lambda: active.parse_dcgm_diag_json(
            _first("dcgm/nvidia-dcgm_JsonResultTests_real-output_diag-3.1.0_8gpu.txt").replace(
                '"0,1,2,3,4,5,6,7"', '"0,²"', 1
            )
        ),
        "gpu_ids",
    ),
    (
        "dcgm 5000-digit number (ValueError)",
        lambda: active.parse_dcgm_diag_json(
            _first("dcgm/nvidia-dcgm_JsonResultTests_real-output_diag-3.1.0_8gpu.txt").replace(
                '"gpu_ids" : 0,', f'"gpu_ids" : {DIGITS},', 1
            )
        ),
        "JSON",
    ),
    (
        "dcgm nested past the stack (RecursionError)",
        lambda: active.parse_dcgm_diag_json(f'{{"DCGM GPU Diagnostic": {DEEP}}}'),
        "JSON",
    ),
    (
        "nccl-tests avg bus bandwidth 'e' (ValueError)",
        lambda: active.parse_nccl_tests(
            re.sub(
                r"Avg bus bandwidth\s*:\s*\S+",
                "Avg bus bandwidth    : e",
                _first("active/superbench_nccl_allreduce.log"),
                count=1,
            )
        ),
        "average bus bandwidth",
    ),
    (
        "nccl-tests 5000-digit out of bounds values (ValueError)",
        lambda: active.parse_nccl_tests(
            re.sub(
                r"Out of bounds values\s*:\s*\d+",
                f"Out of bounds values : {DIGITS}",
                _first("active/superbench_nccl_allreduce.log"),
                count=1,
            )
        ),
        "out of bounds values",
    ),
    (
        "gpu_burn 5000-digit GPU count (ValueError)",
        lambda: active.parse_gpu_burn(
            _first("active/superbench_gpu_burn.excerpt.log").replace(
                "Tested 8 GPUs:", f"Tested {DIGITS} GPUs:"
            )
        ),
        "GPUs tested",
    ),
    (
        "probe gpu part with a bare '@@rc ' line (IndexError)",
        lambda: inspect.parse_gpus(_probe_part("gpu")[0].replace("@@rc 0", "@@rc ")),
        "exited ?",
    ),
    (
        "query-gpu CSV negative clock event counter (ValidationError)",
        lambda: smi_csv.parse_query_gpu_csv(_h100_csv_negative_counter()),
        "clock_event_reasons",
    ),
    (
        "nvidia-smi -q negative clock event counter (ValidationError)",
        lambda: smi_text.parse_nvidia_smi_text(
            _h100("nvidia-smi-q").replace(
                "SW Power Capping                               : 0 us",
                "SW Power Capping                               : -3 us",
                1,
            )
        ),
        "sw_power_cap_us",
    ),
    (
        "nvidia-smi -q -x with a lone surrogate (UnicodeEncodeError)",
        lambda: smi_xml.parse_nvidia_smi_xml(
            _first("nvidia-smi-xml/telegraf_a10g.xml").replace(
                "<product_name>", "<product_name>\ud800", 1
            )
        ),
        "not text",
    ),
    (
        "ps uid of 5000 digits (ValueError)",
        lambda: reclaim.parse_ps(f"root {DIGITS} 1 init\n", "h:reclaim-ps"),
        "uid",
    ),
    (
        "ps uid '²' (isdigit but no int: ValueError)",
        lambda: reclaim.parse_ps("root ² 1 init\n", "h:reclaim-ps"),
        "not a 'user uid pid comm' line",
    ),
    (
        "nvlink -s 5000-digit GPU index (ValueError)",
        lambda: topology.parse_nvlink_status(
            _first("nvidia-smi-topo/gpud_nvidia-smi.nvlink.status.a100.txt").replace(
                "GPU 0:", f"GPU {DIGITS}:", 1
            )
        ),
        "GPU",
    ),
    (
        "nvlink -s 5000-digit link number (ValueError)",
        lambda: topology.parse_nvlink_status(
            re.sub(
                r"Link \d+:",
                f"Link {DIGITS}:",
                _first("nvidia-smi-topo/gpud_nvidia-smi.nvlink.status.a100.txt"),
                count=1,
            )
        ),
        "link",
    ),
    (
        "lspci class name of 200 characters (ValidationError)",
        lambda: pci.parse_lspci(
            _first("lspci/gpud_lspci.nn.a100.txt")
            .split("\n", 1)[0]
            .replace(" ", " " + "C" * 200 + " ", 1)
        ),
        "class_name",
    ),
    (
        "bundle rc of 5000 digits (ValueError)",
        lambda: bundle.split_bundle(
            re.sub(r"rc=0@@", f"rc={DIGITS}@@", render_output(_HOSTS[0]), count=1)
        ),
        "rc",
    ),
]


def _h100_csv_negative_counter() -> str:
    header, row = [ln for ln in _query_gpu_csvs()[0].splitlines() if ln.strip()][:2]
    cells = [c.strip() for c in row.split(",")]
    names = [c.strip().split(" [")[0] for c in header.split(",")]
    cells[names.index("clocks_event_reasons_counters.sw_power_cap")] = "-3"
    return header + "\n" + ", ".join(cells) + "\n"


@pytest.mark.parametrize(
    ("call", "says"), [leak[1:] for leak in LEAKS], ids=[leak[0] for leak in LEAKS]
)
def test_each_leak_found_is_a_parse_error_now(call: Callable[[], object], says: str) -> None:
    with pytest.raises(ParseError) as info:
        call()
    assert says in str(info.value)


def test_a_sacct_time_out_of_range_is_a_problem_of_its_job() -> None:
    """``datetime.fromtimestamp(10**20)`` raised OverflowError out of the parser; now the job
    is named in ``problems`` (as any unreadable job) and the others are read."""
    doc = json.loads(_first("slurm/sacct-22.05.json"))
    failed = [j for j in doc["jobs"] if j["state"]["current"] in sacct.FAILED_STATES]
    assert failed
    failed[0]["time"]["end"] = 10**20
    result = sacct.parse_sacct_json(json.dumps(doc))
    assert any("out of range" in p for p in result.problems)
    before = sacct.parse_sacct_json(_first("slurm/sacct-22.05.json"))
    assert result.jobs == before.jobs and len(result.failures) < len(before.failures)


def test_a_value_that_does_not_fit_still_refuses_the_whole_collection() -> None:
    """The parsers raise ParseError for a value out of bounds now, not ValidationError; the
    collection still refuses the host for it (bad output), even from a best-effort section
    whose parser does not know the host (dmi), instead of recording a problem."""
    sections = render_sections(_HOSTS[1])
    assert assemble_facts(sections, AT, "gpu-02").dmi is not None
    long_product = sections["dmi"].stdout + "\nproduct_name=" + "P" * 200
    damaged = {**sections, "dmi": Section("dmi", long_product, "", 0)}
    with pytest.raises(ParseError) as info:
        assemble_facts(damaged, AT, "gpu-02")
    assert str(info.value).startswith("gpu-02:dmi: ") and "product" in str(info.value)
    # an unreadable (not unfit) best-effort section is only a problem of the host
    bad_lsblk = {**sections, "lsblk": Section("lsblk", "NAME=nvme0n1", "", 0)}
    facts = assemble_facts(bad_lsblk, AT, "gpu-02")
    assert facts.block_devices is None and any("lsblk" in p for p in facts.problems)
