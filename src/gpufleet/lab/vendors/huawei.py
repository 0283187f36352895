"""Lab hosts of Huawei Ascend NPUs (issue 15): the ``ascend-910b3-8x`` model and its faults.

Captures served (tests/fixtures/captured/ascend, PROVENANCE.md there):
``npu-smi info``: the ms-swift 8x 910B3 table as captured (shell prompt line dropped);
``npu-smi info -m``: gpustack's 910B mapping (8 NPUs, chip names anonymised, Mcu rows);
``npu-smi info -t health``: the mind-cluster chip answers, ``OK`` (before) and ``Alarm``
with its error codes and information (after); ``hccn_tool -link -g``: gpustack's
``link status: DOWN`` capture, and for a port that is up the same line with ``UP`` (no
capture of an UP answer exists); ``npu-smi info -t topo``: the ms-swift 8x 910B3 HCCS
matrix (same host as the table); ``hccn_tool -stat`` / ``-link_stat`` of devices 0-7: the
mind-cluster worker-0 bundle (before its job: no RoCE error packets, 2 link-ups each);
driver/firmware ``version.info`` and the CANN toolkit ``ascend_toolkit_install.info`` of
the mind-cluster bundle. Per NPU, replayed from NPU 0's capture with only the ``NPU ID``
line set to the NPU's id (the captures are of single NPUs; every other value is NPU 0's):
``npu-smi info -t board -i N``: the mind-cluster "before" bundle's card (a 910A: PCI device
``d801``, Firmware Version 7.1.0.7.220, Software Version 23.0.5 -- another host than the
version.info captures and the generated lspci's ``d802``, so the records' firmware and PCI
device id are that card's); ``-t usages`` / ``-t common``: gpustack's "910B" captures
(HBM Capacity 32768 MB, 46 C, 69.0 W; the table's own HBM, temperature and power win, so
the hosts keep the ms-swift table's 65536 MB and temperatures); ``hccn_tool -optical -g``:
the only real capture, the mind-cluster "before" bundle's Hisense QSFP, which the tool
reports ``not present`` with Rx LOS/LoL on every lane (0xff): every lab NPU's error
counters carry that state (no check judges the optical counters).

Faults (``KIND[:<npu id>]``): ``npu-missing`` drops the NPU's rows from ``npu-smi info`` and
``-m`` (lspci still lists it), ``npu-alarm`` writes ``Alarm`` into its table row and serves the
Alarm capture for it, ``npu-link-down`` serves the DOWN capture for its port,
``npu-net-unhealthy`` the real ``hccn_tool -net_health`` failure ("Socket failed"; a healthy
port answers ``net health status: Success``, generated: no capture of a healthy answer
exists), ``npu-smi-error`` answers the NPU's ``-t health`` query with npu-smi's real error
about a card it lost (``Invalid card id.`` / ``Error parameter of -i`` / usage, the
mind-cluster "after" bundle's ``-i 0 -t board`` answer; its exit status is not captured and
is served as 0, so only the reader's refusal catches it). A lab change's driver
(``LabHost.driver``) replaces the ``version.info`` driver version. Edits are textual;
untouched bytes are as captured. The mixed demo fleet gets two such hosts, the second with
an NPU in Alarm (quarantined).
"""

from __future__ import annotations

import re
from functools import cache

from gpufleet.lab.captures import bundle_output, captures_dir, tool_output
from gpufleet.lab.catalogue import _NVME_PM1733, _U2_3T84, NO_NVIDIA_FABRIC, ModelSpec
from gpufleet.lab.faults import _split_fault
from gpufleet.lab.fleet import LabHost
from gpufleet.lab.templates import _pick
from gpufleet.lab.vendors import Answer, LabVendor, replace_driver

