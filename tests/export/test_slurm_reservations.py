"""Issue 26, item 1 (Slurm): leases enforced as reservations in a real Slurm (slurmctld +
slurmd + slurmdbd, tests/slurmlab.py), on SQLite and PostgreSQL. Another user's job (root,
not the lessee) is refused or stays pending; the lessee (``nobody``, a real Unix user) runs
in the reservation; release removes it; someone else's reservation holds the host."""

from __future__ import annotations

import secrets
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select
from tests.export.conftest import slurm_lab_fleet
from tests.slurmlab import SlurmLab

from gpufleet.collect.slurm import SlurmClient
from gpufleet.domain.events import AlarmKind, AlarmSeverity, EventKind
from gpufleet.domain.placement import Request
from gpufleet.domain.slurm_reservations import Reservation, parse_reservations
from gpufleet.domain.sync import Cause, Target
from gpufleet.service.allocation import capacity
from gpufleet.service.allocation.allocation import allocate
from gpufleet.service.allocation.holds import held
from gpufleet.service.allocation.leases import release, renew
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.exports.slurm import slurm_sync
from gpufleet.service.exports.sync import Systems, sync_status
from gpufleet.store.repo import host_by_name
from gpufleet.store.tables import Alarm, Lease
from gpufleet.store.tables import Event as EventRow

pytestmark = pytest.mark.xdist_group("slurm")

LESSEE = "nobody"  # a real Unix user Slurm resolves (uid 65534)


def real_time(fleet: Fleet) -> None:
    """Slurm runs on the wall clock: move the fleet's hand clock there."""
    fleet.clock.now = datetime.now(UTC).replace(microsecond=0)  # type: ignore[attr-defined]


def reservations(lab: SlurmLab) -> dict[str, Reservation]:
    return {r.name: r for r in parse_reservations(
        lab.run("scontrol", "show", "reservation", "-o"))}


def sbatch(lab: SlurmLab, *args: str, user: str | None = None) -> str:
    """Submit ``sleep`` as ``user`` (root when None); the job id."""
    cmd = ["sbatch", "--parsable", "-o", "/dev/null", "-D", "/tmp", *args]
    if user is not None:
        cmd = ["runuser", "-u", user, "--", *cmd]
    r = subprocess.run(cmd, env=lab.env, capture_output=True, text=True, timeout=30, check=False)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().split(";")[0]


def job(lab: SlurmLab, job_id: str, want: tuple[str, ...], timeout: float = 20) -> list[str]:
    """Wait until the job's state is one of ``want``; [state, reason]."""
    deadline = time.monotonic() + timeout
    got = ["", ""]
    while time.monotonic() < deadline:
        out = lab.run("squeue", "-h", "-j", job_id, "-o", "%T|%r", check=False).strip()
        got = out.split("|") if out else ["GONE", ""]
        if got[0] in want:
            return got
        time.sleep(0.3)
    raise AssertionError(f"job {job_id}: {got}, wanted {want}")


@pytest.fixture
def lab_fleet(fleet: Fleet, tmp_path: Path, slurm: SlurmLab) -> Fleet:
    slurm_lab_fleet(fleet, tmp_path / "lab")
    real_time(fleet)
    slurm.root.parent.chmod(0o755)  # the lessee's commands read slurm.conf and the munge socket
    return fleet


def actions(fleet: Fleet) -> list[object]:
    with fleet.db.session() as s:
        return [e.data.get("action") for e in s.scalars(
            select(EventRow).where(EventRow.kind == EventKind.SLURM_RESERVATION)
            .order_by(EventRow.id))]


def test_lease_reservation_blocks_another_user_renew_moves_it_release_removes_it(
    lab_fleet: Fleet, slurm: SlurmLab
) -> None:
    fleet, client = lab_fleet, SlurmClient(conf=slurm.conf)
    lease = allocate(fleet, Request(hosts=1), owner=LESSEE, purpose="train",
                     duration=timedelta(hours=2), selector="gpu-01").lease
    assert lease is not None
    name = f"gpufleet-lease-{lease.id}"
    assert name not in reservations(slurm)  # bookkeeping only until the sync

    rep = slurm_sync(fleet, client)
    assert rep.ok and rep.done == [f"create {name}"]
    res = reservations(slurm)[name]
    assert res.nodes == ("gpu-01",) and res.users == (LESSEE,) and res.state == "ACTIVE"
    assert abs((res.end - lease.ends_at).total_seconds()) <= 1
    assert "IGNORE_JOBS" in res.flags and "SPEC_NODES" in res.flags

    # another user (root, not the lessee) is refused at once, or waits
    r = subprocess.run(["srun", "--immediate=2", "-w", "gpu-01", "-t", "1", "true"],
                       env=slurm.env, capture_output=True, text=True, timeout=30, check=False)
    assert r.returncode != 0 and "not available" in r.stderr, r.stderr
    other = sbatch(slurm, "-w", "gpu-01", "-t", "1", "--wrap", "sleep 1")
    _, reason = job(slurm, other, ("PENDING",))
    assert "ReqNodeNotAvail" in reason or "Reserv" in reason, reason
    time.sleep(2)
    assert job(slurm, other, ("PENDING",))[0] == "PENDING"  # still: the node is reserved
    # the lessee runs in the reservation on the same node
    mine = sbatch(slurm, f"--reservation={name}", "-w", "gpu-01", "-t", "1", "--wrap",
                  "sleep 1", user=LESSEE)
    job(slurm, mine, ("RUNNING", "COMPLETING", "GONE"))
    assert slurm_sync(fleet, client).done == []  # in agreement: nothing to do
    assert [d for d in sync_status(fleet, [Target.SLURM], Systems(slurm=client)).disagreements
            if "reservation" in d.what or "lease" in d.what] == []

    renewed = renew(fleet, lease.id, duration=timedelta(hours=1))
    st = sync_status(fleet, [Target.SLURM], Systems(slurm=client))
    assert [(d.host, d.cause, d.next_sync) for d in st.disagreements] == [
        ("gpu-01", Cause.PENDING, f"update reservation {name}")]
    assert slurm_sync(fleet, client).done == [f"update {name}"]
    assert abs((reservations(slurm)[name].end - renewed.ends_at).total_seconds()) <= 1

    job(slurm, mine, ("GONE",))  # the lessee's job has ended: nothing runs in it now
    release(fleet, lease.id)
    rep = slurm_sync(fleet, client)
    assert rep.ok and f"delete {name}" in rep.done, rep.done
    assert name not in reservations(slurm)
    assert actions(fleet) == ["create", "update", "delete"]


