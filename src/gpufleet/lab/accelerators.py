"""Lab hosts of other accelerator vendors (issue 15): their answers to the vendor sections.

Every host answers every vendor section of the collection (``collect/vendors``): a vendor's
own hosts with its real captures, all others as the script does where the tool is not
installed (rc 127). Captures served (tests/fixtures/captured, PROVENANCE.md there):

``ascend-910b3-8x``
    ``npu-smi info``: the ms-swift 8x 910B3 table as captured (shell prompt line dropped);
    ``npu-smi info -m``: gpustack's 910B mapping (8 NPUs, chip names anonymised, Mcu rows);
    ``npu-smi info -t health``: the mind-cluster chip answers, ``OK`` (before) and ``Alarm``
    with its error codes and information (after); ``hccn_tool -link -g``: gpustack's
    ``link status: DOWN`` capture, and for a port that is up the same line with ``UP`` (no
    capture of an UP answer exists); ``npu-smi info -t topo``: the ms-swift 8x 910B3 HCCS
    matrix (same host as the table); ``hccn_tool -stat`` / ``-link_stat`` of devices 0-7: the
    mind-cluster worker-0 bundle (before its job: no RoCE error packets, 2 link-ups each);
    driver/firmware ``version.info`` and the CANN toolkit ``ascend_toolkit_install.info`` of
    the mind-cluster bundle.
``mi100-4x``
    telegraf's ``rocm-smi --json`` of 4x MI100 on ROCm 6.0.2 (a superset of the keys the
    collection asks for), as captured.

Faults: ``gpu-missing`` on an AMD host drops one card from rocm-smi's JSON (lspci still lists
it); the Ascend ones (``lab/faults.NPU_FAULTS``, ``KIND[:<npu id>]``): ``npu-missing``
drops the NPU's rows from ``npu-smi info`` and ``-m`` (lspci still lists it), ``npu-alarm`` writes
``Alarm`` into its table row and serves the Alarm capture for it, ``npu-link-down`` serves
the DOWN capture for its port, ``npu-net-unhealthy`` the real ``hccn_tool -net_health``
failure ("Socket failed"; a healthy port answers ``net health status: Success``, generated:
no capture of a healthy answer exists). A lab change's driver (``LabHost.driver``) replaces the
driver version (Ascend ``version.info``, rocm-smi's ``Driver version``). Edits are textual;
untouched bytes are as captured.
"""

from __future__ import annotations

import json
import re
from functools import cache

from gpufleet.collect.vendors.registry import COLLECTORS
from gpufleet.lab.captures import bundle_output, captures_dir, tool_output
from gpufleet.lab.catalogue import ModelSpec
from gpufleet.lab.faults import _split_fault
from gpufleet.lab.fleet import LabHost
from gpufleet.lab.templates import _pick

Answer = tuple[str, str, int]
_NOT_FOUND_RC = 127

_KG_BEFORE = "ascend/mind-cluster_kg_parse_npu_info_before.txt"
_KG_AFTER = "ascend/mind-cluster_kg_parse_npu_info_after.txt"
_W0_BEFORE = "ascend/mind-cluster_st_testcase_worker-0_npu_info_before.txt"
_MAPPING_910B = "ascend/gpustack_test_npu_smi_910B_info-m.txt"
_LINK_DOWN = "ascend/gpustack_test_npu_smi_910B_hccn_tool-link-g_DOWN.txt"


def vendor_answers_names() -> tuple[str, ...]:
    """The vendor sections of the collection, in script order."""
    return tuple(s.name for c in COLLECTORS for s in c.sections)


def _not_installed() -> dict[str, Answer]:
    """What the script prints where no vendor tool is installed (fails at the tool)."""
    out: dict[str, Answer] = {}
    for c in COLLECTORS:
        for s in c.sections:
            out[s.name] = (
                ("", "", _NOT_FOUND_RC)
                if s.files
                else ("", f"sh: 1: {c.tool}: not found", _NOT_FOUND_RC)
            )
    return out


@cache
def _ascend_captures() -> dict[str, str]:
    d = captures_dir()
    return {
        "info": tool_output(d / "ascend/ms-swift_NPU-support_npu-smi_info_8x910B3.txt"),
        "mapping": tool_output(d / _MAPPING_910B),
        "ok": bundle_output(d / _KG_BEFORE, "-c 0 -t health"),
        "alarm": bundle_output(d / _KG_AFTER, "-c 0 -t health"),
        "down": tool_output(d / _LINK_DOWN),
        "net_down": bundle_output(d / _KG_BEFORE, "-net_health -g"),
        **{f"stat{i}": bundle_output(d / _W0_BEFORE, f"-i {i} -stat -g") for i in range(8)},
        **{
            f"link_stat{i}": bundle_output(d / _W0_BEFORE, f"-i {i} -link_stat -g")
            for i in range(8)
        },
        "topo": tool_output(d / "ascend/ms-swift_NPU-support_npu-smi_info_-t_topo_8x910B3.txt"),
        "driver": bundle_output(d / _KG_AFTER, "driver/version.info"),
        "firmware": bundle_output(d / _KG_AFTER, "firmware/version.info"),
        "cann": bundle_output(d / _KG_AFTER, "ascend_toolkit_install.info"),
    }


def _fault_npus(host: LabHost, spec: ModelSpec) -> dict[str, int]:
    """NPU fault kind -> the NPU it hits (its argument, else one picked per host)."""
    out: dict[str, int] = {}
    for f in host.faults:
        kind, arg = _split_fault(f)
        if kind.startswith("npu-"):
            pick = _pick(spec.gpu_count, "npu", host.name, host.serial_salt)
            out[kind] = int(arg) if arg else pick
    return out


