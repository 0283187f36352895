"""Reclaim on real sshd lab hosts, both databases: released hosts go through the reclaim
checks over SSH (one round trip: collection + reclaim sections). A compute process left on a
GPU and a mount left under a data path quarantine the host with the findings stored as
``reclaim`` evidence; a clean host goes back to ``available``."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select
from tests.sshlab_fixtures import SshLabFactory

from gpufleet.domain.events import EvidenceKind
from gpufleet.domain.health import Fault
from gpufleet.domain.states import Event
from gpufleet.inventory import load_inventory
from gpufleet.lab.fleet import LabHost, create_fleet
from gpufleet.lab.renderers import render_reclaim_sections, render_sections
from gpufleet.service.allocation.reclaim import reclaim_hosts, reclaim_selected
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.core.lifecycle import transition
from gpufleet.service.hosts.enroll import enroll
from gpufleet.service.hosts.validate import validate
from gpufleet.store.repo import host_by_name
from gpufleet.store.tables import EvidenceRow, Host

pytestmark = pytest.mark.sshlab


def _answers(h: LabHost) -> dict[str, object]:
    return {**render_sections(h), **render_reclaim_sections(h)}


def _release(fleet: Fleet, names: list[str]) -> None:
    """Allocate and release (what the leases service does) -> reclaiming."""
    for name in names:
        with fleet.db.session() as s:
            h = host_by_name(s, name, for_update=True)
            transition(s, fleet, h, Event.ALLOCATE, "test lease")
            transition(s, fleet, h, Event.RELEASE, "test lease released")


def test_leftovers_quarantine_with_evidence_and_a_clean_host_comes_back(
    fleet: Fleet, sshlab_factory: SshLabFactory, tmp_path: Path
) -> None:
    lf = create_fleet(3, models=["a100-8x"], faults={})
    clean, gpu_left, mount_left = lf.hosts
    lab = sshlab_factory()
    targets = {h.name: lab.add_host(h.name, _answers(h)) for h in lf.hosts}  # type: ignore[arg-type]
    lab.start()
    lines = ["[gpu]"] + [
        f"{n} ansible_host={t.address} ansible_port={t.port} ansible_user={t.user}"
        for n, t in targets.items()
    ]
    lines += [
        "",
        "[gpu:vars]",
        f"ansible_ssh_private_key_file={lab.client_key}",
        "gpufleet_gpu_count=8",
    ]
    (tmp_path / "hosts.ini").write_text("\n".join(lines) + "\n")
    enroll(fleet, load_inventory(tmp_path / "hosts.ini"))
    states = {v.host: v.state for v in validate(fleet).verdicts}
    assert states == dict.fromkeys(targets, "available")

    # The leases end; the lessee left a python process on a GPU of one host and an NFS mount
    # under /data on another (lab faults rendered into the served sections).
    for h, fault in ((gpu_left, "gpu-process"), (mount_left, "stale-mount")):
        lab.set_sections(h.name, _answers(h.model_copy(update={"faults": [fault]})))  # type: ignore[arg-type]
    _release(fleet, list(targets))

    rep = reclaim_hosts(fleet, list(targets), lease_id=7)
    by = {r.host: r for r in rep.hosts}
    assert by[clean.name].state == "available" and by[clean.name].ok, by[clean.name].summary
    assert by[clean.name].profiles
    assert by[gpu_left.name].state == "quarantined"
    assert "gpu_processes: GPU" in by[gpu_left.name].summary
    assert "pid 58130 /usr/bin/python" in by[gpu_left.name].summary
    assert "gpu_memory" in by[gpu_left.name].summary  # 20322 MiB still in use
    assert by[mount_left.name].state == "quarantined"
    assert "/data/team-a (nfs4 10.0.0.5:/export/team-a) left under /data" in (
        by[mount_left.name].summary
    )
    assert not rep.ok

    with fleet.db.session() as s:
        hosts = {h.name: h for h in s.scalars(select(Host))}
        assert hosts[gpu_left.name].fault is Fault.RECLAIM_FAILED
        assert hosts[clean.name].fault is None and hosts[clean.name].validated_until is not None
        names = {h.id: n for n, h in hosts.items()}
        rows = s.scalars(select(EvidenceRow).where(EvidenceRow.kind == EvidenceKind.RECLAIM))
        ev = {names[row.host_id]: row for row in rows}
        assert set(ev) == set(targets)
        assert ev[clean.name].passed is True and ev[clean.name].data["lease_id"] == 7
        assert ev[mount_left.name].passed is False
        mounts = ev[mount_left.name].data["findings"]["mounts"]
        assert {
            "device": "10.0.0.5:/export/team-a",
            "mountpoint": "/data/team-a",
            "fstype": "nfs4",
        } in mounts
        assert any("gpu_processes" in i for i in ev[gpu_left.name].data["issues"])

    # `gpufleet reclaim` acts only on hosts in reclaiming or owing a passing reclaim: the
    # clean host is reported, untouched; the two that failed are checked again (issue 24),
    # and their leftovers, still there, keep them quarantined.
    again = {r.host: r for r in reclaim_selected(fleet, ",".join(targets)).hosts}
    assert again[clean.name].summary.startswith("skipped: not in reclaiming")
    for h in (gpu_left, mount_left):
        assert again[h.name].state == "quarantined" and not again[h.name].ok
    assert "left under /data" in again[mount_left.name].summary


def test_a_host_that_cannot_answer_the_reclaim_sections_is_quarantined(
    fleet: Fleet, sshlab_factory: SshLabFactory, tmp_path: Path
) -> None:
    """Fail closed: without ps, the mount table and the crontab spool, nothing passes."""
    (h,) = create_fleet(1, models=["a100-8x"], faults={}).hosts
    lab = sshlab_factory()
    t = lab.add_host(h.name, render_sections(h))  # no reclaim sections served
    lab.start()
    (tmp_path / "hosts.ini").write_text(
        f"{h.name} ansible_host={t.address} ansible_port={t.port} ansible_user={t.user} "
        f"ansible_ssh_private_key_file={lab.client_key} gpufleet_gpu_count=8\n"
    )
    enroll(fleet, load_inventory(tmp_path / "hosts.ini"))
    assert validate(fleet).verdicts[0].state == "available"
    _release(fleet, [h.name])
    (r,) = reclaim_hosts(fleet, [h.name]).hosts
    assert r.state == "quarantined"
    assert "lessee_processes: cannot list the processes" in r.issues
    assert "data_mounts: cannot read the mount table" in r.issues
