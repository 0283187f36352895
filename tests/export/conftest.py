"""Fixtures for the export tests.

Slurm section (tests/export/test_slurm*.py): one real Slurm cluster per test session
(:class:`tests.slurmlab.SlurmLab`), started from ``gpufleet slurm export`` of a validated
3-host lab fleet; tests using it are marked ``xdist_group("slurm")`` so one worker runs them.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.slurmlab import SlurmLab, SlurmLabError, ensure_slurm

from gpufleet.lab.demo import enroll_lab
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.exports.slurm import write_slurm_config
from gpufleet.service.hosts.validate import validate

# ---------------------------------------------------------------------------- Slurm section

SLURM_HOSTS = 3


def slurm_lab_fleet(fleet: Fleet, where: Path) -> None:
    """Enroll and validate the lab fleet whose hosts are the Slurm lab's nodes
    (gpu-01..gpu-03, 8x H100; deterministic, so every test gets the same facts)."""
    enroll_lab(fleet, where, SLURM_HOSTS, models=["h100-8x"], faults={})
    validate(fleet)


@pytest.fixture(scope="session")
def slurm_lab() -> Iterator[SlurmLab]:
    """A running Slurm cluster whose nodes are defined by ``gpufleet slurm export``."""
    try:
        ensure_slurm()
    except SlurmLabError as exc:
        pytest.fail(f"slurm lab unavailable: {exc}")
    root = Path(tempfile.mkdtemp(prefix="gpufleet-slurmlab-"))
    lab = SlurmLab(root / "slurm", accounting=True)
    fleet = Fleet.open(home=root / "home", url=f"sqlite:///{root / 'fleet.db'}", actor="pytest")
    try:
        slurm_lab_fleet(fleet, root / "fleet")
        conf, gres = write_slurm_config(fleet, root / "export", gpu_files=lab.gpu_files())
        node_lines = [ln for ln in conf.read_text().splitlines() if ln.startswith("NodeName=")]
        lab.start(node_lines, gres.read_text())
    finally:
        fleet.db.dispose()
    try:
        yield lab
    finally:
        lab.stop()
        shutil.rmtree(root, ignore_errors=True)


def reset_slurm_lab(lab: SlurmLab) -> None:
    """Every node resumed (no drain left by an earlier test), no job and no reservation left
    (issue 26's tests make them), every node idle."""
    jobs = lab.run("squeue", "-h", "-o", "%i").split()
    if jobs:
        lab.run("scancel", *jobs, check=False)
    deadline = time.monotonic() + 60  # a cancelled job completes first: a node that is
    while lab.run("squeue", "-h", "-o", "%i").split():  # COMPLETING cannot resume
        if time.monotonic() > deadline:
            break
        time.sleep(0.5)
    for res in lab.run("scontrol", "show", "reservation", "-o").splitlines():
        if res.startswith("ReservationName="):
            name = res.split()[0].removeprefix("ReservationName=")
            lab.run("scontrol", "delete", f"reservationname={name}", check=False)
    for node, state in lab.node_states().items():
        if state.rstrip("*~#") not in ("idle", "allocated", "mixed"):
            lab.run("scontrol", "update", f"nodename={node}", "state=resume", check=False)
    lab.wait_idle(lab.nodes)


@pytest.fixture
def slurm(slurm_lab: SlurmLab) -> SlurmLab:
    """The session's cluster reset (:func:`reset_slurm_lab`)."""
    reset_slurm_lab(slurm_lab)
    return slurm_lab
