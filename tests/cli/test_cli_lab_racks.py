"""``gpufleet lab create --rack gb200-nvl72 --racks 2`` through the CLI on both databases
(issue 27 item 8): 36 trays enrolled, collected and placed in their racks by their facts."""

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
    c.run("lab", "create", "--rack", "gb200-nvl72", "--model", "h100-8x", "--dir",
          str(tmp_path / "x"), code=2)
