"""The inspection sweep (issue 10 items 2, 4, 6) on SQLite and PostgreSQL, through the sim lab:
faults injected between sweeps are found with the right severity and action, open exactly one
alarm each and take the host out of allocation; clearing the fault alone does not bring the host
back, validation does; the blast-radius guard stops automatic quarantine at its share."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select

from gpufleet.domain.events import AlarmKind
from gpufleet.domain.placement import Request
from gpufleet.lab.demo import enroll_lab
from gpufleet.lab.fleet import LabFleet, create_fleet
from gpufleet.service.allocation.candidates import candidate_filters
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.health.inspect import fleet_alarms, inspect
from gpufleet.service.hosts.validate import validate
from gpufleet.store.tables import Alarm, FactSnapshot, GpuSampleRow, Host, HostSampleRow
from gpufleet.testing import FakeClock

FAULTS = {
    "gpu-01": ("hot:2", "gpu-temperature", "critical", "escalate", 2),
    "gpu-02": ("ecc-uncorrectable", "ecc-uncorrectable", "critical", "reset_gpu", None),
    "gpu-03": ("xid:79", "xid-79", "critical", "reboot", None),
    "gpu-04": ("ib-link-downed", "ib-link-downed", "critical", "escalate", None),
    "gpu-05": ("power-brake:1", "hw-power-brake", "critical", "reseat_or_replace", 1),
    "gpu-06": ("straggler:5", "straggler-clocks", "critical", "reset_gpu", 5),
}


def lab(fleet: Fleet, tmp_path: Path, n: int) -> Path:
    d = tmp_path / "lab"
    enroll_lab(fleet, d, n, models=["h100-8x"], faults={})
    assert {v.state for v in validate(fleet).verdicts} == {"available"}
    return d


def set_faults(d: Path, faults: dict[str, list[str]], clock: FakeClock) -> None:
    fl = LabFleet.load(d)
    hosts = [
        h.model_copy(update={"faults": faults.get(h.name, []), "xid_at": clock.now})
        for h in fl.hosts
    ]
    fl.model_copy(update={"hosts": hosts}).save(d)


def allocatable(fleet: Fleet) -> set[str]:
    now = fleet.now()
    with fleet.db.session() as s:
        filters = candidate_filters(s, Request(hosts=1), None, now, now + timedelta(hours=1), now)
        rows = s.scalars(
            select(Host.name)
            .join(FactSnapshot, FactSnapshot.id == Host.latest_snapshot_id)
            .where(*filters)
        )
        return set(rows)


def health_alarms(fleet: Fleet) -> dict[str, list[Alarm]]:
    out: dict[str, list[Alarm]] = {}
    with fleet.db.session() as s:
        for a, name in s.execute(
            select(Alarm, Host.name)
            .join(Host, Host.id == Alarm.host_id)
            .where(Alarm.kind == AlarmKind.HEALTH, Alarm.closed_at.is_(None))
        ):
            s.expunge(a)
            out.setdefault(name, []).append(a)
    return out


def states(fleet: Fleet) -> dict[str, str]:
    with fleet.db.session() as s:
        return {h.name: h.state.value for h in s.scalars(select(Host))}


def test_injected_faults_are_found_alarmed_and_kept_out(
    fleet: Fleet, clock: FakeClock, tmp_path: Path
) -> None:
    fleet.settings.guard_share = 1.0  # this test is not about the guard
    fleet.settings.guard_hosts = 100
    d = lab(fleet, tmp_path, 8)
    first = inspect(fleet)
    assert first.findings == 0, [h.findings for h in first.hosts]
    with fleet.db.session() as s:
        assert len(s.scalars(select(HostSampleRow)).all()) == 8
        assert len(s.scalars(select(GpuSampleRow)).all()) == 64

    clock.advance(minutes=5)
    set_faults(d, {h: [f[0]] for h, f in FAULTS.items()}, clock)
    inspect(fleet)
    found = health_alarms(fleet)
    # Anti-flap: temperature and power brake need two sweeps in a row; the rest fire at once.
    assert set(found) == {"gpu-02", "gpu-03", "gpu-04", "gpu-06"}
    clock.advance(minutes=5)
    inspect(fleet)
    found = health_alarms(fleet)
    assert set(found) == set(FAULTS)
    for name, (_, rule, severity, action, gpu) in FAULTS.items():
        (alarm,) = found[name]  # exactly one alarm each (a brake clears the straggler rules)
        assert alarm.data["rule"] == rule, (name, alarm.message)
        assert alarm.severity.value == severity
        assert alarm.data["action"] == action
        if gpu is not None:
            assert alarm.data["gpu_index"] == gpu
            assert str(alarm.data["gpu_uuid"]).startswith("GPU-")
    st = states(fleet)
    assert {n for n in FAULTS if st[n] == "quarantined"} == set(FAULTS)
    assert allocatable(fleet) == {"gpu-07", "gpu-08"}

    # A third sweep with the faults still there: still one alarm each (deduplicated).
    clock.advance(minutes=5)
    inspect(fleet)
    assert {n: len(a) for n, a in health_alarms(fleet).items()} == dict.fromkeys(FAULTS, 1)

    # The faults go away. Past the windows, the findings clear and the inspection sends the
    # hosts it quarantined back to validation, but nothing is allocatable before it passes.
    set_faults(d, {}, clock)
    clock.advance(hours=2)
    inspect(fleet)
    assert all(a.data.get("cleared_at") for v in health_alarms(fleet).values() for a in v)
    assert {states(fleet)[n] for n in FAULTS} == {"validating"}
    assert allocatable(fleet) == {"gpu-07", "gpu-08"}
    # Validation passes and closes the cleared alarms in the same transaction (finding
    # cleared + validated): an available host is allocatable at once, not one sweep later.
    assert {v.state for v in validate(fleet, ",".join(FAULTS)).verdicts} == {"available"}
    assert health_alarms(fleet) == {}
    assert allocatable(fleet) == {f"gpu-0{i}" for i in range(1, 9)}
    clock.advance(minutes=5)
    inspect(fleet)
    assert health_alarms(fleet) == {}


def test_leased_host_keeps_its_lease_and_warnings_do_not_block(
    fleet: Fleet, clock: FakeClock, tmp_path: Path
) -> None:
    from gpufleet.service.allocation.allocation import allocate

    fleet.settings.guard_share = 1.0
    d = lab(fleet, tmp_path, 3)
    lease = allocate(
        fleet,
        Request(hosts=1),
        owner="alice",
        purpose="train",
        selector="gpu-01",
        duration=timedelta(hours=8),
    )
    inspect(fleet)
    clock.advance(minutes=5)
    set_faults(d, {"gpu-01": ["ecc-uncorrectable"], "gpu-02": ["disk-full"]}, clock)
    report = inspect(fleet)
    by = {h.host: h for h in report.hosts}
    assert states(fleet)["gpu-01"] == "allocated"  # the job is not killed
    assert any("owner alice notified" in a for a in by["gpu-01"].actions), by["gpu-01"].actions
    # The warning (disk nearly full) opens an alarm but leaves the host allocatable.
    (warn,) = health_alarms(fleet)["gpu-02"]
    assert warn.severity.value == "warning" and warn.data["rule"] == "disk-full"
    assert "gpu-02" in allocatable(fleet)
    assert lease is not None


def test_blast_radius_guard_stops_at_the_share(
    fleet: Fleet, clock: FakeClock, tmp_path: Path
) -> None:
    fleet.settings.guard_share = 0.25
    d = lab(fleet, tmp_path, 8)
    inspect(fleet)
    clock.advance(minutes=5)
    # A broken rule (or a bad batch) makes half the fleet look broken at once.
    set_faults(d, {f"gpu-0{i}": ["ecc-uncorrectable"] for i in range(1, 5)}, clock)
    report = inspect(fleet)
    st = states(fleet)
    quarantined = sorted(n for n, s in st.items() if s == "quarantined")
    assert quarantined == ["gpu-01", "gpu-02"]  # 25% of 8
    assert report.guard_tripped
    (alarm,) = fleet_alarms(fleet)
    assert alarm["kind"] == "blast-radius" and alarm["data"]["held"] == ["gpu-03", "gpu-04"]
    # Held-back hosts keep their critical alarm, marked held: not quarantined, but out of
    # placement (issue 24 item 9: restricted, never allocatable with a critical finding).
    held = health_alarms(fleet)
    assert held["gpu-03"][0].data["held"] == "blast-radius guard"
    assert held["gpu-03"][0].severity.value == "critical"
    assert {states(fleet)[n] for n in ("gpu-03", "gpu-04")} == {"available"}
    assert not {"gpu-03", "gpu-04"} & allocatable(fleet)
    # The next sweep: still one fleet alarm, no more automatic quarantines.
    clock.advance(minutes=5)
    inspect(fleet)
    assert len(fleet_alarms(fleet)) == 1
    assert sorted(n for n, s in states(fleet).items() if s == "quarantined") == quarantined
    # Manual actions are not blocked by the guard: an operator takes a held host out.
    from gpufleet.service.hosts.operations import maintenance_on

    maintenance_on(fleet, "gpu-04", reason="ECC reported, pulling it by hand")
    assert states(fleet)["gpu-04"] == "maintenance"
    # Healed hosts re-validate and return even with the guard tripped.
    set_faults(d, {}, clock)
    clock.advance(hours=2)
    inspect(fleet)
    assert {states(fleet)[n] for n in quarantined} == {"validating"}


def test_samples_past_the_retention_roll_up_hourly(
    fleet: Fleet, clock: FakeClock, tmp_path: Path
) -> None:
    from gpufleet.service.health.inspect_store import roll_up_and_prune
    from gpufleet.store.tables import SampleRollup

    d = lab(fleet, tmp_path, 2)
    for minute in (0, 20, 40):  # three sweeps in one hour, the last one hot on gpu-02
        if minute == 40:
            set_faults(d, {"gpu-02": ["hot:3"]}, clock)
        inspect(fleet)
        clock.advance(minutes=20)
    fleet.settings.inspect_retention_hours = 0.5
    written, deleted = roll_up_and_prune(fleet)
    assert (written, deleted) == (16, 32)  # 2 hosts x 8 GPUs; the first two sweeps only
    clock.advance(hours=2)
    assert roll_up_and_prune(fleet) == (16, 16)  # the last sweep joins its hour's rows
    with fleet.db.session() as s:
        assert s.scalars(select(GpuSampleRow)).all() == []
        assert s.scalars(select(HostSampleRow)).all() == []
        rows = {(r.host_id, r.gpu_index): r for r in s.scalars(select(SampleRollup))}
    assert len(rows) == 16 and {r.samples for r in rows.values()} == {3}
    hot = [r for r in rows.values() if r.temperature_max == 92]
    assert len(hot) == 1 and hot[0].gpu_index == 3
    assert hot[0].temperature_avg == pytest.approx((59 + 59 + 92) / 3)


def test_nvlink_rules_only_where_the_facts_show_nvlink(
    fleet: Fleet, clock: FakeClock, tmp_path: Path
) -> None:
    fleet.settings.guard_share = 1.0
    d = tmp_path / "lab"
    fl = enroll_lab(fleet, d, 2, models=["h100-8x", "l40s-1x"], faults={})
    validate(fleet)
    models = {h.name: h.model for h in fl.hosts}
    inspect(fleet)
    clock.advance(minutes=5)
    set_faults(d, {n: ["xid:74", "xid:74", "xid:74"] for n in models}, clock)
    inspect(fleet)
    with fleet.db.session() as s:
        linked = {
            name: nv
            for name, nv in s.execute(
                select(Host.name, HostSampleRow.nvlink).join(Host, Host.id == HostSampleRow.host_id)
            )
        }
    found = {n: [a.data["rule"] for a in v] for n, v in health_alarms(fleet).items()}
    for name, model in models.items():
        if model == "h100-8x":
            assert linked[name] is True and found[name] == ["xid-nvlink"]
        else:  # PCIe L40S: no NVLink in its facts, the NVLink rule does not apply
            assert linked[name] is False and name not in found


def test_an_alarm_never_clears_on_missing_data(
    fleet: Fleet, clock: FakeClock, tmp_path: Path
) -> None:
    fleet.settings.guard_share = 1.0
    d = lab(fleet, tmp_path, 2)
    inspect(fleet)
    clock.advance(minutes=5)
    set_faults(d, {"gpu-01": ["ecc-uncorrectable"]}, clock)
    inspect(fleet)
    (alarm,) = health_alarms(fleet)["gpu-01"]
    # nvidia-smi stops answering: the GPU rules see nothing, which is not "healthy".
    set_faults(d, {"gpu-01": ["nvidia-smi-missing"]}, clock)
    clock.advance(hours=2)
    report = inspect(fleet)
    (host,) = [h for h in report.hosts if h.host == "gpu-01"]
    assert "nvidia-smi exited 127" in host.problems[0]
    (still,) = health_alarms(fleet)["gpu-01"]
    assert still.id == alarm.id and "cleared_at" not in still.data
    assert states(fleet)["gpu-01"] == "quarantined"


def test_a_rule_the_pool_names_runs_the_first_rung(
    fleet: Fleet, clock: FakeClock, tmp_path: Path
) -> None:
    """Policy may run the first rung automatically for named rules (item 5): the pool names
    ``ecc-uncorrectable`` under ``auto_remediate``, so the sweep that quarantines gpu-02 for
    it runs the GPU reset (recorded on the ladder with the rule) and sends the host to
    validation; gpu-01's Xid 79 is not named, so it stays quarantined with no remediation."""
    from gpufleet.service.health import remediation
    from gpufleet.service.hosts import gpu_health

    fleet.settings.guard_share = 1.0
    fleet.settings.guard_hosts = 100
    d = lab(fleet, tmp_path, 3)
    pool = LabFleet.load(d).hosts[0].spec.pool
    gpu_health.set_pool_health_policy(fleet, pool, auto_remediate=["ecc-uncorrectable"])
    inspect(fleet)
    clock.advance(minutes=5)
    set_faults(d, {"gpu-01": ["xid:79"], "gpu-02": ["ecc-uncorrectable"]}, clock)
    report = inspect(fleet)
    acts = {h.host: h.actions for h in report.hosts}
    assert "automatic remediation for ecc-uncorrectable: done" in acts["gpu-02"]
    assert not any("automatic remediation" in a for a in acts["gpu-01"])
    assert remediation.ladder(fleet, "gpu-02")[-1]["rule"] == "ecc-uncorrectable"
    assert remediation.ladder(fleet, "gpu-01") == []
    st = states(fleet)
    assert st["gpu-01"] == "quarantined"
    assert st["gpu-02"] == "validating"  # reset, then validation decides: never straight back
    assert "gpu-02" not in allocatable(fleet)


