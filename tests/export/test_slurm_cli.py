"""Issue 26 through the CLI against the real Slurm lab (tests/slurmlab.py), SQLite and
PostgreSQL: ``capacity --slurm`` counts the GRES jobs hold, ``capacity check --slurm`` fails
where gpufleet alone says ok; ``maintenance on`` drains first (``--drain-timeout``,
``--no-drain``) when Slurm is a sync target."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.clitools import Cli, cli_for_backend, flat
from tests.export.conftest import slurm_lab_fleet
from tests.export.test_slurm_reservations import job, sbatch
from tests.slurmlab import SlurmLab

from gpufleet.service.core.fleet import Fleet

pytestmark = pytest.mark.xdist_group("slurm")


@pytest.fixture(params=["sqlite", "postgres"])
def cli(request: pytest.FixtureRequest, tmp_path: Path, slurm: SlurmLab) -> Cli:
    c = cli_for_backend(request, tmp_path, "ops")
    args = c.global_args
    url = args[args.index("--db") + 1] if "--db" in args else None
    fleet = Fleet.open(home=Path(args[args.index("--home") + 1]), url=url, actor="pytest")
    try:
        slurm_lab_fleet(fleet, tmp_path / "lab")
    finally:
        fleet.db.dispose()
    c.env["SLURM_CONF"] = str(slurm.conf)
    return c


def test_capacity_slurm_counts_gres_in_use_and_the_gate_fails(cli: Cli, slurm: SlurmLab) -> None:
    busy = sbatch(slurm, "-w", "gpu-01", "-t", "2", "--gres=gpu:h100:6", "--wrap", "sleep 60")
    job(slurm, busy, ("RUNNING",))
    slurm.run("scontrol", "update", "nodename=gpu-02", "state=drain", "reason=admin: fan")
    doc = cli.json("capacity", "--slurm")
    assert doc["slurm"] == {"rows": [{
        "partition": "gpu", "gpu_type": "h100", "nodes": 3, "gpus": 24, "used": 6,
        "free": 10, "unschedulable": 8, "gpufleet_free": 24}], "missing": []}
    assert "Slurm's GPUs" in cli.run("capacity", "--slurm").stdout
    # gpufleet alone says yes (every host is available); Slurm has 10 free
    cli.run("capacity", "check", "--gpus", "16", "--model", "H100")
    r = cli.run("capacity", "check", "--gpus", "16", "--model", "H100", "--slurm", code=1)
    assert ("Slurm: only 10 H100 GPUs free in partition gpu, 16 needed (6 allocated to "
            "jobs, 8 on nodes that take no jobs)") in flat(r.stderr)
    out = cli.json("capacity", "check", "--gpus", "8", "--model", "H100", "--slurm")
    assert out["ok"] is True and out["slurm"]["free"] == 10
    assert out["slurm"]["partition"] == "gpu"
    cli.run("capacity", "check", "--gpus", "8", "--slurm", "--partition", "nope", code=2)


def test_maintenance_on_drains_first_and_reports_what_blocked(
    cli: Cli, slurm: SlurmLab
) -> None:
    cli.env["GPUFLEET_SYNC_TARGETS"] = "slurm"
    long = sbatch(slurm, "-w", "gpu-01", "-t", "5", "--wrap", "sleep 300")
    job(slurm, long, ("RUNNING",))
    r = cli.run("maintenance", "on", "gpu-01", "--reason", "PSU", "--drain-timeout", "2s",
                code=6)
    assert f"job {long} (root, running" in flat(r.stderr)
    assert "not drained, maintenance not started" in flat(r.stderr)
    assert cli.state("gpu-01") == "available"
    r = cli.run("maintenance", "on", "gpu-01", "--reason", "PSU now", "--no-drain")
    assert "gpu-01: maintenance" in r.stdout and "skipped" in r.stdout
    assert cli.state("gpu-01") == "maintenance"
    r = cli.run("maintenance", "on", "gpu-02", "--reason", "disk", "--drain-timeout", "30s")
    assert "slurm drain: gpu-02: drained" in flat(r.stdout)
    assert slurm.node_states()["gpu-02"] == "drained"


def test_remediate_waits_for_the_drain_and_refuses_when_jobs_outlast_it(
    cli: Cli, slurm: SlurmLab
) -> None:
    cli.env["GPUFLEET_SYNC_TARGETS"] = "slurm"
    long = sbatch(slurm, "-w", "gpu-03", "-t", "5", "--wrap", "sleep 300")
    job(slurm, long, ("RUNNING",))
    r = cli.run("remediate", "gpu-03", "--action", "reboot", "--drain-timeout", "2s", code=6)
    assert "not drained, the remediation did not run" in flat(r.stderr)
    assert f"job {long} (root, running" in flat(r.stderr)
    assert slurm.node_states()["gpu-03"].rstrip("*") in ("mixed", "allocated")  # resumed
    events = cli.json("hosts", "show", "gpu-03")["events"]
    kinds = [e["kind"] for e in events]
    assert "slurm-drain" in kinds and "remediation" not in kinds


def test_allocate_and_release_enforce_the_lease_in_slurm_at_once(
    cli: Cli, slurm: SlurmLab
) -> None:
    cli.env["GPUFLEET_SYNC_TARGETS"] = "slurm"
    r = cli.run("allocate", "--hosts", "1", "--owner", "nobody", "--purpose", "eval",
                "--for", "2h", "--selector", "gpu-02", "--json")
    lease = json.loads(r.stdout)["lease"]["id"]
    assert f"slurm: create gpufleet-lease-{lease}" in r.stderr
    assert f"ReservationName=gpufleet-lease-{lease} " in slurm.run(
        "scontrol", "show", "reservation", "-o")
    st = cli.json("sync", "status")
    assert st["errors"] == [] and [d for d in st["disagreements"] if "lease" in d["what"]] == []
    r = cli.run("leases", "renew", str(lease), "--for", "1h")
    assert f"slurm: update gpufleet-lease-{lease}" in r.stderr
    st = cli.json("sync", "status")  # the renew moved the reservation's end at once
    assert [d for d in st["disagreements"] if "lease" in d["what"]] == []
    r = cli.run("leases", "release", str(lease))
    assert f"slurm: delete gpufleet-lease-{lease}" in r.stderr
    assert "gpufleet-lease" not in slurm.run("scontrol", "show", "reservation", "-o")
