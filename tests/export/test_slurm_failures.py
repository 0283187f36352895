"""``gpufleet failures import --slurm`` against a real ``sacct --json``: the session's Slurm lab
runs with accounting (``slurmdbd`` on a MariaDB database of its own, tests/slurmlab.py), jobs
really run and fail on the lab's nodes, and the failures show up in ``failures report`` on the
hosts they ran on (SQLite and PostgreSQL).

Slurm 22.05's JSON carries no exit code (every job says ``SUCCESS 0``, see
tests/fixtures/captured/slurm/PROVENANCE.md): a job is a failure by its state, FAILED here."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from tests.clitools import Cli, flat
from tests.export.conftest import reset_slurm_lab, slurm_lab_fleet
from tests.slurmlab import SlurmLab

from gpufleet.collect.slurm import SlurmClient
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.exports.slurm import import_slurm_failures
from gpufleet.service.health.failures import failure_report
from gpufleet.service.hosts.operations import remove_host
from gpufleet.testing import FakeClock

pytestmark = pytest.mark.xdist_group("slurm")


@dataclass(frozen=True)
class Jobs:
    """Jobs that ran on the lab: two failed, one completed, one cancelled."""

    exit3_on_02: str
    exit5_on_01_03: str
    ok_on_01: str
    cancelled_on_02: str
    last_end: float  # epoch seconds of the latest end among them


def _sbatch(lab: SlurmLab, *args: str) -> str:
    # the job's output in the lab, not in the directory the tests run from
    out = lab.run("sbatch", "--parsable", "-J", "gpufleet-test",
                  "-o", str(lab.root / "log" / "job-%j.out"), *args)
    return out.strip().split(";")[0]


@pytest.fixture(scope="module")
def jobs(slurm_lab: SlurmLab) -> Jobs:
    """Run the jobs once for the module and wait until slurmdbd has recorded every one."""
    reset_slurm_lab(slurm_lab)  # no drain, job or reservation left by an earlier test
    submitted = datetime.now(UTC) - timedelta(minutes=1)
    a = _sbatch(slurm_lab, "-w", "gpu-02", "--wrap", "exit 3")
    b = _sbatch(slurm_lab, "-N", "2", "-w", "gpu-01,gpu-03", "--wrap", "exit 5")
    c = _sbatch(slurm_lab, "-w", "gpu-01", "--wrap", "exit 0")
    d = _sbatch(slurm_lab, "-w", "gpu-02", "--wrap", "sleep 600")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # cancel it once it runs (it then has a node)
        if slurm_lab.run("squeue", "-h", "-j", d, "-o", "%T").strip() == "RUNNING":
            break
        time.sleep(0.2)
    slurm_lab.run("scancel", d)
    # until the window query of the import finds them too (see SlurmLab.wait_sacct)
    seen = slurm_lab.wait_sacct([a, b, c, d], since=submitted)
    states = {j: str(seen[j]["state"]["current"]) for j in (a, b, c, d)}  # type: ignore[index]
    assert states == {a: "FAILED", b: "FAILED", c: "COMPLETED", d: "CANCELLED"}, states
    ends = [int(seen[j]["time"]["end"]) for j in (a, b, c, d)]  # type: ignore[index]
    return Jobs(a, b, c, d, float(max(ends)))


def _cli(fleet: Fleet, tmp_path: Path, lab: SlurmLab) -> Cli:
    env: dict[str, str | None] = {"GPUFLEET_ACTOR": "slurm-failures-test",
                                  "GPUFLEET_DATABASE_URL": None, "GPUFLEET_HOME": None,
                                  "SLURM_CONF": str(lab.conf)}
    return Cli(["--home", str(tmp_path / "cli-home"), "--db", fleet.db.url], tmp_path, env)


def test_failed_jobs_from_live_sacct_show_up_in_failures_report_on_their_hosts(
    fleet: Fleet, tmp_path: Path, slurm_lab: SlurmLab, jobs: Jobs
) -> None:
    slurm_lab_fleet(fleet, tmp_path / "lab")
    cli = _cli(fleet, tmp_path, slurm_lab)

    rep = cli.json("failures", "import", "--slurm", "--since", "1h")
    assert rep["errors"] == [], rep
    assert rep["recorded"] >= 3  # exactly 3 when no other test ran failing jobs

    # failures report (the CLI, on the real clock): one failure from one job on each host
    report = cli.json("failures", "report", "--since", "1d")
    counts = {h["host"]: (h["failures"], h["jobs"]) for h in report["hosts"]}
    assert counts == {"gpu-01": (1, 1), "gpu-02": (1, 1), "gpu-03": (1, 1)}, counts
    text = flat(cli.run("failures", "report", "--since", "1d").stdout)
    for host in ("gpu-01", "gpu-02", "gpu-03"):
        assert f"{host}: 1 failure from 1 job" in text, text

    # which job on which host: the failed jobs on the nodes they ran on, nothing else
    assert isinstance(fleet.clock, FakeClock)
    fleet.clock.now = datetime.now(UTC)
    mine = {jobs.exit3_on_02, jobs.exit5_on_01_03, jobs.ok_on_01, jobs.cancelled_on_02}
    got = {g.host: sorted(f.job for f in g.failures if f.job in mine)
           for g in failure_report(fleet, timedelta(days=1)).groups}
    assert got == {"gpu-02": [jobs.exit3_on_02], "gpu-01": [jobs.exit5_on_01_03],
                   "gpu-03": [jobs.exit5_on_01_03]}, got
    messages = {(g.host, f.job): f.message
                for g in failure_report(fleet, timedelta(days=1)).groups for f in g.failures}
    assert messages[("gpu-02", jobs.exit3_on_02)] == (
        f"slurm job {jobs.exit3_on_02} (gpufleet-test) FAILED on gpu-02")
    assert messages[("gpu-03", jobs.exit5_on_01_03)].endswith("FAILED on gpu-[01,03]")

    again = cli.json("failures", "import", "--slurm", "--since", "1h")
    assert again == {"recorded": 0, "errors": []}  # a job is imported once per host


def test_a_window_without_jobs_imports_nothing_and_unknown_nodes_are_named(
    fleet: Fleet, tmp_path: Path, slurm_lab: SlurmLab, jobs: Jobs
) -> None:
    slurm_lab_fleet(fleet, tmp_path / "lab")
    client = SlurmClient(conf=slurm_lab.conf)
    assert isinstance(fleet.clock, FakeClock)

    # a window that starts after every job ended: sacct says "Nothing found" (error 9003)
    deadline = time.monotonic() + 30
    while time.time() < jobs.last_end + 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    fleet.clock.now = datetime.now(UTC)
    empty = import_slurm_failures(fleet, timedelta(seconds=1), client)
    assert (empty.recorded, empty.errors) == (0, [])

    # only gpu-01 is a gpufleet host now: the jobs on gpu-02/gpu-03 are named, not lost
    remove_host(fleet, "gpu-02", "test")
    remove_host(fleet, "gpu-03", "test")
    rep = import_slurm_failures(fleet, timedelta(hours=1), client)
    # (each with the nearest known names: "(did you mean gpu-01?)")
    for said in (f"sacct: job {jobs.exit3_on_02} on gpu-02: no host named 'gpu-02'",
                 f"sacct: job {jobs.exit5_on_01_03} on gpu-03: no host named 'gpu-03'"):
        assert [e for e in rep.errors if e.startswith(said)], rep.errors
    assert rep.recorded >= 1  # job exit5 on gpu-01
