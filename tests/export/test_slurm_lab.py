"""``gpufleet slurm export`` / ``slurm sync`` against a real Slurm (slurmctld + one slurmd per
node on loopback, GPUs as fake character devices; tests/slurmlab.py), on SQLite and
PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import select
from tests.export.conftest import slurm_lab_fleet
from tests.slurmlab import SlurmLab

from gpufleet.collect.slurm import SlurmClient
from gpufleet.domain.events import AlarmKind, EventKind
from gpufleet.domain.health import Fault
from gpufleet.domain.states import Event, HostState
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.core.lifecycle import transition
from gpufleet.service.exports.slurm import slurm_sync
from gpufleet.service.hosts import operations
from gpufleet.service.hosts.validate import validate
from gpufleet.store.repo import host_by_name
from gpufleet.store.tables import Alarm
from gpufleet.store.tables import Event as EventRow

pytestmark = pytest.mark.xdist_group("slurm")


def node(lab: SlurmLab, name: str) -> dict[str, object]:
    doc = json.loads(lab.run("sinfo", "--json"))
    return next(n for n in doc["nodes"] if n["name"] == name)


def quarantine(fleet: Fleet, name: str, why: str) -> None:
    with fleet.db.session() as s:
        transition(s, fleet, host_by_name(s, name, for_update=True), Event.HARDWARE_FAULT, why,
                   fault=Fault.FATAL_XID, fault_reason=why)


def test_sinfo_shows_the_exported_features_and_gres(slurm: SlurmLab) -> None:
    out = slurm.run("sinfo", "-h", "-N", "-o", "%N|%f|%G")
    rows = dict((ln.split("|")[0], ln.split("|")[1:]) for ln in out.splitlines())
    assert set(rows) == {"gpu-01", "gpu-02", "gpu-03"}
    features, gres = rows["gpu-01"]
    assert gres == "gpu:h100:8"
    feats = features.split(",")
    assert feats[0] == "h100" and "nvlink" in feats
    assert any(f.startswith("validated_") for f in feats), feats
    assert any(f.startswith("pool_") for f in feats) and any(f.startswith("rack_") for f in feats)
    # the exported CPUs and memory are what Slurm schedules with
    n = node(slurm, "gpu-01")
    assert n["cpus"] and n["real_memory"] and n["cpus"] != 2  # from the facts, not this VM


def test_quarantine_drains_foreign_drain_stays_resume_after_revalidation(
    fleet: Fleet, tmp_path: Path, slurm: SlurmLab
) -> None:
    slurm_lab_fleet(fleet, tmp_path / "lab")
    client = SlurmClient(conf=slurm.conf)
    quarantine(fleet, "gpu-02", "Xid 79 on GPU 3")
    slurm.run("scontrol", "update", "nodename=gpu-03", "state=drain", "reason=admin: fan noise")

    dry = slurm_sync(fleet, client, dry_run=True)
    assert [(d.node, d.action.value) for d in dry.decisions if d.action.value != "none"] == [
        ("gpu-02", "drain")]
    assert slurm.node_states()["gpu-02"] == "idle"  # a dry run changes nothing

    rep = slurm_sync(fleet, client)
    assert rep.ok and rep.done == ["drain gpu-02"]
    n2 = node(slurm, "gpu-02")
    assert "DRAIN" in n2["state_flags"]  # type: ignore[operator]
    assert n2["reason"] == "gpufleet:quarantined:fatal_xid Xid 79 on GPU 3"
    assert slurm.node_states()["gpu-03"] == "drained"
    assert slurm_sync(fleet, client).done == []  # a second sync changes nothing

    # back through validation: unquarantine -> validating keeps the drain
    operations.unquarantine(fleet, "gpu-02", "GPU reseated, rebooted")
    rep = slurm_sync(fleet, client)
    assert "DRAIN" in node(slurm, "gpu-02")["state_flags"]  # type: ignore[operator]
    assert str(node(slurm, "gpu-02")["reason"]).startswith("gpufleet:validating")
    validate(fleet)
    rep = slurm_sync(fleet, client)
    assert rep.done == ["resume gpu-02"]
    slurm.wait_idle(["gpu-02"])
    # someone else's drain on an available host is never resumed
    assert slurm.node_states()["gpu-03"] == "drained"
    assert node(slurm, "gpu-03")["reason"] == "admin: fan noise"
    with fleet.db.session() as s:
        kinds = [e.data.get("action") for e in s.scalars(
            select(EventRow).where(EventRow.kind == EventKind.SLURM).order_by(EventRow.id))]
    assert kinds == ["drain", "drain", "resume"]


def test_slurm_down_node_raises_an_alarm_and_is_not_resumed(
    fleet: Fleet, tmp_path: Path, slurm: SlurmLab
) -> None:
    slurm_lab_fleet(fleet, tmp_path / "lab")
    client = SlurmClient(conf=slurm.conf)
    slurm.run("scontrol", "update", "nodename=gpu-01", "state=down", "reason=NODE_FAIL test")
    rep = slurm_sync(fleet, client)
    assert rep.done == [] and rep.alarms == ["gpu-01"]
    assert slurm.node_states()["gpu-01"].startswith("down")
    with fleet.db.session() as s:
        alarms = s.scalars(select(Alarm).where(Alarm.kind == AlarmKind.SLURM_NODE)).all()
        assert len(alarms) == 1 and "NODE_FAIL test" in alarms[0].message
        assert host_by_name(s, "gpu-01").state == HostState.AVAILABLE
    slurm_sync(fleet, client)  # still down: the alarm stays one alarm
    slurm.run("scontrol", "update", "nodename=gpu-01", "state=resume")
    slurm.wait_idle(["gpu-01"])
    slurm_sync(fleet, client)
    with fleet.db.session() as s:
        alarms = s.scalars(select(Alarm).where(Alarm.kind == AlarmKind.SLURM_NODE)).all()
        assert len(alarms) == 1 and alarms[0].closed_at is not None
