"""Issue 26 through the CLI on both databases: ``baseline create --from-host H --driver X``
pins the driver on top of the host's values and prints the difference; ``drift`` shows a
half-migrated pool and exits 1 (main printed "no drift" and exited 0)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.clitools import Cli, cli_for_backend, flat

POOL = "train-h100"


@pytest.fixture(params=["sqlite", "postgres"])
def gf(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cli]:
    c = cli_for_backend(request, tmp_path, "pool-drift-test")
    lab = c.tmp / "lab"
    c.run("lab", "create", "--hosts", "3", "--model", "h100-8x", "--dir", str(lab))
    c.run("enroll", "-i", str(lab / "inventory.ini"))
    c.run("validate")
    c.run("baseline", "create", "b-old", "--from-host", "gpu-01", "--pool", POOL)
    yield c


def test_from_host_applies_the_pins_given_and_prints_the_diff(gf: Cli) -> None:
    old = gf.json("baseline", "show", "b-old")
    out = flat(gf.run("baseline", "create", "b-new", "--from-host", "gpu-01", "--driver",
                      "595.45.04", "--sysctl", "vm.swappiness=1").stdout)
    assert "baseline b-new saved" in out
    assert f"driver: {old['driver']} on gpu-01 -> 595.45.04" in out
    new = gf.json("baseline", "show", "b-new")
    assert new["driver"] == "595.45.04"  # main dropped --driver with --from-host
    assert new["sysctls"]["vm.swappiness"] == "1"
    # every pin not given is the host's
    same = [k for k in old if k not in ("name", "driver", "sysctls", "status", "purpose")]
    assert {k: new[k] for k in same} == {k: old[k] for k in same}
    assert {k: v for k, v in new["sysctls"].items() if k != "vm.swappiness"} == {
        k: v for k, v in old["sysctls"].items() if k != "vm.swappiness"}
    got = gf.json("baseline", "create", "b-json", "--from-host", "gpu-01", "--driver",
                  "595.45.04", "--json")
    assert got["baseline"] == "b-json" and got["from_host"] == "gpu-01"
    assert got["changed_from_host"] == [
        {"field": "driver", "flag": "--driver", "host": old["driver"], "pinned": "595.45.04"}
    ]
    same_as_host = gf.json("baseline", "create", "b-same", "--from-host", "gpu-01", "--json")
    assert same_as_host["changed_from_host"] == []


def test_drift_shows_a_half_migrated_pool_and_exits_1(gf: Cli) -> None:
    assert "no drift" in flat(gf.run("drift").stdout)
    lab = str(gf.tmp / "lab")
    # what a campaign leaves on gpu-02 and gpu-03: a new driver, their own baseline the target
    for host in ("gpu-02", "gpu-03"):
        gf.run("lab", "change", host, "--driver", "570.86.15", "--dir", lab)
    gf.run("collect")
    gf.run("baseline", "create", "b-new", "--from-host", "gpu-02")
    inv = gf.tmp / "lab" / "inventory.ini"
    text = inv.read_text()
    for host in ("gpu-02", "gpu-03"):
        text = text.replace(f"{host} ", f"{host} gpufleet_baseline=b-new ", 1)
    inv.write_text(text)
    gf.run("enroll", "-i", str(inv))
    d = gf.json("drift", code=1)
    assert d["hosts"] == {}  # each host matches the baseline it follows
    (p,) = d["pools"]
    assert p["pool"] == POOL and p["baseline"] == "b-old" and p["drifts"] is True
    assert p["matching"] == ["gpu-01"] and p["on_other"] == {"b-new": ["gpu-02", "gpu-03"]}
    driver = next(f for f in p["fields"] if f["field"] == "driver")
    assert driver["others"] == {"570.86.15": ["gpu-02", "gpu-03"]} and driver["matching"] == 1
    out = flat(gf.run("drift", code=1).stdout)
    assert "no drift" not in out
    assert f"pool {POOL}: baseline b-old; 1 of 3 hosts match it; 2 follow b-new" in out
    assert f"gpufleet pool baseline {POOL} b-new" in out
    # the pool advanced: no drift again
    gf.run("pool", "baseline", POOL, "b-new")
    gf.run("lab", "change", "gpu-01", "--driver", "570.86.15", "--dir", lab)
    gf.run("collect")
    (p,) = gf.json("drift")["pools"]  # exit 0
    assert p["drifts"] is False and p["matching"] == ["gpu-01", "gpu-02", "gpu-03"]