_KG_BEFORE = "ascend/mind-cluster_kg_parse_npu_info_before.txt"
_KG_AFTER = "ascend/mind-cluster_kg_parse_npu_info_after.txt"
_W0_BEFORE = "ascend/mind-cluster_st_testcase_worker-0_npu_info_before.txt"
_MAPPING_910B = "ascend/gpustack_test_npu_smi_910B_info-m.txt"
_LINK_DOWN = "ascend/gpustack_test_npu_smi_910B_hccn_tool-link-g_DOWN.txt"
_USAGES_910B = "ascend/gpustack_test_npu_smi_910B_info-t-usages.txt"
_COMMON_910B = "ascend/gpustack_test_npu_smi_910B_info-t-common.txt"

# Atlas 800T A2 class: the 8x 910B3 `npu-smi info` of the ms-swift capture (host "valle",
# 64 GB HBM per NPU), its bus ids; lspci lines generated in the layout of the mind-cluster
# capture (Huawei "Device d802" for the 910B, as pci.ids names no model).
ASCEND_910B3_8X = ModelSpec(
    name="ascend-910b3-8x",
    group="npu_910b",
    pool="train-910b",
    gpu_model="910B3",
    gpu_count=8,
    gpu_memory_mib=65536,
    smi_format="none",
    smi_file="ascend/ms-swift_NPU-support_npu-smi_info_8x910B3.txt",
    replicate=False,
    gpu_bus_ids=tuple(f"0000:{b}:00.0" for b in ("c1", "c2", "81", "82", "01", "02", "41", "42")),
    pci_gpu="Processing accelerators [1200]: Huawei Technologies Co., Ltd. "
    "Device [19e5:d802] (rev 20)",
    **NO_NVIDIA_FABRIC,
    extra_pci=tuple(f"0000:{b}:00.0 {_NVME_PM1733}" for b in ("a1", "a2")),
    dmi=("Huawei", "Atlas 800T A2"),
    nproc=192,
    mem_total_kib=1584473472,
    disks=tuple((f"nvme{i}n1", _U2_3T84, "HWE52P433T8M002N") for i in (0, 1)),
    vendor="huawei",
    serial_prefix="2102",
)

#: Faults of Ascend NPU hosts, each ``KIND[:<npu id>]`` (module docstring).
FAULTS = {
    "npu-missing": "an NPU missing from npu-smi (lspci still lists it)",
    "npu-alarm": "an NPU in health Alarm (the real Alarm capture: error codes and information)",
    "npu-link-down": "the NPU's RoCE port down (the real DOWN capture)",
    "npu-net-unhealthy": "its network health failing (the real hccn_tool -net_health failure)",
    "npu-smi-error": "npu-smi answering 'Invalid card id.' for the NPU (the real error capture)",
}


def check_fault(spec: ModelSpec, kind: str, arg: str | None) -> str | None:
    if arg is not None and not (arg.isdigit() and int(arg) < spec.gpu_count):
        return f"expected {kind}[:<npu id>]"
    return None


@cache
def _captures() -> dict[str, str]:
    d = captures_dir()
    return {
        "info": tool_output(d / ASCEND_910B3_8X.smi_file),
        "mapping": tool_output(d / _MAPPING_910B),
        "ok": bundle_output(d / _KG_BEFORE, "-c 0 -t health"),
        "alarm": bundle_output(d / _KG_AFTER, "-c 0 -t health"),
        # npu-smi's real answer about a card it lost (-i 0 -t board after the fault)
        "invalid": bundle_output(d / _KG_AFTER, "-i 0 -t board"),
        "down": tool_output(d / _LINK_DOWN),
        "net_down": bundle_output(d / _KG_BEFORE, "-net_health -g"),
        **{f"stat{i}": bundle_output(d / _W0_BEFORE, f"-i {i} -stat -g") for i in range(8)},
        **{
            f"link_stat{i}": bundle_output(d / _W0_BEFORE, f"-i {i} -link_stat -g")
            for i in range(8)
        },
        "topo": tool_output(d / "ascend/ms-swift_NPU-support_npu-smi_info_-t_topo_8x910B3.txt"),
        # per NPU sections: NPU 0's captures, replayed for every NPU (see _for_npu)
        "board": bundle_output(d / _KG_BEFORE, "-i 0 -t board"),
        "usages": tool_output(d / _USAGES_910B),
        "common": tool_output(d / _COMMON_910B),
        "optical": bundle_output(d / _KG_BEFORE, "-optical -g"),
        "driver": bundle_output(d / _KG_AFTER, "driver/version.info"),
        "firmware": bundle_output(d / _KG_AFTER, "firmware/version.info"),
        "cann": bundle_output(d / _KG_AFTER, "ascend_toolkit_install.info"),
    }


