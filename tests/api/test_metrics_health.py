"""``/metrics``' health families through the real ASGI app on SQLite and PostgreSQL: per-GPU
readings of the latest inspection sample, inspection age per host, the blast-radius guard,
time to act (fault seen -> alarm -> quarantined) and run durations; ``promtool check
metrics`` on the live output."""

from __future__ import annotations

import subprocess
from datetime import timedelta
from pathlib import Path

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import select

from gpufleet.api.app import create_app
from gpufleet.api.auth import TokenStore
from gpufleet.domain.events import AlarmKind, AlarmSeverity
from gpufleet.domain.runs import RunKind, RunState
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.health.inspect import inspect
from gpufleet.store.tables import Alarm, Host, JobRun
from gpufleet.testing import FakeClock
from tests.api.conftest import lab
from tests.service.test_inspect import set_faults

Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(text: str) -> Series:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def test_health_metrics_follow_the_inspections(
    fleet: Fleet, tmp_path: Path, tokens_file: Path, promtool: str
) -> None:
    clock = fleet.clock
    assert isinstance(clock, FakeClock)
    fleet.settings.guard_share = 0.2  # 1 of 6 hosts may be quarantined automatically
    fleet.settings.guard_min_hosts = 1  # (issue 24: the guard trips past both limits)
    lab(fleet, tmp_path)
    d = tmp_path / "lab"
    inspect(fleet)
    clock.advance(minutes=5)
    set_faults(d, {"gpu-01": ["ecc-uncorrectable"], "gpu-02": ["ecc-uncorrectable"]}, clock)
    inspect(fleet, "gpu-01,gpu-02,gpu-03")
    clock.advance(minutes=2)
    with fleet.db.session() as s:
        s.add(
            JobRun(
                kind=RunKind.COLLECT,
                state=RunState.SUCCEEDED,
                actor="t",
                hosts=6,
                chunks=1,
                created_at=fleet.now() - timedelta(seconds=40),
                finished_at=fleet.now(),
            )
        )
        states = {h.name: h.state.value for h in s.scalars(select(Host))}
        names = {h.id: h.name for h in s.scalars(select(Host))}
        critical = list(
            s.scalars(
                select(Alarm).where(
                    Alarm.kind == AlarmKind.HEALTH, Alarm.severity == AlarmSeverity.CRITICAL
                )
            )
        )
        alarms = s.scalar(select(Alarm.id).where(Alarm.kind == AlarmKind.HEALTH).limit(1))
        n_alarms = len(list(s.scalars(select(Alarm).where(Alarm.kind == AlarmKind.HEALTH))))
    assert alarms is not None
    quarantined = sorted(n for n, st in states.items() if st == "quarantined")
    assert len(quarantined) == 1  # the guard held the other one
    with TestClient(create_app(fleet, TokenStore(tokens_file))) as c:
        m = c.get("/metrics")
    assert m.status_code == 200
    got = samples(m.text)
    model = "NVIDIA H100 80GB HBM3"
    temps = {k: v for k, v in got.items() if k[0] == "gpufleet_gpu_temperature_celsius"}
    assert len(temps) == 6 * 8 and all(20 < v < 110 for v in temps.values())
    key = (("gpu", "0"), ("host", "gpu-04"), ("model", model))
    assert got[("gpufleet_gpu_power_watts", key)] > 0
    assert got[("gpufleet_gpu_hw_throttled", key)] == 0
    ecc = {k[1]: v for k, v in got.items() if k[0] == "gpufleet_gpu_ecc_volatile_uncorrected" and v}
    assert ecc and {dict(k)["host"] for k in ecc} == {"gpu-01", "gpu-02"}
    # ages: the three hosts of the second sweep 2 min, the others 7 min
    age = {
        dict(k[1])["host"]: v for k, v in got.items() if k[0] == "gpufleet_inspection_age_seconds"
    }
    assert age == {
        "gpu-01": 120,
        "gpu-02": 120,
        "gpu-03": 120,
        "gpu-04": 420,
        "gpu-05": 420,
        "gpu-06": 420,
    }
    assert got[("gpufleet_fleet_alarms_open", (("kind", "blast-radius"),))] == 1
    # time to act: one observation per health alarm; quarantines only for the critical
    # alarms of the quarantined host (the frozen clock makes each 0 s)
    assert got[("gpufleet_time_to_alarm_seconds_count", ())] == n_alarms
    crit_q = sum(1 for a in critical if names[a.host_id] in quarantined)
    assert crit_q >= 1
    assert got[("gpufleet_time_to_quarantine_seconds_count", ())] == crit_q
    assert got[("gpufleet_time_to_quarantine_seconds_bucket", (("le", "1.0"),))] == crit_q
    run = (("kind", "collect"),)
    assert got[("gpufleet_run_duration_seconds_count", run)] == 1
    assert got[("gpufleet_run_duration_seconds_sum", run)] == 40
    assert got[("gpufleet_run_duration_seconds_bucket", (("kind", "collect"), ("le", "30.0")))] == 0
    assert got[("gpufleet_run_duration_seconds_bucket", (("kind", "collect"), ("le", "60.0")))] == 1
    for k in got:  # bounded labels only
        assert not {"job", "run", "id", "alarm"} & {name for name, _ in k[1]}
    check = subprocess.run(
        [promtool, "check", "metrics"], input=m.text, capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 0, check.stdout + check.stderr
