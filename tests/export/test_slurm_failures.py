"""``gpufleet failures import --slurm``: failed jobs from ``sacct --json`` become failure
records and show up in ``failures report`` (SQLite and PostgreSQL).

The Slurm lab runs no slurmdbd (``sacct --json`` refuses to work without one: "slurm not
configured with slurmdbd"), so ``sacct`` here is a stand-in script on the client's path that
prints output captured from a REAL ``sacct --json`` (Slurm 22.05 with slurmdbd, see
tests/fixtures/captured/slurm/PROVENANCE.md) and records its arguments."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from tests.export.conftest import slurm_lab_fleet

from gpufleet.collect.slurm import SlurmClient
from gpufleet.service.failures import failure_report
from gpufleet.service.fleet import Fleet
from gpufleet.service.operations import remove_host
from gpufleet.service.slurm import import_slurm_failures
from gpufleet.testing import FakeClock

CAPTURE = Path(__file__).resolve().parent.parent / "fixtures" / "captured" / "slurm"


def sacct_replay(where: Path) -> Path:
    bin_dir = where / "bin"
    bin_dir.mkdir(parents=True)
    script = bin_dir / "sacct"
    script.write_text(f'#!/bin/sh\necho "$@" > {where}/args\ncat {CAPTURE}/sacct-22.05.json\n')
    script.chmod(0o755)
    return bin_dir


def test_failed_slurm_jobs_show_up_in_the_failures_report(fleet: Fleet, tmp_path: Path) -> None:
    slurm_lab_fleet(fleet, tmp_path / "lab")
    assert isinstance(fleet.clock, FakeClock)
    fleet.clock.now = datetime(2026, 12, 3, 0, 0, tzinfo=UTC)  # just after the captured jobs
    client = SlurmClient(bin_dir=sacct_replay(tmp_path))

    rep = import_slurm_failures(fleet, timedelta(days=2), client)
    assert rep.errors == [] and rep.recorded == 6  # 5 failed jobs, job 6 on two nodes
    args = (tmp_path / "args").read_text().split()
    assert args[:2] == ["--json", "-a"] and args[2] == "-S"

    report = failure_report(fleet, timedelta(days=7))
    by_host = {g.host: g for g in report.groups}
    assert {h: (len(g.failures), g.jobs) for h, g in by_host.items()} == {
        "gpu-01": (3, 3), "gpu-03": (2, 2), "gpu-02": (1, 1)}
    msgs = sorted(f.message for f in by_host["gpu-02"].failures)
    assert msgs == ["slurm job 6 (wrap) FAILED, reason ReqNodeNotAvail on gpu-[01-02]"]

    again = import_slurm_failures(fleet, timedelta(days=2), client)
    assert again.recorded == 0 and again.errors == []  # a job is imported once per host


def test_jobs_on_nodes_gpufleet_does_not_know_are_reported(fleet: Fleet, tmp_path: Path) -> None:
    # only gpu-01 is a gpufleet host here: the jobs on gpu-02/gpu-03 are named, not lost
    slurm_lab_fleet(fleet, tmp_path / "lab")
    remove_host(fleet, "gpu-02", "test")
    remove_host(fleet, "gpu-03", "test")
    client = SlurmClient(bin_dir=sacct_replay(tmp_path))
    rep = import_slurm_failures(fleet, timedelta(days=2), client)
    assert rep.recorded == 3
    assert len(rep.errors) == 3 and all("gpu-0" in e for e in rep.errors)
    assert "sacct: job 6 on gpu-02: no host named 'gpu-02'" in rep.errors
