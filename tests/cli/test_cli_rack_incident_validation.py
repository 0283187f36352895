"""Issue 27: fabric failures found by *validation* (the ``nvl_fabric`` decision table check) on
k hosts of one NVLink domain within the window feed the same rack incident as the
inspection's findings: one incident, one alarm, the domain's hosts restricted, none
quarantined, the other rack untouched; a later inspection or validation joins it. Under the
host count nothing is folded. Both databases, a lab of two NVL72 racks."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.clitools import Cli, cli_for_backend, flat

FAULTY = ("nvl01-t03", "nvl01-t07")


@pytest.fixture(params=["sqlite", "postgres"])
def c(request: pytest.FixtureRequest, tmp_path: Path) -> Cli:
    c = cli_for_backend(request, tmp_path, "cli-rack-incident-validation")
    lab = c.tmp / "lab"
    c.run("lab", "create", "--rack", "gb200-nvl72", "--racks", "2", "--dir", str(lab),
          *[a for t in FAULTY for a in ("--fault", f"{t}=fabric-route-unhealthy")])
    c.run("enroll", "-i", str(lab / "inventory.ini"))
    return c


def _incidents(c: Cli) -> list[dict[str, object]]:
    return [a for a in c.json("alarms", "list") if a["kind"] == "rack-incident"]


def test_validation_fabric_failures_make_one_rack_incident(c: Cli) -> None:
    out = flat(c.run("validate").stdout)
    assert "rack incident (alarm" in out and "nvl01-t03, nvl01-t07" in out, out
    (inc,) = _incidents(c)
    assert inc["host"] == "nvl01-t01"
    assert [a["kind"] for a in c.json("alarms", "list")] == ["rack-incident"]  # one alarm
    rack_a = c.json("racks", "show", "nvl01-t01")
    assert {t["state"] for t in rack_a["tray_rows"]} == {"available"}  # none quarantined
    assert all(t["restricted"] for t in rack_a["tray_rows"])
    rack_b = c.json("racks", "show", "nvl02-t01")
    assert not any(t["restricted"] or t["alarms"] for t in rack_b["tray_rows"])
    # the verdicts name the incident; validating again (or inspecting) joins it
    verdicts = c.json("validate", "nvl01-*")
    assert {v["host"]: v["rack_incident"] for v in verdicts if v["rack_incident"]} == {
        t: inc["id"] for t in FAULTY}
    swept = c.json("inspect", "run")
    assert [i["alarm_id"] for i in swept["incidents"]] == [inc["id"]]
    assert swept["guard_tripped"] is False
    assert [a["id"] for a in c.json("alarms", "list")] == [inc["id"]]
    # out of --nvl-domain placement: the 72 GPUs come from rack B
    got = c.json("allocate", "--gpus", "72", "--nvl-domain", "--owner", "t", "--purpose", "p",
                 "--for", "1h")
    assert sorted(got["lease"]["hosts"]) == [f"nvl02-t{i:02d}" for i in range(1, 19)]


def test_under_the_host_count_validation_folds_nothing(c: Cli) -> None:
    c.env["GPUFLEET_RACK_INCIDENT_HOSTS"] = "3"
    verdicts = c.json("validate")
    assert not any(v["rack_incident"] for v in verdicts)
    assert _incidents(c) == []
    assert not any(t["restricted"] for t in c.json("racks", "show", "nvl01-t01")["tray_rows"])
    # each faulty tray is still held out of the NVLink-domain profiles by its own verdict
    held = {v["host"]: v["held_out"] for v in verdicts if v["host"] in FAULTY}
    assert all("training-nvl-domain" in h for h in held.values()), held
