"""The vendor fault catalogues through an inspection sweep of the sim lab (issue 28 item 3), on
SQLite and PostgreSQL: an Ascend NPU in Alarm (the real ``npu-smi info -t health`` capture:
``A4025021 8C03A000 8C084E00``) opens one alarm whose message and data carry each code's
handling level and FaultDiag's cause and suggestion in English and Chinese, shown on the host
page; the operator overlay (``GPUFLEET_FAULT_CATALOGUE``) changes the recommended action; a bad
overlay refuses the sweep before any host is probed, naming file, line and code. On main the
alarm said only ``health alarm, error codes ...`` (recommended: reset_gpu)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from tests.service.test_inspect import health_alarms, set_faults, states
from tests.web.test_dashboard import signed_in

from gpufleet.api.app import create_app
from gpufleet.api.auth import TokenStore
from gpufleet.errors import ConfigError
from gpufleet.lab.demo import enroll_lab
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.core.tokens import Role, create_token
from gpufleet.service.health.inspect import inspect
from gpufleet.service.hosts.validate import validate
from gpufleet.store.tables import HostSampleRow
from gpufleet.testing import FakeClock
from gpufleet.web.app import attach

CAUSES = (
    "ProcMgr heartbeat error / ProcMgr心跳检测异常",
    "ADDA heartbeat error / adda心跳检测异常",
)


def _npu_alarm(fleet: Fleet, clock: FakeClock, tmp_path: Path) -> None:
    fleet.settings.guard_share = 1.0  # not about the blast-radius guard
    fleet.settings.guard_hosts = 100
    d = tmp_path / "lab"
    enroll_lab(fleet, d, 2, models=["ascend-910b3-8x"], faults={})
    assert {v.state for v in validate(fleet).verdicts} == {"available"}
    assert inspect(fleet).findings == 0
    clock.advance(minutes=5)
    set_faults(d, {"gpu-01": ["npu-alarm:3"]}, clock)


def test_npu_alarm_carries_the_vendor_levels_and_bilingual_text(
    fleet: Fleet, clock: FakeClock, tmp_path: Path
) -> None:
    _npu_alarm(fleet, clock, tmp_path)
    report = inspect(fleet)
    by = {h.host: h for h in report.hosts}
    (f,) = by["gpu-01"].findings
    assert (f.rule, f.severity.value, f.action.value, f.gpu_index) == (
        "accelerator-unhealthy",
        "critical",
        "reset_gpu",
        3,
    )
    assert by["gpu-02"].findings == []
    (alarm,) = health_alarms(fleet)["gpu-01"]
    for cause in CAUSES:
        assert cause in alarm.message
    assert "8C03A000 (RestartNPUCodes -> reset_gpu)" in alarm.message
    assert "8C084E00 (FreeRestartNPUCodes -> reset_gpu)" in alarm.message
    assert "A4025021 (NotHandleFaultCodes -> none)" in alarm.message
    assert alarm.message.endswith("(recommended: reset_gpu)")
    codes = {c["code"]: c for c in alarm.data["fault_codes"]}
    assert set(codes) == {"8C03A000", "8C084E00", "A4025021"}
    assert codes["8C03A000"]["suggestion_zh"] == ["1. 建议立即复位SOC；"]
    assert codes["8C03A000"]["source"] == "mind-cluster_faultCode.json, " + (
        "mind-cluster_rdma-plugin_fault_code.json"
    )
    assert alarm.data["action"] == "reset_gpu"
    assert states(fleet)["gpu-01"] == "quarantined"

    # the host page shows the alarm with the vendor's words
    app = create_app(fleet, TokenStore(None))
    attach(app, fleet, app.state.ctx.tokens)
    with TestClient(app) as web:
        signed_in(web, create_token(fleet, "dash", Role.VIEWER)[1])
        page = web.get("/hosts/gpu-01")
    assert page.status_code == 200
    assert "ProcMgr心跳检测异常" in page.text
    assert "1. It is recommended to reset the SoC" in page.text


def test_the_overlay_changes_the_action_and_a_bad_one_refuses_the_sweep(
    fleet: Fleet, clock: FakeClock, tmp_path: Path
) -> None:
    _npu_alarm(fleet, clock, tmp_path)
    bad = tmp_path / "faults-bad.yaml"
    bad.write_text('huawei:\n  "8C03A000": {action: reboot}\n  "8C084E00": {action: rma}\n')
    fleet.settings.fault_catalogue_file = bad
    with fleet.db.session() as s:
        before = s.scalar(select(func.count()).select_from(HostSampleRow))
    with pytest.raises(ConfigError, match=rf"{bad}:3: huawei code 8C084E00: action 'rma'"):
        inspect(fleet)
    with fleet.db.session() as s:  # refused before any host was probed
        assert s.scalar(select(func.count()).select_from(HostSampleRow)) == before

    good = tmp_path / "faults.yaml"
    good.write_text('huawei:\n  "8C03A000": {action: reboot}\n')
    fleet.settings.fault_catalogue_file = good
    report = inspect(fleet)
    (f,) = next(h for h in report.hosts if h.host == "gpu-01").findings
    assert (f.severity.value, f.action.value) == ("critical", "reboot")
    (alarm,) = health_alarms(fleet)["gpu-01"]
    assert alarm.data["action"] == "reboot"
    assert "8C03A000 (RestartNPUCodes -> reboot)" in alarm.message
    codes = {c["code"]: c for c in alarm.data["fault_codes"]}
    assert codes["8C03A000"]["source"] == f"{good}:2"


def test_validation_judges_the_codes_by_the_same_catalogue_as_the_inspection(
    fleet: Fleet, clock: FakeClock, tmp_path: Path
) -> None:
    """Issue 28 gap: the real Alarm capture's reset codes made record only (NotHandle) by the
    site's overlay: the inspection notes the NPU (info, no alarm) and the next validation
    keeps the host available, noting the codes (on main it quarantined it); the shipped
    levels quarantine it, naming the deciding code and level."""
    overlay = tmp_path / "faults.yaml"
    overlay.write_text('huawei:\n  "8C03A000": {level: NotHandleFaultCodes}\n'
                       '  "8C084E00": {level: NotHandleFaultCodes}\n')
    fleet.settings.fault_catalogue_file = overlay
    _npu_alarm(fleet, clock, tmp_path)
    report = inspect(fleet)
    (f,) = next(h for h in report.hosts if h.host == "gpu-01").findings
    assert (f.severity.value, f.action.value) == ("info", "none")
    assert health_alarms(fleet) == {}
    by = {v.host: v for v in validate(fleet).verdicts}
    assert by["gpu-01"].state == "available", by["gpu-01"].reasons
    assert states(fleet) == {"gpu-01": "available", "gpu-02": "available"}

    fleet.settings.fault_catalogue_file = None
    by = {v.host: v for v in validate(fleet, collect_first=False).verdicts}
    assert by["gpu-01"].state == "quarantined"
    assert by["gpu-01"].reasons == [
        "accelerator_health: huawei #3 (0000:82:00.0) alarm [A4025021 8C03A000 8C084E00]: "
        "8C03A000 RestartNPUCodes -> reset_gpu"]
