"""Reclaim over the simulated transport, on SQLite and PostgreSQL: the ``sim`` lab answers the
reclaim sections (RECLAIM_REGISTRY) as the real-sshd lab does, clean by default, with the
leftovers of the reclaim faults (gpu-process, stale-mount, lessee-process, lessee-crontab)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from sqlalchemy import select

from gpufleet.collect.bundle import split_bundle
from gpufleet.collect.script import remote_script
from gpufleet.collect.transport import Outcome, Target
from gpufleet.domain.events import EvidenceKind
from gpufleet.domain.health import Fault
from gpufleet.domain.states import Event
from gpufleet.inventory import load_inventory
from gpufleet.lab.fleet import LabFleet, apply_change, create_fleet, write_inventory
from gpufleet.lab.renderers import render_reclaim_sections, render_sections
from gpufleet.lab.transport import SimTransport
from gpufleet.service.allocation.reclaim import reclaim_hosts, reclaim_script
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.core.lifecycle import transition
from gpufleet.service.hosts.enroll import enroll
from gpufleet.service.hosts.validate import validate
from gpufleet.store.repo import host_by_name
from gpufleet.store.tables import EvidenceRow, Host

LEFTOVERS = {
    "gpu-02": "gpu-process",
    "gpu-03": "stale-mount",
    "gpu-04": "lessee-process",
    "gpu-05": "lessee-crontab",
}


def _lab(tmp_path: Path) -> Path:
    d = tmp_path / "lab"
    d.mkdir()
    fl = create_fleet(5, models=["a100-8x"], faults={})
    fl.save(d)
    write_inventory(fl, d / "inventory.ini", transport="sim", lab_dir=d)
    return d


def _release(fleet: Fleet, names: list[str]) -> None:
    """Allocate and release (what the leases service does) -> reclaiming."""
    for name in names:
        with fleet.db.session() as s:
            h = host_by_name(s, name, for_update=True)
            transition(s, fleet, h, Event.ALLOCATE, "test lease")
            transition(s, fleet, h, Event.RELEASE, "test lease released")


def test_the_sim_answers_the_sections_the_script_asks_for(fleet: Fleet, tmp_path: Path) -> None:
    d = _lab(tmp_path)
    lab = LabFleet.load(d)
    apply_change(lab, "gpu-03", add_faults=["stale-mount"]).save(d)
    sim = SimTransport(d)
    target = Target("gpu-03", "192.0.2.3")
    res = asyncio.run(sim.run(target, reclaim_script(fleet, 30), 30))
    assert res.outcome is Outcome.OK and res.output is not None
    host = sim.hosts["gpu-03"]
    assert split_bundle(res.output) == {**render_sections(host), **render_reclaim_sections(host)}
    assert "/data/team-a" in split_bundle(res.output)["reclaim-mounts"].stdout
    # The plain collection script still gets only the collection's sections.
    plain = asyncio.run(sim.run(target, remote_script(), 30))
    assert plain.output is not None
    assert split_bundle(plain.output) == render_sections(host)


def test_reclaim_over_sim_clean_host_available_leftovers_quarantined(
    fleet: Fleet, tmp_path: Path
) -> None:
    d = _lab(tmp_path)
    enroll(fleet, load_inventory(d / "inventory.ini"))
    names = [f"gpu-0{i}" for i in range(1, 6)]
    assert {v.host: v.state for v in validate(fleet).verdicts} == dict.fromkeys(
        names, "available"
    )
    lab = LabFleet.load(d)
    for name, fault in LEFTOVERS.items():
        lab = apply_change(lab, name, add_faults=[fault])
    lab.save(d)
    _release(fleet, names)

    rep = reclaim_hosts(fleet, names, lease_id=11, lessee_users=["alice"])
    by = {r.host: r for r in rep.hosts}
    assert by["gpu-01"].state == "available" and by["gpu-01"].ok, by["gpu-01"].summary
    for name in LEFTOVERS:
        assert by[name].state == "quarantined", (name, by[name].summary)
    assert "/data/team-a (nfs4 10.0.0.5:/export/team-a) left under /data" in by["gpu-03"].summary
    assert "gpu_processes: GPU" in by["gpu-02"].summary
    assert "alice" in by["gpu-04"].summary and "alice" in by["gpu-05"].summary
    assert not rep.ok

    with fleet.db.session() as s:
        hosts = {h.name: h for h in s.scalars(select(Host))}
        assert hosts["gpu-03"].fault is Fault.RECLAIM_FAILED
        assert hosts["gpu-01"].fault is None
        ids = {h.id: n for n, h in hosts.items()}
        rows = s.scalars(select(EvidenceRow).where(EvidenceRow.kind == EvidenceKind.RECLAIM))
        ev = {ids[r.host_id]: r for r in rows}
        assert set(ev) == set(names)
        assert ev["gpu-01"].passed is True and ev["gpu-01"].data["lease_id"] == 11
        assert ev["gpu-03"].passed is False
        assert {
            "device": "10.0.0.5:/export/team-a",
            "mountpoint": "/data/team-a",
            "fstype": "nfs4",
        } in ev["gpu-03"].data["findings"]["mounts"]
