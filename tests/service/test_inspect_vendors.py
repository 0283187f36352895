"""Vendor-neutral inspection (issue 24 item 3) on SQLite and PostgreSQL, through the sim lab:
Ascend and AMD hosts answer the probe through their vendor plugins from the real captures
(main 84be469 answered them with ``ParseError ... text before the first section banner``);
a healthy host is ``ok`` with no problem and no finding and its devices' samples are stored;
an NPU in Alarm (the real Alarm capture, its error codes), a RoCE port down (the real DOWN
capture) or unhealthy ("Socket failed"), an NPU or a card missing (fewer than validated),
npu-smi's real error about a lost card are findings with the policy's severity and action,
one alarm each, and take the host out of allocation."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select
from tests.service.test_inspect import allocatable, health_alarms, set_faults, states

from gpufleet.lab.demo import enroll_lab
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.health.inspect import SweepReport, inspect
from gpufleet.service.hosts.validate import validate
from gpufleet.store.tables import GpuSampleRow, Host, HostSampleRow
from gpufleet.testing import FakeClock

MODELS = ["ascend-910b3-8x", "mi100-4x"]


def _lab(fleet: Fleet, tmp_path: Path, n: int) -> Path:
    fleet.settings.guard_share = 1.0  # these tests are not about the blast-radius guard
    fleet.settings.guard_hosts = 100
    d = tmp_path / "lab"
    enroll_lab(fleet, d, n, models=MODELS, faults={})
    assert {v.state for v in validate(fleet).verdicts} == {"available"}
    return d


def test_healthy_ascend_and_amd_hosts_are_ok_and_sampled(fleet: Fleet, tmp_path: Path) -> None:
    _lab(fleet, tmp_path, 2)  # gpu-01: 8x Ascend 910B3, gpu-02: 4x MI100
    report = inspect(fleet)
    by = {h.host: h for h in report.hosts}
    for name in ("gpu-01", "gpu-02"):
        assert by[name].outcome == "ok", by[name].reason
        assert by[name].reason == ""
        assert by[name].problems == []
        assert by[name].findings == []
        assert by[name].actions == []
    assert states(fleet) == {"gpu-01": "available", "gpu-02": "available"}
    with fleet.db.session() as s:
        ids = {h.name: h.id for h in s.scalars(select(Host))}
        rows = {r.host_id: r for r in s.scalars(select(HostSampleRow))}
        assert {r.gpus_ok for r in rows.values()} == {True}
        assert rows[ids["gpu-01"]].gpu_count == 8
        assert rows[ids["gpu-02"]].gpu_count == 4
        # each NPU's RoCE port and its network health, as the vendor-neutral port samples
        ports = {p["name"]: p["state"] for p in rows[ids["gpu-01"]].ports}
        assert ports["huawei:0/roce"] == "UP"
        assert ports["huawei:7/roce_net_health"] == "UP"
        assert rows[ids["gpu-01"]].problems == rows[ids["gpu-02"]].problems == []
        gpus = s.scalars(select(GpuSampleRow).order_by(GpuSampleRow.gpu_index)).all()
    npus = [g for g in gpus if g.host_id == ids["gpu-01"]]
    cards = [g for g in gpus if g.host_id == ids["gpu-02"]]
    assert [g.gpu_index for g in npus] == list(range(8))
    # the ms-swift capture's table: 910B3, bus c1:00.0, 101.8 W, 43 C, 3318 MB HBM in use
    assert (npus[0].model, npus[0].pci_bus_id) == ("910B3", "0000:c1:00.0")
    assert (npus[0].power_w, npus[0].temperature_c, npus[0].memory_used_mib) == (
        101.8,
        43.0,
        3318.0,
    )
    assert [g.gpu_index for g in cards] == [0, 1, 2, 3]
    assert {g.model for g in cards} == {"Instinct MI100"}
    assert all(g.temperature_c is not None and g.power_w is not None for g in cards)


def _found(report: SweepReport) -> dict[str, list[tuple[str, str, str, int | None]]]:
    return {
        h.host: [(f.rule, f.severity.value, f.action.value, f.gpu_index) for f in h.findings]
        for h in report.hosts
    }


def test_unhealthy_vendor_devices_are_findings_alarmed_and_kept_out(
    fleet: Fleet, clock: FakeClock, tmp_path: Path
) -> None:
    d = _lab(fleet, tmp_path, 8)  # odd: 8x Ascend 910B3, even: 4x MI100
    first = inspect(fleet)
    assert first.findings == 0, [h.findings for h in first.hosts]
    clock.advance(minutes=5)
    set_faults(
        d,
        {
            "gpu-01": ["npu-alarm:3"],
            "gpu-02": ["gpu-missing"],
            "gpu-03": ["npu-link-down:5", "npu-net-unhealthy:2"],
            "gpu-05": ["npu-missing:2"],
            "gpu-07": ["npu-smi-error:4"],
        },
        clock,
    )
    report = inspect(fleet)
    by = {h.host: h for h in report.hosts}
    # npu-smi's real error about a lost card: nothing it says is believed (never "ok")
    assert by["gpu-07"].outcome == "probe_failed"
    assert "Invalid card id." in by["gpu-07"].reason
    assert any("npu-smi info -t health -i 4" in p for p in by["gpu-07"].problems)
    answered = [h for h in report.hosts if h.host != "gpu-07"]
    assert all(h.outcome == "ok" for h in answered), [(h.host, h.reason) for h in answered]
    # What the tool reports fires on the sweep that saw it; a missing device and a tool that
    # cannot be read wait for a second sweep (observe / gpu-count-low, as for NVIDIA).
    none: list[tuple[str, str, str, int | None]] = []
    assert _found(report) == {
        "gpu-01": [("accelerator-unhealthy", "critical", "reset_gpu", 3)],
        "gpu-02": none,
        "gpu-03": [
            ("accelerator-link-down", "critical", "escalate", 2),
            ("accelerator-link-down", "critical", "escalate", 5),
        ],
        "gpu-04": none,
        "gpu-05": none,
        "gpu-06": none,
        "gpu-07": none,
        "gpu-08": none,
    }
    # the real Alarm capture's error codes, in the finding and its alarm
    assert "A4025021 8C03A000 8C084E00" in by["gpu-01"].findings[0].message
    clock.advance(minutes=5)
    report = inspect(fleet)
    found = _found(report)
    assert found["gpu-01"] == [("accelerator-unhealthy", "critical", "reset_gpu", 3)]  # still
    assert found["gpu-02"] == [("gpu-count-low", "critical", "reboot", None)]
    assert found["gpu-05"] == [("gpu-count-low", "critical", "reboot", None)]
    assert found["gpu-07"] == [("gpu-tool-error", "critical", "escalate", None)]
    assert "3 of 4 GPUs answer" in report.hosts[1].findings[0].message
    sick = {"gpu-01", "gpu-02", "gpu-03", "gpu-05", "gpu-07"}
    alarms = health_alarms(fleet)
    counts = {"gpu-01": 1, "gpu-02": 1, "gpu-03": 2, "gpu-05": 1, "gpu-07": 1}
    assert {n: len(a) for n, a in alarms.items()} == counts
    assert {a.data["subject"] for a in alarms["gpu-03"]} == {
        "huawei:5/roce",
        "huawei:2/roce_net_health",
    }
    assert {n for n, s in states(fleet).items() if s == "quarantined"} == sick
    assert allocatable(fleet) == {"gpu-04", "gpu-06", "gpu-08"}
    with fleet.db.session() as s:
        faults = {h.name: h.fault for h in s.scalars(select(Host)) if h.fault is not None}
        unread = s.scalar(
            select(HostSampleRow)
            .join(Host, Host.id == HostSampleRow.host_id)
            .where(Host.name == "gpu-07", HostSampleRow.at == report.at)
        )
        assert unread is not None and unread.gpus_ok is False  # unknown, never "no devices"
    assert {n: f.value for n, f in faults.items()} == {
        "gpu-01": "accelerator_alarm",
        "gpu-02": "gpu_lost",
        "gpu-03": "ib_down",
        "gpu-05": "gpu_lost",
        "gpu-07": "telemetry_lost",
    }

    # Still there a sweep later: still the same alarms (deduplicated).
    clock.advance(minutes=5)
    inspect(fleet)
    assert {n: len(a) for n, a in health_alarms(fleet).items()} == counts

    # The faults go away: the criticals are marked cleared and the hosts go back to
    # validation (never straight to available).
    clock.advance(minutes=5)
    set_faults(d, {}, clock)
    inspect(fleet)
    st = states(fleet)
    assert {st[n] for n in sick} == {"validating"}
    for alarm in (a for v in health_alarms(fleet).values() for a in v):
        assert alarm.data.get("cleared_at"), alarm.message