def _fault_npus(host: LabHost, spec: ModelSpec) -> dict[str, int]:
    """NPU fault kind -> the NPU it hits (its argument, else one picked per host)."""
    out: dict[str, int] = {}
    for f in host.faults:
        kind, arg = _split_fault(f)
        if kind in FAULTS:
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


_NPU_ID = re.compile(r"(?m)^(\s*NPU ID\s*:\s*)0$")


def _for_npu(capture: str, npu: int) -> str:
    """NPU 0's ``npu-smi info -t board|usages|common -i 0`` answer as NPU ``npu``'s: the
    values are replayed from NPU 0's capture, only its ``NPU ID`` line names ``npu``."""
    out, n = _NPU_ID.subn(lambda m: f"{m[1]}{npu}", capture, count=1)
    if n != 1:
        raise ValueError("npu-smi capture has no 'NPU ID : 0' line")
    return out


def _framed(rows: list[tuple[int, int, int]], text: dict[int, str]) -> str:
    """The ``npu_each`` framing of the collection script around each chip's answer."""
    return "".join(
        f"== npu {n} chip {c} logic {lg} ==\n{text[n]}\n== rc 0 ==\n" for n, c, lg in rows
    )


def render(host: LabHost, spec: ModelSpec) -> dict[str, Answer]:
    """The Ascend sections as ``host`` answers them (its faults applied)."""
    cap = _captures()
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
    if "npu-smi-error" in hit:  # exit status not captured: served as 0, the reader refuses it
        health[hit["npu-smi-error"]] = cap["invalid"]
    up = cap["down"].replace("DOWN", "UP")
    link = {n: cap["down"] if hit.get("npu-link-down") == n else up for n, _, _ in rows}
    # healthy: the tool's "net health status" line with "Success" (no capture of a healthy
    # answer exists; the wording is the real failure capture's, the value Huawei's documented)
    ok_net = "net health status: Success\n"
    net = {n: cap["net_down"] if hit.get("npu-net-unhealthy") == n else ok_net for n, _, _ in rows}
    driver = replace_driver(cap["driver"], r"(?m)^(Version=)(\S+)$", host)
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
        "npu_smi_board": (_framed(rows, {n: _for_npu(cap["board"], n) for n, _, _ in rows}), "", 0),
        "npu_smi_usages": (
            _framed(rows, {n: _for_npu(cap["usages"], n) for n, _, _ in rows}),
            "",
            0,
        ),
        "npu_smi_common": (
            _framed(rows, {n: _for_npu(cap["common"], n) for n, _, _ in rows}),
            "",
            0,
        ),
        "hccn_optical": (_framed(rows, {n: cap["optical"] for n, _, _ in rows}), "", 0),
        "npu_smi_topo": (cap["topo"], "", 0),
        "ascend_driver_version": (driver, "", 0),
        "ascend_firmware_version": (cap["firmware"], "", 0),
        "ascend_cann_version": (cap["cann"], "", 0),
    }


def bus_ids(spec: ModelSpec) -> tuple[str, ...]:
    return spec.gpu_bus_ids


LAB = LabVendor(
    vendor="huawei",
    models=(ASCEND_910B3_8X,),
    render=render,
    bus_ids=bus_ids,
    faults=FAULTS,
    check_fault=check_fault,
    demo=((ASCEND_910B3_8X.name, ()), (ASCEND_910B3_8X.name, ("npu-alarm",))),
    rank=10,
)
