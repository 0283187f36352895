"""Racks as objects (issue 27 items 2 and 5) through the CLI on both databases: two lab
NVL72 racks, one missing a tray; ``racks list/show``, the manifest alarm, and a 72-GPU
``allocate --nvl-domain`` that lands inside the complete rack, never across two."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.clitools import Cli, cli_for_backend


@pytest.fixture(params=["sqlite", "postgres"])
def c(request: pytest.FixtureRequest, tmp_path: Path) -> Cli:
    return cli_for_backend(request, tmp_path, "cli-racks")


def _lab(c: Cli, *faults: str) -> None:
    lab = c.tmp / "lab"
    args = [a for f in faults for a in ("--fault", f)]
    c.run("lab", "create", "--rack", "gb200-nvl72", "--racks", "2", *args, "--dir", str(lab))
    c.run("enroll", "-i", str(lab / "inventory.ini"))
    c.run("collect", code=1 if faults else 0)


def test_racks_list_show_and_missing_tray_alarm(c: Cli) -> None:
    _lab(c, "nvl01-t18=tray-missing")
    racks = {r["rack"]: r for r in c.json("racks", "list")}
    assert len(racks) == 2
    a = next(r for r in racks.values() if r["trays"] == 17)
    b = next(r for r in racks.values() if r["trays"] == 18)
    assert a["model"] == b["model"] == "gb200-nvl72"
    assert a["expected_trays"] == 18 and a["gpus"] == 68 and b["gpus"] == 72
    assert a["state"] == "alarmed" and b["state"] == "ok"
    assert [f["kind"] for f in a["findings"]] == ["missing_tray"]
    assert "tray index 17" in a["findings"][0]["message"]
    assert a["nvl_domain"] != b["nvl_domain"] and len(a["nvl_domain"]) == 36
    assert a["partitions"] == [f"{a['nvl_domain']}.2"]
    # one alarm for the rack, on its first tray in slot order
    alarms = [x for x in c.json("alarms", "list") if x["kind"] == "rack-manifest"]
    assert [x["host"] for x in alarms] == ["nvl01-t01"]
    shown = c.json("racks", "show", "nvl02-t03")  # by one of its hosts
    assert shown["rack"] == b["rack"]
    rows = shown["tray_rows"]
    assert [t["host"] for t in rows] == [f"nvl02-t{i:02d}" for i in range(1, 19)]
    assert [t["slot"] for t in rows] == sorted(t["slot"] for t in rows)
    assert rows[4]["slot"] == 14 and rows[4]["tray_index"] == 4  # as in the capture
    assert rows[10]["slot"] == 29  # below the 9 switch trays
    assert all(t["fabric"] == "ok" and t["gpus"] == 4 for t in rows)
    text = c.run("racks", "show", a["rack"]).stdout
    assert "missing_tray" in text and "17/18 trays" in text
    c.run("racks", "show", "no-such-rack", code=4)


def _alloc(c: Cli, *args: str, code: int = 0) -> list[str]:
    got = c.json("allocate", *args, "--owner", "t", "--purpose", "p", "--for", "1h", code=code)
    return sorted(got["lease"]["hosts"]) if code == 0 else []


def test_nvl_domain_allocation_stays_in_one_domain(c: Cli) -> None:
    _lab(c, "nvl01-t18=tray-missing")
    c.run("validate", code=1)
    assert _alloc(c, "--gpus", "72", "--nvl-domain") == [f"nvl02-t{i:02d}" for i in range(1, 19)]
    c.run("leases", "release", "1")
    _alloc(c, "--hosts", "2", "--selector", "nvl02-t01,nvl02-t02")
    # 68 GPUs free in rack A, 64 in rack B: 72 in one domain cannot be met ...
    _alloc(c, "--gpus", "72", "--nvl-domain", code=1)
    # ... while without --nvl-domain the same request spans the two racks
    spanning = _alloc(c, "--gpus", "72")
    assert {h[:5] for h in spanning} == {"nvl01", "nvl02"}
    c.run("leases", "release", "3")
    # 64 in one domain: the smallest domain that holds it, whole (rack B's 16 free trays)
    assert _alloc(c, "--gpus", "64", "--nvl-domain") == [
        f"nvl02-t{i:02d}" for i in range(3, 19)]
