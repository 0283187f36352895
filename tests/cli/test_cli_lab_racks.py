"""``gpufleet lab create --rack gb200-nvl72 --racks 2`` through the CLI on both databases
(issue 27 item 8): 36 trays enrolled, collected, validated and inspected; the tray with a
route_unhealthy fabric fails nvl_fabric with the rack-scoped fault and raises the
nvl-fabric-rack finding, its neighbours do not."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.clitools import Cli, cli_for_backend


@pytest.fixture(params=["sqlite", "postgres"])
def c(request: pytest.FixtureRequest, tmp_path: Path) -> Cli:
    return cli_for_backend(request, tmp_path, "cli-lab-racks")


def test_lab_create_two_racks_enrolls_36_hosts(c: Cli, tmp_path: Path) -> None:
    lab = c.tmp / "lab"
    created = c.json("lab", "create", "--rack", "gb200-nvl72", "--racks", "2",
                     "--fault", "nvl02-t05=fabric-route-unhealthy", "--dir", str(lab), "--json")
    assert len(created["hosts"]) == 36
    assert {h["rack"] for h in created["hosts"]} == {"nvl01", "nvl02"}
    assert sorted({h["tray"] for h in created["hosts"]}) == list(range(18))
    c.run("enroll", "-i", str(lab / "inventory.ini"))
    hosts = c.json("hosts", "list")
    assert len(hosts) == 36
    assert {h["pool"] for h in hosts} == {"train-gb200"}
    c.run("collect")
    verdicts = {v["host"]: v for v in c.json("validate")}
    assert verdicts["nvl02-t05"]["faults"] == ["nvl_fabric_rack"]
    assert "route_unhealthy True" in " ".join(verdicts["nvl02-t05"]["held_out"][
        "training-nvl-domain"])
    assert all(v["faults"] == [] for h, v in verdicts.items() if h != "nvl02-t05")
    swept = {h["host"]: h for h in c.json("inspect", "run")["hosts"]}
    assert [f["rule"] for f in swept["nvl02-t05"]["findings"]] == ["nvl-fabric-rack"]
    assert all(not h["findings"] for n, h in swept.items() if n != "nvl02-t05")
    c.run("lab", "create", "--rack", "gb200-nvl72", "--model", "h100-8x", "--dir",
          str(tmp_path / "x"), code=2)
