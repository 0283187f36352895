"""Vendor fault catalogues as data (issue 28 item 3): the Ascend device plugin's handling
levels and FaultDiag's bilingual knowledge base, the AMD GPU operator's remediation conditions
and NPD AFIDs, as shipped in ``vendors/<name>/data``, mapped onto the action ladder; an unknown
code; the operator overlay and its refusals; nothing read at import. On main none of this
existed: a device in Alarm was ``accelerator-unhealthy`` (critical, reset_gpu) whatever its
codes, with no vendor text."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gpufleet.domain.device_health import DeviceFault, device_findings, shipped_catalogue
from gpufleet.domain.fault_catalogue import FaultCatalogue, with_overlay
from gpufleet.domain.rules import RulePolicy
from gpufleet.errors import ConfigError

POLICY = RulePolicy.load_default()


def _huawei() -> FaultCatalogue:
    cat = shipped_catalogue("huawei")
    assert cat is not None
    return cat


def _amd() -> FaultCatalogue:
    cat = shipped_catalogue("amd")
    assert cat is not None
    return cat


# One real code of each level of mind-cluster_faultCode.json / rdma-plugin fault_code.json.
HUAWEI_LEVELS = [
    ("A4025021", "NotHandleFaultCodes", "info", "none"),  # in the real Alarm capture
    ("81AD8605", "SubHealthFaultCodes", "warning", "none"),
    ("80C98008", "RestartRequestCodes", "warning", "none"),
    ("8C204E00", "RestartBusinessCodes", "warning", "none"),
    ("8C084E00", "FreeRestartNPUCodes", "critical", "reset_gpu"),  # real Alarm capture
    ("8C03A000", "RestartNPUCodes", "critical", "reset_gpu"),  # real Alarm capture
    ("8118043C", "PreSeparateNPUCodes", "critical", "escalate"),
    ("80E18402", "SeparateNPUCodes", "critical", "reseat_or_replace"),
    ("21000022", "SubHealthFault", "warning", "none"),  # RDMA plugin
    ("21000024", "SeparateDPU", "critical", "reseat_or_replace"),
]


@pytest.mark.parametrize(("code", "level", "severity", "action"), HUAWEI_LEVELS)
def test_each_ascend_handling_level_maps_onto_the_ladder(
    code: str, level: str, severity: str, action: str
) -> None:
    e = _huawei().lookup(code)
    assert e is not None
    assert (e.level, e.severity.value, e.action.value) == (level, severity, action)


def test_ascend_catalogue_reads_the_whole_vendor_file() -> None:
    cat = _huawei()
    # 803 listed ids, one duplicate (B4060011) -> 802 NPU ids, plus the RDMA plugin's 5
    assert len(cat) == 807
    assert len(cat.levels) == 10
    # log spellings: 0x prefix, lower case; the 9-digit ids stay as they are
    e = cat.lookup("0x8c03a000")
    assert e is not None and e.code == "8C03A000"
    nine = cat.lookup("110001024")
    assert nine is not None and nine.level == "PreSeparateNPUCodes"
    # A2301001 is in RestartBusinessCodes and SeparateNPUCodes: the worse wins
    both = cat.lookup("A2301001")
    assert both is not None and both.level == "SeparateNPUCodes"


def test_ascend_text_is_the_knowledge_base_in_both_languages() -> None:
    e = _huawei().lookup("8C03A000")
    assert e is not None
    assert e.text.cause_en == "ProcMgr heartbeat error"
    assert e.text.cause_zh == "ProcMgr心跳检测异常"
    assert e.text.suggestion_en == ("1. It is recommended to reset the SoC immediately.",)
    assert e.text.suggestion_zh == ("1. 建议立即复位SOC；",)
    assert e.describe() == (
        "8C03A000 (RestartNPUCodes -> reset_gpu): ProcMgr heartbeat error / ProcMgr心跳检测异常. "
        "Suggestion: 1. It is recommended to reset the SoC immediately. / 1. 建议立即复位SOC；"
    )
    # a code in the levels without a knowledge-base entry has no text (none invented)
    bare = _huawei().lookup("A4025021")
    assert bare is not None and bare.text.cause_en == "" and bare.describe() == (
        "A4025021 (NotHandleFaultCodes -> none)"
    )


def test_amd_conditions_and_afids() -> None:
    cat = _amd()
    assert len(cat) == 24
    hbm = cat.lookup("AMDGPUHBMError")  # physicalActionNeeded: false
    assert hbm is not None
    assert (hbm.level, hbm.severity.value, hbm.action.value) == (
        "noPhysicalAction",
        "critical",
        "reboot",
    )
    assert hbm.text.suggestion_en == ("Rerun the known failing workload.",)
    xgmi = cat.lookup("AMDGPUXgmi")  # physicalActionNeeded: true
    assert xgmi is not None
    assert (xgmi.level, xgmi.action.value) == ("physicalActionNeeded", "reseat_or_replace")
    assert xgmi.text.suggestion_en[0].startswith("Remove GPU tray from node.")
    # the NPD config binds AFID 30 and 25 to their conditions
    hwa = cat.lookup("AFID 30")
    assert hwa is not None and hwa.code == "AMDGPUHardwareAssertionHwa"
    internal = cat.lookup("afid:25")
    assert internal is not None and internal.code == "AMDGPUDeviceInternalError"
    assert internal.action.value == "reseat_or_replace"
    assert cat.lookup("AFID 31") is None and cat.lookup("AMDGPUNoSuchThing") is None


def _alarm(codes: tuple[str, ...], health: str = "unhealthy") -> DeviceFault:
    msg = f"huawei 910B3 #3: health alarm, error codes {' '.join(codes)}"
    return DeviceFault("huawei", health, msg, 3, codes=codes)


def test_the_real_alarm_codes_decide_with_the_vendor_text() -> None:
    # npu-smi's real Alarm capture: A4025021 (NotHandle) 8C03A000 (RestartNPU) 8C084E00
    # (FreeRestartNPU)
    (f,) = device_findings(POLICY, [_alarm(("A4025021", "8C03A000", "8C084E00"))])
    assert (f.rule, f.severity.value, f.action.value, f.gpu_index) == (
        "accelerator-unhealthy",
        "critical",
        "reset_gpu",
        3,
    )
    assert "ProcMgr heartbeat error / ProcMgr心跳检测异常" in f.message
    assert "ADDA heartbeat error / adda心跳检测异常" in f.message
    assert f.data is not None
    assert [c["code"] for c in f.data["fault_codes"]] == ["8C03A000", "8C084E00", "A4025021"]
    assert f.data["fault_codes"][1]["suggestion_zh"][0] == "1. 若故障没有恢复，则建议复位SOC；"


def test_not_handled_codes_alone_are_only_noted() -> None:
    (f,) = device_findings(POLICY, [_alarm(("A4025021",))])
    assert (f.severity.value, f.action.value) == ("info", "none")
    # a warning-health device with a RestartNPU code is critical: the code decides
    (w,) = device_findings(POLICY, [_alarm(("8C03A000",), "warning")])
    assert (w.rule, w.severity.value, w.action.value) == (
        "accelerator-warning",
        "critical",
        "reset_gpu",
    )


def test_an_unknown_code_fails_closed_to_the_device_rule() -> None:
    # Not in the catalogue: judged as the device's health alone (accelerator-unhealthy:
    # critical, reset_gpu), never milder, even beside a NotHandle code.
    (f,) = device_findings(POLICY, [_alarm(("A4025021", "DEADBEEF"))])
    assert (f.severity.value, f.action.value) == ("critical", "reset_gpu")
    assert "not in the huawei fault catalogue: DEADBEEF" in f.message
    assert f.data is not None and f.data["unknown_codes"] == ["DEADBEEF"]
    # and with a site's device rule, that rule's verdict
    site = POLICY.merged("rules: [{id: accelerator-unhealthy, action: escalate}]", source="s")
    (g,) = device_findings(site, [_alarm(("DEADBEEF",))])
    assert (g.severity.value, g.action.value) == ("critical", "escalate")


OVERLAY = """\
huawei:
  "8C03A000": {action: reboot}
  "0x8c084e00": {level: NotHandleFaultCodes}
  "DEADBEEF": {level: SubHealthFaultCodes}
