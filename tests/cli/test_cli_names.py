"""Typos are never silent (issue 29 item 1), SQLite and PostgreSQL: an unknown host, pool,
baseline or profile is refused (exit 4, not_found) with "did you mean" from the known names;
``baseline create --pool`` refuses an unknown pool unless ``--create`` (and saves nothing);
``enroll`` warns when an inventory names a baseline that does not exist (``--strict``: exit 2,
nothing enrolled); an empty fleet's ``hosts list`` says how to enroll. Every test here fails
on 84be469/8608b99 (no "did you mean", the typo'd pool was created, no warning, no hint)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.clitools import Cli, cli_for_backend, flat

POOL = "train-h100"


@pytest.fixture(params=["sqlite", "postgres"])
def gf(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cli]:
    c = cli_for_backend(request, tmp_path, "alice")
    lab = c.tmp / "lab"
    c.run("lab", "create", "--hosts", "2", "--model", "h100-8x", "--dir", str(lab))
    c.run("enroll", "-i", str(lab / "inventory.ini"))
    yield c


def test_unknown_hosts_get_did_you_mean(gf: Cli) -> None:
    r = gf.run("hosts", "show", "gpu01", code=4)
    assert "no host named 'gpu01' (did you mean gpu-01?)" in flat(r.stderr)
    r = gf.run("hosts", "list", "gpu01", code=4)
    assert "(did you mean gpu-01?)" in flat(r.stderr)
    r = gf.run("maintenance", "on", "gpu01", "--reason", "x", code=4)
    assert "did you mean gpu-01?" in flat(r.stdout + r.stderr)
    err = gf.json("hosts", "show", "gpu01", code=4)["error"]
    assert err["code"] == "not_found" and "did you mean gpu-01?" in err["message"]
    r = gf.run("hosts", "show", "zzzz-unrelated", code=4)
    assert "did you mean" not in r.stderr


def test_unknown_pools_in_selectors_get_did_you_mean(gf: Cli) -> None:
    r = gf.run("hosts", "list", "pool:trian-h100", code=4)
    assert "no pool named 'trian-h100' (did you mean train-h100?)" in flat(r.stderr)
    r = gf.run("hosts", "list", "--pool", "trian-h100", code=4)
    assert "no pool named 'trian-h100' (did you mean train-h100?)" in flat(r.stderr)
    r = gf.run("summary", "pool:trian-h100", code=4)
    assert "did you mean train-h100?" in flat(r.stderr)
    assert len(gf.json("hosts", "list", f"pool:{POOL}")) == 2  # a known pool still selects


def test_baseline_create_refuses_an_unknown_pool_unless_create(gf: Cli) -> None:
    gf.run("collect")
    r = gf.run("baseline", "create", "b1", "--from-host", "gpu-01", "--pool", "trian-h100",
               code=4)  # fmt: skip
    assert "no pool named 'trian-h100' (did you mean train-h100?)" in flat(r.stderr)
    assert "--create" in r.stderr
    gf.run("baseline", "show", "b1", code=4)  # nothing saved
    assert [p["name"] for p in gf.json("pool", "list")] == [POOL]
    gf.run("baseline", "create", "b1", "--from-host", "gpu-01", "--pool", POOL)
    r = gf.run("baseline", "show", "b-1", code=4)
    assert "no baseline named 'b-1' (did you mean b1?)" in flat(r.stderr)
    gf.run("baseline", "create", "b2", "--from-host", "gpu-01", "--pool", "new-pool", "--create")
    assert sorted(p["name"] for p in gf.json("pool", "list")) == ["new-pool", POOL]
    r = gf.run("pool", "baseline", "trian-h100", "b1", code=4)
    assert "did you mean train-h100?" in flat(r.stderr)


def test_unknown_profile_gets_did_you_mean(gf: Cli) -> None:
    r = gf.run("allocate", "--hosts", "1", "--profile", "trainig-multinode", "--owner", "a",
               "--purpose", "p", "--for", "1h", code=4)  # fmt: skip
    assert "no profile named 'trainig-multinode' (did you mean training-multinode?)" in flat(
        r.stderr
    )
    r = gf.run("capacity", "check", "--gpus", "8", "--profile", "inferense", code=4)
    assert "(did you mean inference?)" in flat(r.stderr)


def test_enroll_warns_on_an_unknown_baseline_and_strict_refuses(gf: Cli) -> None:
    gf.run("collect")
    gf.run("baseline", "create", "h100-2026q4", "--from-host", "gpu-01")
    inv = gf.tmp / "more.ini"
    inv.write_text(
        "[new]\ngpu-09 gpufleet_transport=sim gpufleet_lab_dir=/nonexistent "
        "gpufleet_baseline=h100-2026q\n"
    )
    r = gf.run("enroll", "-i", str(inv), "--strict", code=2)
    assert f"{inv}:2: host gpu-09: no baseline named 'h100-2026q' (did you mean h100-2026q4?)" in (
        flat(r.stderr)
    )
    assert gf.run("hosts", "show", "gpu-09", code=4)  # nothing enrolled
    r = gf.run("enroll", "-i", str(inv))
    assert "[WARNING]:" in r.stderr and "did you mean h100-2026q4?" in flat(r.stderr)
    assert gf.json("hosts", "list", "gpu-09")[0]["name"] == "gpu-09"


@pytest.mark.parametrize("backend", ["sqlite"])
def test_an_empty_fleet_says_how_to_enroll(tmp_path: Path, backend: str) -> None:
    c = Cli(["--home", str(tmp_path / "home")], tmp_path,
            {"GPUFLEET_DATABASE_URL": None, "GPUFLEET_HOME": None, "TZ": "UTC"})  # fmt: skip
    out = flat(c.run("hosts", "list").stdout)
    assert "gpufleet enroll -i INVENTORY" in out and "gpufleet lab create" in out
    assert c.json("hosts", "list") == []  # JSON unchanged
