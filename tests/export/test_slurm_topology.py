"""Issue 27 item 6 (Slurm): ``gpufleet slurm export --topology`` writes one switch per NVLink
domain (``topology/tree``), loaded by the real slurmctld 22.05 (tests/slurmlab.py), and one
``BlockName=`` per domain for ``topology/block``."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from tests.clitools import Cli, cli_for_backend
from tests.slurmlab import SlurmLab, SlurmLabError, ensure_slurm

pytestmark = pytest.mark.xdist_group("slurm")

NODES = "nvl01-t01,nvl01-t02,nvl02-t01"


@pytest.fixture(params=["sqlite"])  # the export reads hosts only: one database suffices
def c(request: pytest.FixtureRequest, tmp_path: Path) -> Cli:
    return cli_for_backend(request, tmp_path, "slurm-topology")


def test_topology_conf_one_switch_per_domain_loads_in_slurmctld(c: Cli, tmp_path: Path) -> None:
    lab = c.tmp / "lab"
    c.run("lab", "create", "--rack", "gb200-nvl72", "--racks", "2", "--dir", str(lab))
    c.run("enroll", "-i", str(lab / "inventory.ini"))
    c.run("validate", NODES)
    out = tmp_path / "export"
    slurm = SlurmLab(tmp_path / "slurm")
    c.run("slurm", "export", NODES, "--out", str(out), "--topology",
          "--gpu-files", slurm.gpu_files())
    domains = {r: c.json("racks", "show", f"{r}-t01")["nvl_domain"] for r in ("nvl01", "nvl02")}
    tree = (out / "topology.conf").read_text().splitlines()
    switches = sorted(ln for ln in tree if ln.startswith("SwitchName=nvl_"))
    assert len(switches) == 2 and all(len(ln.split()) == 2 for ln in switches)
    assert sorted(ln.split()[1] for ln in switches) == [
        "Nodes=nvl01-t01,nvl01-t02", "Nodes=nvl02-t01"]
    assert {ln.split()[0].removeprefix("SwitchName=nvl_") for ln in switches} == set(
        domains.values())
    assert tree[-1].startswith("SwitchName=fleet Switches=nvl_")
    block = (out / "topology-block.conf").read_text().splitlines()
    assert sorted(ln.split()[1] for ln in block if ln.startswith("BlockName=")) == [
        "Nodes=nvl01-t01,nvl01-t02", "Nodes=nvl02-t01"]
    try:
        ensure_slurm()
    except SlurmLabError as exc:
        pytest.fail(f"slurm lab unavailable: {exc}")
    node_lines = [ln for ln in (out / "slurm.conf").read_text().splitlines()
                  if ln.startswith("NodeName=")]
    gres = (out / "gres.conf").read_text()
    try:
        slurm.start(node_lines, gres, gpus=4, topology=(out / "topology.conf").read_text())
        shown = slurm.run("scontrol", "show", "topology")
    finally:
        slurm.stop()
        shutil.rmtree(tmp_path / "slurm", ignore_errors=True)
    by = {ln.split()[0]: ln for ln in shown.splitlines() if ln.startswith("SwitchName=")}
    assert "Nodes=nvl01-t01,nvl01-t02" in by[f"SwitchName=nvl_{domains['nvl01']}"], shown
    assert "Nodes=nvl02-t01" in by[f"SwitchName=nvl_{domains['nvl02']}"], shown
    assert "Level=1" in by["SwitchName=fleet"], shown
