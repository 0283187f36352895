"""The lessee's users recorded on a lease (``allocate --user``) are the users reclaim looks
for, on real sshd lab hosts, both databases. Every host is left with a process and a crontab
of ``alice`` (UID 1001) when its lease ends:

* a lease of ``bob``: alice is not the lessee, the host comes back ``available``;
* a lease of ``alice``: quarantined, her process and crontab named;
* a lease with no users: the fallback (any UID >= 1000) finds her, and the evidence says the
  fallback was used;
* ``gpufleet reclaim`` by hand (after a crash between release and reclaim) checks the users
  of the lease that last held the host.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select
from tests.sshlab_fixtures import SshLabFactory

from gpufleet.domain.events import EvidenceKind
from gpufleet.domain.leases import LeaseState
from gpufleet.domain.placement import Request
from gpufleet.domain.states import Event
from gpufleet.inventory import load_inventory
from gpufleet.lab.fleet import LabHost, create_fleet
from gpufleet.lab.hostfiles import render_reclaim_sections
from gpufleet.lab.renderers import render_sections
from gpufleet.service.allocation.allocation import allocate
from gpufleet.service.allocation.leases import release
from gpufleet.service.allocation.reclaim import FALLBACK_NOTE, HostReclaim, reclaim_selected
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.core.lifecycle import transition
from gpufleet.service.hosts.enroll import enroll
from gpufleet.service.hosts.validate import validate
from gpufleet.store.repo import host_by_name
from gpufleet.store.tables import EvidenceRow, Host, Lease

pytestmark = pytest.mark.sshlab


def _answers(h: LabHost) -> dict[str, object]:
    return {**render_sections(h), **render_reclaim_sections(h)}


def _lease(fleet: Fleet, host: str, users: list[str] | None) -> int:
    got = allocate(
        fleet,
        Request(hosts=1),
        owner="team-a",
        purpose="finetune",
        duration=timedelta(hours=24),
        selector=host,
        users=users,
    )
    assert got.lease is not None and got.lease.hosts == [host]
    assert got.lease.users == users
    return got.lease.id


def evidence_kinds(fleet: Fleet, host: str) -> dict[str, object]:
    with fleet.db.session() as s:
        h = host_by_name(s, host)
        row = s.scalars(
            select(EvidenceRow)
            .where(EvidenceRow.host_id == h.id, EvidenceRow.kind == EvidenceKind.RECLAIM)
            .order_by(EvidenceRow.id.desc())
        ).first()
        assert row is not None
        return dict(row.data)


def test_reclaim_checks_the_users_recorded_on_the_lease(
    fleet: Fleet, sshlab_factory: SshLabFactory, tmp_path: Path
) -> None:
    lf = create_fleet(4, models=["a100-8x"], faults={})
    lab = sshlab_factory()
    targets = {h.name: lab.add_host(h.name, _answers(h)) for h in lf.hosts}  # type: ignore[arg-type]
    lab.start()
    lines = ["[gpu]"] + [
        f"{n} ansible_host={t.address} ansible_port={t.port} ansible_user={t.user}"
        for n, t in targets.items()
    ]
    lines += ["", "[gpu:vars]", f"ansible_ssh_private_key_file={lab.client_key}"]
    lines += ["gpufleet_gpu_count=8"]
    (tmp_path / "hosts.ini").write_text("\n".join(lines) + "\n")
    enroll(fleet, load_inventory(tmp_path / "hosts.ini"))
    assert {v.state for v in validate(fleet).verdicts} == {"available"}
    other, lessee, unrecorded, crashed = (h.name for h in lf.hosts)
    leases = {
        other: _lease(fleet, other, ["bob"]),
        lessee: _lease(fleet, lessee, ["alice", "carol"]),
        unrecorded: _lease(fleet, unrecorded, None),
        crashed: _lease(fleet, crashed, ["alice"]),
    }
    # While leased, alice started a process and a crontab on every host.
    for h in lf.hosts:
        left = h.model_copy(update={"faults": ["lessee-process", "lessee-crontab"]})
        lab.set_sections(h.name, _answers(left))  # type: ignore[arg-type]

    outcome: dict[str, HostReclaim] = {}
    for host in (other, lessee, unrecorded):
        out = release(fleet, leases[host])
        assert out.reclaiming == [host]
        (outcome[host],) = out.reclaim.hosts  # type: ignore[attr-defined]

    assert outcome[other].state == "available", outcome[other].summary
    ev = evidence_kinds(fleet, other)
    assert ev["lessee_users"] == ["bob"] and ev["lessee_rule"] == "the lease's users: bob"

    assert outcome[lessee].state == "quarantined"
    assert "lessee_processes: still running: alice pid 31337 python" in outcome[lessee].issues
    assert "lessee_crontabs: crontabs left: alice" in outcome[lessee].issues
    assert not any(FALLBACK_NOTE in i for i in outcome[lessee].issues)

    assert outcome[unrecorded].state == "quarantined"
    assert (
        "lessee_processes: still running: alice pid 31337 python" + FALLBACK_NOTE
        in outcome[unrecorded].issues
    )
    ev = evidence_kinds(fleet, unrecorded)
    assert ev["lessee_users"] is None
    assert str(ev["lessee_rule"]).startswith("no users recorded with the lease: every user")

    # A crash between the release and its reclaim: the lease ended, the host in reclaiming.
    with fleet.db.session() as s:
        lease = s.get(Lease, leases[crashed])
        assert lease is not None
        lease.state = LeaseState.RELEASED
        for lh in lease.hosts:
            lh.holding = False
        transition(s, fleet, host_by_name(s, crashed, for_update=True), Event.RELEASE, "t")
    (r,) = reclaim_selected(fleet, crashed).hosts
    assert r.state == "quarantined" and not any(FALLBACK_NOTE in i for i in r.issues)
    ev = evidence_kinds(fleet, crashed)
    assert ev["lease_id"] == leases[crashed] and ev["lessee_users"] == ["alice"]
    with fleet.db.session() as s:
        states = {h.name: h.state.value for h in s.scalars(select(Host))}
    assert states == {
        other: "available",
        lessee: "quarantined",
        unrecorded: "quarantined",
        crashed: "quarantined",
    }
