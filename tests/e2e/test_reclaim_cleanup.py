"""A pool's reclaim cleanup (``gpufleet reclaim policy POOL --clean processes,mounts,crontabs``),
issue 24 item 6, on real leftovers of this machine (the tests run as root): a real user's
process, a real tmpfs mounted under a data path, a real crontab in the cron spool. The cleanup
is the function the reclaim script runs on a host (:data:`gpufleet.collect.reclaim.CLEANUP`),
run here by ``sh`` as root, framed and read back as the reclaim reads it. Each action is
reported with its exit status; one that fails (a login user without root or sudo, as the sshd
lab's) still fails the reclaim, and so does GPU memory in use after the cleanup.
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest
from tests.domain.test_reclaim import _host
from tests.sshlab import ensure_lab_user
from tests.sshlab_fixtures import SshLabFactory

from gpufleet.collect.bundle import split_bundle
from gpufleet.collect.reclaim import CLEANUP_SECTION, cleanup_section, read_reclaim
from gpufleet.collect.script import remote_script
from gpufleet.domain.reclaim import CleanupAction, ReclaimFindings, ReclaimPolicy, judge_reclaim
from gpufleet.domain.states import Event
from gpufleet.inventory import load_inventory
from gpufleet.lab.fleet import LabHost, create_fleet
from gpufleet.lab.hostfiles import render_reclaim_sections
from gpufleet.lab.renderers import render_sections
from gpufleet.service.allocation.reclaim import reclaim_hosts
from gpufleet.service.allocation.reclaim_policy import check_clean, set_pool_clean
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.core.lifecycle import transition
from gpufleet.service.hosts.enroll import enroll
from gpufleet.service.hosts.validate import validate
from gpufleet.service.views.hosts import list_events
from gpufleet.store.repo import host_by_name

LESSEE = "gflessee"  # a real account, created once (useradd -r)
SPOOL = Path("/var/spool/cron/crontabs")


def _run_cleanup(data: Path, users: str, actions: str = "processes mounts crontabs") -> str:
    head = (
        f"RECLAIM_DO={shlex.quote(actions)}\nRECLAIM_USERS={shlex.quote(users)}\n"
        f"RECLAIM_LOGIN=root\nRECLAIM_DATA={shlex.quote(str(data))}\n"
    )
    script = head + remote_script(registry=(cleanup_section(),))
    p = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout


def _mounted(path: Path) -> bool:
    return any(
        line.split()[1] == str(path) for line in Path("/proc/mounts").read_text().splitlines()
    )


def test_the_cleanup_kills_unmounts_and_removes_crontabs_and_reports_each(tmp_path: Path) -> None:
    who = ensure_lab_user(LESSEE)
    data = tmp_path / "data"
    team = data / "team-a"
    team.mkdir(parents=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "gpufleet-test", str(team)], check=True
    )
    SPOOL.mkdir(parents=True, exist_ok=True)
    crontab = SPOOL / LESSEE
    crontab.write_text("* * * * * /bin/true\n")
    job = subprocess.Popen(["sleep", "300"], user=who.pw_uid, group=who.pw_gid)
    try:
        assert _mounted(team)
        out = _run_cleanup(data, LESSEE)
        sections = split_bundle(out, "cleanup")
        assert sections[CLEANUP_SECTION].rc == 0
        findings = read_reclaim(sections, "this-host")
        assert findings.cleanup == [
            CleanupAction(action="processes", target=LESSEE, rc=0),
            CleanupAction(action="mounts", target=str(team), rc=0),
            CleanupAction(action="crontabs", target=LESSEE, rc=0),
        ]
        # Each one done for real.
        assert job.wait(timeout=10) == -9
        assert not _mounted(team)
        assert not crontab.exists()
        # Nothing left: a second run has nothing to do.
        assert read_reclaim(split_bundle(_run_cleanup(data, LESSEE), "again"), "h").cleanup == []
    finally:
        if job.poll() is None:
            job.kill()
        if _mounted(team):
            subprocess.run(["umount", str(team)], check=False)
        crontab.unlink(missing_ok=True)


def test_a_failed_action_and_gpu_memory_after_cleanup_still_fail_reclaim() -> None:
    # The sshd lab's login user has neither root nor sudo: every action fails (rc 127 there),
    # is reported, and the reclaim fails with it, even when nothing else is left.
    facts, clean = _host("a100-8x")
    failed = ReclaimFindings(
        **{
            **clean.model_dump(),
            "cleanup": [CleanupAction(action="processes", target="alice", rc=127)],
        }
    )
    verdict = judge_reclaim(facts, failed, ReclaimPolicy(clean=("processes",)))
    assert [i.message for i in verdict.issues] == ["killed the processes of alice FAILED (rc 127)"]
    # The cleanup ran and succeeded, but the GPU report read after it still shows memory in
    # use (a process of another user, a leak): reclaim fails on gpu_memory.
    gpu_facts, _ = _host("a100-8x", "gpu-process")
    done = ReclaimFindings(
        **{
            **clean.model_dump(),
            "cleanup": [CleanupAction(action="processes", target="alice", rc=0)],
        }
    )
    verdict = judge_reclaim(gpu_facts, done, ReclaimPolicy(clean=("processes",)))
    assert {i.check for i in verdict.issues} == {"gpu_processes", "gpu_memory"}


def _answers(h: LabHost, faults: list[str]) -> dict[str, object]:
    h = h.model_copy(update={"faults": faults})
    return {**render_sections(h), **render_reclaim_sections(h)}


@pytest.mark.sshlab
def test_a_pools_cleanup_runs_in_the_reclaim_and_each_action_is_recorded(
    fleet: Fleet, sshlab_factory: SshLabFactory, tmp_path: Path
) -> None:
    """Real sshd lab host, both databases: the pool's cleanup runs first in the reclaim's one
    round trip; the lab's login user has no root and no sudo, so killing alice's processes
    fails (rc 127): recorded as a reclaim-cleanup event, and the reclaim fails on it too."""
    (h,) = create_fleet(1, models=["a100-8x"], faults={}).hosts
    lab = sshlab_factory()
    t = lab.add_host(h.name, _answers(h, []))  # type: ignore[arg-type]
    lab.start()
    (tmp_path / "hosts.ini").write_text(
        f"{h.name} ansible_host={t.address} ansible_port={t.port} ansible_user={t.user} "
        f"ansible_ssh_private_key_file={lab.client_key} gpufleet_gpu_count=8 "
        "gpufleet_pool=train\n"
    )
    enroll(fleet, load_inventory(tmp_path / "hosts.ini"))
    assert validate(fleet).verdicts[0].state == "available"
    assert set_pool_clean(fleet, "train", check_clean("processes,crontabs")) == (
        "processes",
        "crontabs",
    )
    lab.set_sections(h.name, _answers(h, ["lessee-process"]))  # type: ignore[arg-type]
    with fleet.db.session() as s:
        row = host_by_name(s, h.name, for_update=True)
        transition(s, fleet, row, Event.ALLOCATE, "lease of alice")
        transition(s, fleet, row, Event.RELEASE, "lease of alice ended")
    (r,) = reclaim_hosts(fleet, [h.name], lessee_users=["alice"]).hosts
    assert r.state == "quarantined"
    assert "cleanup: killed the processes of alice FAILED (rc 127)" in r.issues
    assert "lessee_processes: still running: alice pid 31337 python" in r.issues
    (ev,) = list_events(fleet, h.name, kind="reclaim-cleanup")
    assert ev["data"] == {"action": "processes", "target": "alice", "rc": 127}
    assert "FAILED" in ev["message"]
    # alice had no crontab: nothing to remove, nothing recorded for it
    assert "crontabs" not in str(list_events(fleet, h.name, kind="reclaim-cleanup"))