def test_future_lease_reserved_for_its_window_cancel_removes_it(
    lab_fleet: Fleet, slurm: SlurmLab
) -> None:
    fleet, client = lab_fleet, SlurmClient(conf=slurm.conf)
    start = fleet.now() + timedelta(hours=3)
    lease = allocate(fleet, Request(hosts=1), owner=LESSEE, purpose="later", start=start,
                     duration=timedelta(hours=1), selector="gpu-02").lease
    assert lease is not None and lease.state == "reserved"
    name = f"gpufleet-lease-{lease.id}"
    assert slurm_sync(fleet, client).done == [f"create {name}"]
    res = reservations(slurm)[name]
    assert res.state == "INACTIVE" and res.nodes == ("gpu-02",)
    assert abs((res.start - start).total_seconds()) <= 1
    assert abs((res.end - lease.ends_at).total_seconds()) <= 1
    # work that ends before the window runs now; work that would run into it waits
    short = sbatch(slurm, "-w", "gpu-02", "-t", "5", "--wrap", "sleep 1")
    job(slurm, short, ("RUNNING", "COMPLETING", "GONE"))
    endless = sbatch(slurm, "-w", "gpu-02", "--wrap", "sleep 1")  # no limit: into the window
    assert job(slurm, endless, ("PENDING",))[0] == "PENDING"
    release(fleet, lease.id, "not needed")  # a reservation is cancelled
    assert slurm_sync(fleet, client).done == [f"delete {name}"]
    assert name not in reservations(slurm)


def test_foreign_reservation_holds_the_host_until_it_is_gone(
    lab_fleet: Fleet, slurm: SlurmLab
) -> None:
    fleet, client = lab_fleet, SlurmClient(conf=slurm.conf)
    slurm.run("scontrol", "create", "reservation", "reservationname=admin-fw", "nodes=gpu-03",
              "users=root", "starttime=now+1hour", "duration=60")
    rep = slurm_sync(fleet, client)
    assert rep.ok and rep.done == []  # never touched: not gpufleet's
    assert rep.reservations is not None
    assert list(rep.reservations.held) == ["gpu-03"]
    assert "admin-fw" in rep.reservations.held["gpu-03"]
    with fleet.db.session() as s:
        h3 = host_by_name(s, "gpu-03")
        alarms = s.scalars(select(Alarm).where(
            Alarm.kind == AlarmKind.SLURM_FOREIGN_RESERVATION, Alarm.closed_at.is_(None))).all()
        assert [a.host_id for a in alarms] == [h3.id]
        assert "admin-fw" in held(s, [h3.id])[h3.id]  # campaigns skip it
    # placement and capacity treat it as held
    refused = allocate(fleet, Request(hosts=1), owner="bob", purpose="x",
                       duration=timedelta(hours=1), selector="gpu-03")
    assert not refused.ok
    chk = capacity.check(fleet, gpus=24, model=None, profile=None, headroom=0.0, selector=None)
    assert not chk.ok and chk.allocatable == 16
    st = sync_status(fleet, [Target.SLURM], Systems(slurm=client))
    assert [(d.host, d.cause) for d in st.disagreements] == [("gpu-03", Cause.FOREIGN)]
    assert slurm_sync(fleet, client).done == []  # seen again: still one alarm
    slurm.run("scontrol", "delete", "reservationname=admin-fw")
    slurm_sync(fleet, client)
    with fleet.db.session() as s:
        assert s.scalar(select(Alarm).where(
            Alarm.kind == AlarmKind.SLURM_FOREIGN_RESERVATION,
            Alarm.closed_at.is_(None))) is None
        assert held(s, [host_by_name(s, "gpu-03").id]) == {}
    assert allocate(fleet, Request(hosts=1), owner="bob", purpose="x",
                    duration=timedelta(hours=1), selector="gpu-03").ok


