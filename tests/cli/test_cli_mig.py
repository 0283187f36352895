"""Issue 26 item 7 through the CLI on both databases: ``baseline create --mig-config
FILE:NAME`` pins a mig-parted layout for a pool, ``drift`` shows the hosts whose layout
differs (exit 1), ``campaign create --mig`` shows the nvidia-smi commands it will run and
``campaign run`` runs them on the lab, after which drift is gone."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.clitools import Cli, cli_for_backend, flat

from gpufleet.lab.mig import LOG

POOL = "train-h100"
CONFIG = """\
version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  h100-balanced:
    - devices: all
      mig-enabled: true
      mig-devices:
        "3g.40gb": 1
        "2g.20gb": 1
        "1g.10gb": 2
"""
BALANCED = "1g.10gb:2,2g.20gb:1,3g.40gb:1"


@pytest.fixture(params=["sqlite", "postgres"])
def gf(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cli]:
    c = cli_for_backend(request, tmp_path, "mig-test")
    lab = c.tmp / "lab"
    c.run("lab", "create", "--hosts", "2", "--model", "h100-8x", "--dir", str(lab))
    c.run("enroll", "-i", str(lab / "inventory.ini"))
    c.run("validate")
    yield c


def test_pin_drift_and_apply_a_mig_layout(gf: Cli) -> None:
    cfg = gf.tmp / "mig-parted.yaml"
    cfg.write_text(CONFIG)
    out = flat(gf.run("baseline", "create", "h100-mig", "--from-host", "gpu-01", "--mig-config",
                      f"{cfg}:h100-balanced", "--pool", POOL).stdout)
    assert "baseline h100-mig saved" in out and f"-> all={BALANCED}" in out
    assert gf.json("baseline", "show", "h100-mig")["mig"] == {"all": BALANCED}
    bad = gf.run("baseline", "create", "x", "--mig-config", f"{cfg}:nope", code=2)
    assert "no mig-config 'nope'" in flat(bad.stdout + bad.stderr)
    (p,) = gf.json("drift", code=1)["pools"]
    mig = next(f for f in p["fields"] if f["field"] == "mig.all")
    assert mig["expected"] == BALANCED and mig["others"] == {"disabled": ["gpu-01", "gpu-02"]}
    shown = flat(gf.run("campaign", "create", "mig-h100", "--target-baseline", "h100-mig",
                        "--selector", f"pool:{POOL}", "--mig", "--ticket", "CHG-7",
                        "--canary", "1", "--waves", "100%", "--pool-floor", "0%",
                        "--max-rack-share", "100%").stdout)
    assert "nvidia-smi mig -cgi 3g.40gb,2g.20gb,1g.10gb,1g.10gb -C" in shown
    gf.run("campaign", "run", "mig-h100", "--no-drain")
    log = (gf.tmp / "lab" / LOG).read_text()
    assert log.count("nvidia-smi -mig 1") == 2
    (p,) = gf.json("drift")["pools"]  # exit 0: the layout is the pool's
    assert not any(f["field"].startswith("mig") for f in p["fields"])