def test_the_copy_rows_equal_the_orm_rows() -> None:
    """The PostgreSQL path writes ``gpu_samples`` from value tuples (no dict per sample): the
    same values, in the same columns, as :func:`gpu_row` (the SQLite path), for every GPU of
    a real capture with a fault (reasons, ECC) in it."""
    from gpufleet.collect.inspect import parse_probe
    from gpufleet.lab.probe import render_probe
    from gpufleet.service.health import inspect_store as st

    host = create_fleet(1, models=["h100-8x"], faults={}).hosts[0]
    host = host.model_copy(update={"faults": ["power-brake:1", "ecc-uncorrectable"]})
    at = FakeClock().now
    res = parse_probe(render_probe(host), at)
    assert res.sample.gpus is not None and len(res.sample.gpus) == 8
    assert set(st._GPU_VALUE_ORDER) == set(st._GPU_COLUMNS)
    for g in res.sample.gpus:
        row = st.gpu_row(7, at, g)
        assert dict(zip(st._GPU_VALUE_ORDER, st._gpu_values(7, at, g), strict=True)) == row
    assert any(st.gpu_row(7, at, g)["reasons"] for g in res.sample.gpus)


def test_a_value_the_binary_copy_refuses_falls_back_to_text(fleet: Fleet, tmp_path: Path) -> None:
    """PostgreSQL stores GPU samples with the binary COPY; a value of another type than its
    column (here a count as the string "3") is refused by the binary dumpers, and the rows go
    in with the text format after a rollback to the savepoint: nothing lost, nothing doubled.
    (SQLite: executemany, the same result.)"""
    from dataclasses import replace

    from gpufleet.collect.inspect import parse_probe
    from gpufleet.lab.probe import render_probe
    from gpufleet.service.health.inspect_store import store_samples

    lab(fleet, tmp_path, 1)
    with fleet.db.session() as s:
        hid = s.scalars(select(Host.id)).one()
    host = create_fleet(1, models=["h100-8x"], faults={}).hosts[0]
    at = fleet.now()
    res = parse_probe(render_probe(host), at)
    assert res.sample.gpus is not None
    odd = replace(res.sample.gpus[0], retired_single_bit="3")  # type: ignore[arg-type]
    res = replace(res, sample=replace(res.sample, gpus=(odd, *res.sample.gpus[1:])))
    assert store_samples(fleet, at, {hid: res}) == {hid}
    with fleet.db.session() as s:
        rows = s.scalars(select(GpuSampleRow).order_by(GpuSampleRow.gpu_index)).all()
        assert len(rows) == 8 and rows[0].retired_sbe == 3
        assert len(s.scalars(select(HostSampleRow)).all()) == 1