def test_reservation_slurm_refuses_is_an_error_and_a_critical_alarm(
    lab_fleet: Fleet, slurm: SlurmLab
) -> None:
    fleet, client = lab_fleet, SlurmClient(conf=slurm.conf)
    lease = allocate(fleet, Request(hosts=1), owner="no-such-user-26", purpose="x",
                     duration=timedelta(hours=1), selector="gpu-01").lease
    assert lease is not None
    name = f"gpufleet-lease-{lease.id}"
    rep = slurm_sync(fleet, client)
    assert not rep.ok and rep.errors and rep.errors[0].startswith(f"{name}: create: ")
    assert name not in reservations(slurm)
    with fleet.db.session() as s:
        alarm = s.scalar(select(Alarm).where(Alarm.kind == AlarmKind.SLURM_RESERVATION))
        assert alarm is not None and alarm.severity == AlarmSeverity.CRITICAL
        assert alarm.host_id == host_by_name(s, "gpu-01").id and alarm.closed_at is None
        assert f"lease {lease.id} not enforced in Slurm" in alarm.message
    st = sync_status(fleet, [Target.SLURM], Systems(slurm=client))
    assert [(d.host, d.next_sync) for d in st.disagreements] == [
        ("gpu-01", f"create reservation {name}")]
    # the lessee is fixed (users given): the next sync enforces it and closes the alarm
    with fleet.db.session() as s:
        s.get_one(Lease, lease.id).users = [LESSEE]
    assert slurm_sync(fleet, client).done == [f"create {name}"]
    with fleet.db.session() as s:
        alarm = s.scalar(select(Alarm).where(Alarm.kind == AlarmKind.SLURM_RESERVATION))
        assert alarm is not None and alarm.closed_at is not None


def test_lease_reservation_carries_its_users_and_account(
    lab_fleet: Fleet, slurm: SlurmLab
) -> None:
    """A lease naming a Slurm account (``allocate --account``, an account of slurmdbd made
    with sacctmgr here) reserves for its users AND that account (``Accounts=``: Slurm admits
    a job only when both match); a hand edit of the accounts is drift the next sync undoes."""
    fleet, client = lab_fleet, SlurmClient(conf=slurm.conf)
    tag = secrets.token_hex(3)  # the lab's slurmdbd outlives a test: accounts of this run
    proj, ops = f"proj-{tag}", f"ops-{tag}"
    slurm.run("sacctmgr", "-i", "add", "account", f"{proj},{ops}", "description=issue 26",
              "organization=gpufleet")
    try:
        slurm.run("sacctmgr", "-i", "add", "user", LESSEE, f"account={proj},{ops}")
        slurm.run("sacctmgr", "-i", "add", "user", "root", f"account={proj}")
        lease = allocate(fleet, Request(hosts=1), owner="team-26", purpose="train",
                         duration=timedelta(hours=2), selector="gpu-01", users=[LESSEE],
                         account=proj).lease
        assert lease is not None and lease.request["account"] == proj
        name = f"gpufleet-lease-{lease.id}"
        assert slurm_sync(fleet, client).done == [f"create {name}"]
        res = reservations(slurm)[name]
        assert res.users == (LESSEE,) and res.accounts == (proj,), res

        # the lessee under the lease's account runs in it
        mine = sbatch(slurm, f"--reservation={name}", f"--account={proj}", "-w", "gpu-01",
                      "-t", "1", "--wrap", "sleep 1", user=LESSEE)
        job(slurm, mine, ("RUNNING", "COMPLETING", "GONE"))
        # the account alone does not let another user in
        r = subprocess.run(["sbatch", "--parsable", "-o", "/dev/null", "-D", "/tmp",
                            f"--reservation={name}", f"--account={proj}", "-w", "gpu-01",
                            "-t", "1", "--wrap", "sleep 1"], env=slurm.env,
                           capture_output=True, text=True, timeout=30, check=False)
        assert r.returncode != 0 and "reservation" in r.stderr.lower(), r.stdout + r.stderr

        slurm.run("scontrol", "update", f"reservationname={name}", f"accounts={ops}")
        st = sync_status(fleet, [Target.SLURM], Systems(slurm=client))
        assert [(d.host, d.cause, d.what) for d in st.disagreements] == [
            ("gpu-01", Cause.PENDING,
             f"reservation {name} differs from lease {lease.id}: accounts {ops} -> {proj}")]
        assert slurm_sync(fleet, client).done == [f"update {name}"]
        assert reservations(slurm)[name].accounts == (proj,)
        job(slurm, mine, ("GONE",))
        release(fleet, lease.id)
        assert slurm_sync(fleet, client).done == [f"delete {name}"]
    finally:
        for user in (LESSEE, "root"):
            slurm.run("sacctmgr", "-i", "delete", "user", user, f"account={proj},{ops}",
                      check=False)
        slurm.run("sacctmgr", "-i", "delete", "account", f"{proj},{ops}", check=False)