amd:
  AMDGPUHBMError: {severity: warning, action: none}
"""


def test_an_overlay_changes_a_codes_action() -> None:
    cats = with_overlay(
        {"huawei": _huawei(), "amd": _amd()}, OVERLAY, source="/etc/gpufleet/faults.yaml"
    )
    e = cats["huawei"].lookup("8C03A000")
    assert e is not None
    assert (e.level, e.severity.value, e.action.value) == ("RestartNPUCodes", "critical", "reboot")
    assert e.source == "/etc/gpufleet/faults.yaml:2"
    assert e.text.cause_en == "ProcMgr heartbeat error"  # the vendor's text stays
    moved = cats["huawei"].lookup("8C084E00")
    assert moved is not None and (moved.severity.value, moved.action.value) == ("info", "none")
    added = cats["huawei"].lookup("deadbeef")
    assert added is not None and added.level == "SubHealthFaultCodes"
    hbm = cats["amd"].lookup("AMDGPUHBMError")
    assert hbm is not None and (hbm.severity.value, hbm.action.value) == ("warning", "none")
    # the shipped catalogue is unchanged
    shipped = _huawei().lookup("8C03A000")
    assert shipped is not None and shipped.action.value == "reset_gpu"
    # and the device finding follows the overlay
    (f,) = device_findings(POLICY, [_alarm(("A4025021", "8C03A000", "8C084E00"))], cats.get)
    assert (f.severity.value, f.action.value) == ("critical", "reboot")


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("huawei:\n  '8C03A000': {action: reboot}\n  '80E18005': {acton: reboot}\n",
         r"faults\.yaml:3: huawei code 80E18005: unknown field\(s\) acton"),
        ("huawei:\n  020001002: {action: none}\n",
         r"faults\.yaml:2: huawei code 020001002: quote the code \(YAML reads it as the int "
         r"4194818"),
        ("huawei:\n  '8C03A000': {level: RestartNow}\n",
         r"faults\.yaml:2: huawei code 8C03A000: no level 'RestartNow' \(known: NotHandle"),
        ("huawei:\n  '8C03A000': {action: replace}\n",
         r"faults\.yaml:2: huawei code 8C03A000: action 'replace' is not one of none, reset_gpu"),
        ("huawei:\n  'NOT-A-CODE': {action: none}\n",
         r"faults\.yaml:2: huawei code 'NOT-A-CODE': not a huawei fault code"),
        ("\n\nacme:\n  X1: {action: none}\n",
         r"faults\.yaml:3: no fault catalogue for vendor 'acme' \(known: amd, huawei\)"),
        ("huawei:\n  'DEADBEEF': {action: none}\n",
         r"faults\.yaml:2: huawei code DEADBEEF is not in the catalogue: give its level"),
        ("huawei:\n  '8C03A000': {action: none}\n  '0x8c03a000': {action: reboot}\n",
         r"faults\.yaml:3: huawei code 8C03A000 given twice \(first at faults\.yaml:2\)"),
        ("huawei: [unclosed\n", r"faults\.yaml: not YAML"),
    ],
)
def test_a_bad_overlay_is_refused_naming_file_line_and_code(text: str, error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        with_overlay({"huawei": _huawei(), "amd": _amd()}, text, source="faults.yaml")


def test_catalogues_are_not_read_at_import() -> None:
    """Start-up: importing the plugins (as a collection does) reads no catalogue; the first
    lookup reads the levels, the knowledge base only with it."""
    code = (
        "import sys\n"
        "from gpufleet.domain.vendors import plugin\n"
        "p = plugin('huawei'); plugin('amd')\n"
        "print(sorted(m for m in sys.modules if m.endswith('.faults')))\n"
        "from gpufleet.vendors.huawei import faults\n"
        "p.faults()\n"
        "print(faults.catalogue.cache_info().currsize, faults.knowledge.cache_info().currsize)\n"
        "p.faults().lookup('8C03A000')\n"
        "print(faults.knowledge.cache_info().currsize)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split("\n")
    assert out[:3] == ["[]", "1 0", "1"]
