"""Issue 27 item 7 end to end through the CLI, on both databases: ``campaign create --unit
rack`` on a lab of two NVL72 racks (36 GB200 trays, simulated). Waves are racks; each rack's
trays enter one maintenance window together, are acted on one by one (the lab's
``lab-install-driver`` command, a driver install on the lab host) while the rest of the rack
stays in maintenance, and leave it together once every tray passed. A tray that fails stops its
rack: the trays not acted on leave untouched, and the rack, now on two drivers, raises one
``rack-drift`` alarm."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.clitools import Cli, cli_for_backend, flat

NEW = "580.95.05"
OLD = "580.173.02"  # the GB200 capture's driver


@pytest.fixture(params=["sqlite", "postgres"])
def c(request: pytest.FixtureRequest, tmp_path: Path) -> Cli:
    return cli_for_backend(request, tmp_path, "cli-campaign-racks")


def _drivers(c: Cli, prefix: str) -> set[str | None]:
    return {h["driver"] for h in c.json("hosts", "list") if h["name"].startswith(prefix)}


def _lab(c: Cli, racks: int) -> Path:
    """A lab of ``racks`` NVL72 racks, enrolled and validated, and the target baseline."""
    lab = c.tmp / "lab"
    c.run("lab", "create", "--rack", "gb200-nvl72", "--racks", str(racks), "--dir", str(lab))
    c.run("enroll", "-i", str(lab / "inventory.ini"))
    c.run("validate")
    c.run("baseline", "create", "b-new", "--driver", NEW)
    return lab


def test_a_rack_campaign_goes_tray_by_tray_in_one_window_and_flags_drift(c: Cli) -> None:
    lab = _lab(c, 2)
    args = ["campaign", "create", "r1", "--target-baseline", "b-new", "--selector", "nvl*",
            "--command", f"lab-install-driver {NEW}", "--ticket", "CHG-27", "--unit", "rack",
            "--require-approval"]
    plan = c.json(*args)
    assert plan["options"]["unit"] == "rack"
    assert len(plan["racks"]) == 2
    assert all(len(trays) == 18 for trays in plan["racks"].values())
    waves = [[h["host"] for h in w["hosts"]] for w in plan["waves"]]
    assert [len(w) for w in waves] == [18, 18]  # the canary is a whole rack, then the other
    rack_of = {trays[0]: rack for rack, trays in plan["racks"].items()}
    first, second = waves
    assert sorted([first, second]) == sorted(plan["racks"].values())
    rack_a = rack_of[first[0]]
    prefix_a, prefix_b = first[0][:6], second[0][:6]
    assert {t[:6] for t in first} == {prefix_a} and prefix_a != prefix_b
    shown = flat(c.run("campaign", "status", "r1").stdout)
    assert "one maintenance window each" in shown

    run = c.run("campaign", "run", "r1")  # the canary rack, then it waits for approval
    err = flat(run.stderr)
    assert f"rack {rack_a}: maintenance window of 18 tray(s)" in err, err
    assert err.index("maintenance window of 18") < err.index(f"{first[0]}: passed")
    # tray by tray: the first tray passed while the last was still in maintenance
    assert err.index(f"{first[0]}: passed") < err.index(f"{first[-1]}: passed")
    assert err.index(f"{first[-1]}: passed") < err.index("maintenance window closed")
    st = c.json("campaign", "status", "r1")
    assert st["status"] == "awaiting-approval"
    assert {h["step"] for h in st["waves"][0]["hosts"]} == {"done"}
    assert _drivers(c, prefix_a) == {NEW} and _drivers(c, prefix_b) == {OLD}
    states = {h["name"]: h["state"] for h in c.json("hosts", "list")}
    assert {states[t] for t in first + second} == {"available"}

    # the other rack: its 5th tray stops answering after the plan; the rack stops there
    bad = second[4]
    c.run("lab", "change", bad, "--add-fault", "hang", "--dir", str(lab))
    c.run("campaign", "approve", "r1")
    run = c.run("campaign", "run", "r1")
    err = flat(run.stderr)
    assert f"tray {bad} failed; not acted on" in err, err
    assert "DRIFT" in err and "rack-drift alarm" in err, err
    st = c.json("campaign", "status", "r1")
    assert st["status"] == "completed"  # one failed tray, within --max-failures 1
    steps = {h["host"]: h["step"] for h in st["waves"][1]["hosts"]}
    assert [steps[t] for t in second] == ["done"] * 4 + ["failed"] + ["released"] * 13
    assert any("trays on different versions" in n for n in st["notes"])
    assert _drivers(c, prefix_b) >= {NEW, OLD}
    states = {h["name"]: h["state"] for h in c.json("hosts", "list")}
    assert "maintenance" not in {states[t] for t in first + second}
    drift = [a for a in c.json("alarms", "list") if a["kind"] == "rack-drift"]
    assert [a["host"] for a in drift] == [second[0]]
    assert f"driver {OLD} on 13" in drift[0]["message"] and NEW in drift[0]["message"]
    rack_b = c.json("racks", "show", second[0])
    assert "version_drift" in [f["kind"] for f in rack_b["findings"]]
    # the technician finishes the rack by hand: one version again, the alarm closes
    c.run("lab", "change", bad, "--repair", "--dir", str(lab))
    for t in second[4:]:
        c.run("lab", "change", t, "--driver", NEW, "--dir", str(lab))
    c.run("collect", ",".join(second))
    assert not [a for a in c.json("alarms", "list") if a["kind"] == "rack-drift"]


def test_a_leased_tray_defers_its_whole_rack(c: Cli) -> None:
    _lab(c, 1)
    base = ["campaign", "create", "--target-baseline", "b-new", "--selector", "nvl*",
            "--command", f"lab-install-driver {NEW}", "--ticket", "CHG-28", "--unit", "rack"]
    c.json(*base[:2], "d1", *base[2:])
    got = c.json("allocate", "--hosts", "1", "--selector", "nvl01-t09", "--owner", "t",
                 "--purpose", "p", "--for", "1h")
    c.run("campaign", "run", "d1")
    st = c.json("campaign", "status", "d1")
    assert {h["step"] for h in st["waves"][0]["hosts"]} == {"deferred"}
    assert "nvl01-t09 allocated when its window came" in st["waves"][0]["hosts"][0]["reason"]
    assert {h["state"] for h in c.json("hosts", "list")} == {"available", "allocated"}
    assert _drivers(c, "nvl01") == {OLD}
    # --allocated skip: the rack with a leased tray is left out whole
    r = c.run(*base[:2], "d2", *base[2:], "--allocated", "skip", code=2)
    assert "tray nvl01-t09 allocated: the rack is skipped by policy" in flat(r.stdout + r.stderr)
    # the lease ends: running the campaign again moves the whole rack
    c.run("leases", "release", str(got["lease"]["id"]))
    assert {h["state"] for h in c.json("hosts", "list")} == {"available"}
    c.run("campaign", "run", "d1")
    st = c.json("campaign", "status", "d1")
    assert st["status"] == "completed"
    assert {h["step"] for h in st["waves"][0]["hosts"]} == {"done"}
    assert _drivers(c, "nvl01") == {NEW}