def _drop_npu(table: str, npu: int) -> str:
    """``npu-smi info`` without NPU ``npu``'s row pair and the separator under it."""
    lines = table.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if re.match(rf"^\| {npu}\s{{2,}}\S", line) and i + 2 < len(lines):
            return "".join(lines[:i] + lines[i + 3 :])
    raise ValueError(f"npu-smi capture has no NPU {npu}")


def _alarm_npu(table: str, npu: int) -> str:
    def one(m: re.Match[str]) -> str:
        return m[1] + "Alarm".ljust(len(m[2])) + m[3]

    out, n = re.subn(rf"(?m)^(\| {npu}\s+\S+\s+\| )(OK\s+)(\|)", one, table, count=1)
    if n != 1:
        raise ValueError(f"npu-smi capture has no OK row for NPU {npu}")
    return out


def _mapping_rows(mapping: str) -> list[tuple[int, int, int]]:
    rows = []
    for line in mapping.splitlines():
        parts = line.split()
        if len(parts) >= 3 and all(p.isdigit() for p in parts[:3]):
            rows.append((int(parts[0]), int(parts[1]), int(parts[2])))
    return rows


def _framed(rows: list[tuple[int, int, int]], text: dict[int, str]) -> str:
    """The ``npu_each`` framing of the collection script around each chip's answer."""
    return "".join(
        f"== npu {n} chip {c} logic {lg} ==\n{text[n]}\n== rc 0 ==\n" for n, c, lg in rows
    )


def _ascend(host: LabHost, spec: ModelSpec) -> dict[str, Answer]:
    cap = _ascend_captures()
    hit = _fault_npus(host, spec)
    info, mapping = cap["info"], cap["mapping"]
    if "npu-missing" in hit:
        gone = hit["npu-missing"]
        info = _drop_npu(info, gone)
        mapping = "".join(
            line
            for line in mapping.splitlines(keepends=True)
            if not re.match(rf"^{gone}\s+\d", line)
        )
    if "npu-alarm" in hit:
        info = _alarm_npu(info, hit["npu-alarm"])
    rows = _mapping_rows(mapping)
    health = {n: cap["alarm"] if hit.get("npu-alarm") == n else cap["ok"] for n, _, _ in rows}
    up = cap["down"].replace("DOWN", "UP")
    link = {n: cap["down"] if hit.get("npu-link-down") == n else up for n, _, _ in rows}
    # healthy: the tool's "net health status" line with "Success" (no capture of a healthy
    # answer exists; the wording is the real failure capture's, the value Huawei's documented)
    ok_net = "net health status: Success\n"
    net = {n: cap["net_down"] if hit.get("npu-net-unhealthy") == n else ok_net for n, _, _ in rows}
    return {
        "npu_smi_info": (info, "", 0),
        "npu_smi_mapping": (mapping, "", 0),
        "npu_smi_health": (_framed(rows, health), "", 0),
        "hccn_link": (_framed(rows, link), "", 0),
        "hccn_net_health": (_framed(rows, net), "", 0),
        "hccn_stat": (_framed(rows, {n: cap[f"stat{lg}"] for n, _, lg in rows}), "", 0),
        "hccn_link_stat": (
            _framed(rows, {n: cap[f"link_stat{lg}"] for n, _, lg in rows}),
            "",
            0,
        ),
        "npu_smi_topo": (cap["topo"], "", 0),
        "ascend_driver_version": (_driver(cap["driver"], r"(?m)^(Version=)(\S+)$", host), "", 0),
        "ascend_firmware_version": (cap["firmware"], "", 0),
        "ascend_cann_version": (cap["cann"], "", 0),
    }


def _amd(host: LabHost, spec: ModelSpec) -> dict[str, Answer]:
    text = _driver(_amd_capture(spec.smi_file), r'("Driver version": ")([^"]+)', host)
    if "gpu-missing" in host.faults:
        # rocm-smi no longer lists one card (lspci still does); the capture is indent-4 JSON,
        # so dropping the card's object and dumping again keeps every other byte
        doc = json.loads(text)
        card = _pick(spec.gpu_count, "amd", host.name, host.serial_salt)
        del doc[f"card{card}"]
        text = json.dumps(doc, indent=4) + "\n"
    return {"rocm_smi_json": (text, "", 0)}


def _driver(text: str, pattern: str, host: LabHost) -> str:
    """The captured driver version replaced by the one a lab change installed
    (``LabHost.driver``, ``gpufleet lab change --driver``)."""
    if host.driver is None:
        return text
    out, n = re.subn(pattern, lambda m: m[1] + str(host.driver), text, count=1)
    if n != 1:
        raise ValueError(f"{host.name}: no driver version in the capture to replace")
    return out


@cache
def _amd_capture(rel: str) -> str:
    return (captures_dir() / rel).read_text(encoding="utf-8")


def amd_bus(spec: ModelSpec) -> tuple[str, ...]:
    """The cards' PCI addresses as the rocm-smi capture prints them."""
    return tuple(re.findall(r'"PCI Bus": "([0-9a-fA-F:.]+)"', _amd_capture(spec.smi_file)))


_VENDORS = {"huawei": _ascend, "amd": _amd}


def vendor_answers(host: LabHost, spec: ModelSpec) -> dict[str, Answer]:
    """Every vendor section as ``host`` answers it."""
    out = _not_installed()
    render = _VENDORS.get(spec.vendor)
    if render is not None:
        out.update(render(host, spec))
    return out


def vendor_lspci(spec: ModelSpec) -> list[str]:
    """``lspci -nn -D`` lines of the host's accelerators (every one, seen by the tool or not)."""
    buses = spec.gpu_bus_ids if spec.vendor == "huawei" else amd_bus(spec)
    return [f"{b.lower()} {spec.pci_gpu}" for b in buses]
