"""Issue 27 acceptance end to end through the CLI, on both databases: a lab of two NVL72
racks; a route_unhealthy fabric on two trays of rack A inside the window becomes one rack
incident with one alarm, rack A's hosts are restricted (out of ``--nvl-domain`` placement,
not quarantined), rack B is untouched, the blast-radius guard does not trip; a missing tray
alarms; a 72-GPU allocation lands inside rack B; resolving the incident re-validates."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.clitools import Cli, cli_for_backend


@pytest.fixture(params=["sqlite", "postgres"])
def c(request: pytest.FixtureRequest, tmp_path: Path) -> Cli:
    return cli_for_backend(request, tmp_path, "cli-rack-incident")


def _alloc(c: Cli, *args: str, code: int = 0) -> list[str]:
    got = c.json("allocate", *args, "--owner", "t", "--purpose", "p", "--for", "1h", code=code)
    if code:
        return []
    LEASES.append(got["lease"]["id"])
    return sorted(got["lease"]["hosts"])


def _release(c: Cli) -> None:
    c.run("leases", "release", str(LEASES.pop()))


LEASES: list[int] = []


def test_two_faulty_trays_make_one_rack_incident(c: Cli) -> None:
    lab = c.tmp / "lab"
    c.run("lab", "create", "--rack", "gb200-nvl72", "--racks", "2", "--dir", str(lab),
          "--fault", "nvl01-t18=tray-missing")
    c.run("enroll", "-i", str(lab / "inventory.ini"))
    c.run("validate", code=1)  # nvl01-t18 does not answer
    racks = c.json("racks", "list")
    assert [[f["kind"] for f in r["findings"]] for r in racks if r["findings"]] == [
        ["missing_tray"]]
    manifest = [a for a in c.json("alarms", "list") if a["kind"] == "rack-manifest"]
    assert [a["host"] for a in manifest] == ["nvl01-t01"]
    # rack A (nvl01) gets a switch fault seen by two of its trays
    for tray in ("nvl01-t03", "nvl01-t07"):
        c.run("lab", "change", tray, "--add-fault", "fabric-route-unhealthy", "--dir", str(lab))
    swept = c.json("inspect", "run")
    assert swept["guard_tripped"] is False
    assert len(swept["incidents"]) == 1
    inc = swept["incidents"][0]
    assert inc["hosts"] == ["nvl01-t03", "nvl01-t07"] and inc["trays"] == 18
    assert inc["drain"] is False  # 2 of 18 trays, under the 50% share
    alarms = c.json("alarms", "list")
    assert [a["kind"] for a in alarms if a["kind"] != "rack-manifest"] == ["rack-incident"]
    assert [a["host"] for a in alarms if a["kind"] == "rack-incident"] == ["nvl01-t01"]
    rack_a = c.json("racks", "show", "nvl01-t01")
    assert all(t["restricted"] for t in rack_a["tray_rows"])
    assert {t["state"] for t in rack_a["tray_rows"]} == {"available"}  # none quarantined
    rack_b = c.json("racks", "show", "nvl02-t01")
    assert not any(t["restricted"] or t["alarms"] for t in rack_b["tray_rows"])
    # a second sweep keeps one incident and opens no per-tray alarm
    again = c.json("inspect", "run")
    assert [i["alarm_id"] for i in again["incidents"]] == [inc["alarm_id"]]
    assert len([a for a in c.json("alarms", "list") if a["kind"] != "rack-manifest"]) == 1
    cap = c.json("capacity")
    assert sorted((d["gpus"], d["free"], d["restricted"]) for d in cap["domains"]) == [
        (68, 68, True), (72, 72, False)]
    assert cap["largest_domain_block"] == 72  # rack A's 68 are restricted
    # 72 GPUs in one domain: rack B, whole
    assert _alloc(c, "--gpus", "72", "--nvl-domain") == [f"nvl02-t{i:02d}" for i in range(1, 19)]
    # rack A is out of NVLink-domain placement, though its 68 GPUs are free ...
    _alloc(c, "--gpus", "4", "--nvl-domain", code=1)
    # ... and a restricted tray is still allocatable where the domain is not needed
    assert _alloc(c, "--hosts", "1", "--selector", "nvl01-t01") == ["nvl01-t01"]
    _release(c)
    # repaired and resolved: the hosts re-validate and rack A serves --nvl-domain again
    for tray in ("nvl01-t03", "nvl01-t07"):
        c.run("lab", "change", tray, "--repair", "--dir", str(lab))
    done = c.json("racks", "resolve", "nvl01-t05", "--reason", "switch tray replaced")
    assert done["validated"]["nvl01-t03"] == "available"
    assert not any(t["restricted"] for t in c.json("racks", "show", "nvl01-t01")["tray_rows"])
    assert _alloc(c, "--gpus", "68", "--nvl-domain") == [
        f"nvl01-t{i:02d}" for i in range(1, 18)]


def test_under_the_host_count_each_tray_keeps_its_own_finding(c: Cli) -> None:
    """GPUFLEET_RACK_INCIDENT_HOSTS=3: two faulty trays are no rack incident; each keeps its
    own nvl-fabric-rack alarm and no host is restricted."""
    lab = c.tmp / "lab"
    c.run("lab", "create", "--rack", "gb200-nvl72", "--racks", "1", "--dir", str(lab),
          "--fault", "nvl01-t03=fabric-route-unhealthy",
          "--fault", "nvl01-t07=fabric-route-unhealthy")
    c.run("enroll", "-i", str(lab / "inventory.ini"))
    c.run("collect")
    c.env["GPUFLEET_RACK_INCIDENT_HOSTS"] = "3"
    swept = c.json("inspect", "run")
    assert swept["incidents"] == []
    health = [a for a in c.json("alarms", "list") if a["kind"] == "health"]
    assert sorted(a["host"] for a in health) == ["nvl01-t03", "nvl01-t07"]
    assert not any(t["restricted"] for t in c.json("racks", "show", "nvl01-t01")["tray_rows"])
    c.env["GPUFLEET_RACK_INCIDENT_HOSTS"] = "2"
    c.env["GPUFLEET_RACK_DRAIN_SHARE"] = "0.1"  # 2 of 18 trays is past 10%: drain the rack
    swept = c.json("inspect", "run")  # the next sweep: both findings fall in the window
    assert [i["drain"] for i in swept["incidents"]] == [True]
    kinds = [a["kind"] for a in c.json("alarms", "list")]
    assert kinds == ["rack-incident"]
    (inc,) = c.json("racks", "incidents")
    assert inc["drain_recommended"] is True
    assert inc["drain_command"].startswith("gpufleet maintenance on 'nvl01-t01,")
