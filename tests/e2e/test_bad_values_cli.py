"""B.12 (timeouts and forks): ``--timeout`` and ``--forks`` of collect, validate and evidence
run refuse nan, inf, negative and zero with exit 2 and a message naming the option, before
anything is claimed or run; the services refuse the same values (ConfigError)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.clitools import Cli, cli_for_backend, flat

from gpufleet.errors import ConfigError
from gpufleet.lab.demo import enroll_lab
from gpufleet.lab.fleet import create_fleet, write_inventory
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.collect import collect
from gpufleet.service.hosts.evidence import run_active

COMMANDS = [("collect",), ("validate",), ("evidence", "run", "gpu-01", "--kind", "dcgm")]
BAD_TIMEOUTS = ["nan", "inf", "-inf", "-5", "0"]
BAD_FORKS = ["0", "-3"]


@pytest.fixture(params=["sqlite", "postgres"])
def cli(request: pytest.FixtureRequest, tmp_path: Path) -> Cli:
    c = cli_for_backend(request, tmp_path, "bad-values")
    d = tmp_path / "lab"
    fl = create_fleet(1, models=["a100-8x"], faults={})
    fl.save(d)
    write_inventory(fl, d / "inventory.ini", transport="sim", lab_dir=d)
    c.run("enroll", "-i", str(d / "inventory.ini"))
    return c


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: c[0])
def test_bad_timeout_and_forks_exit_2(cli: Cli, cmd: tuple[str, ...]) -> None:
    for value in BAD_TIMEOUTS:
        r = cli.run(*cmd, f"--timeout={value}", code=2)
        assert "--timeout" in flat(r.stderr) and "Traceback" not in r.stderr
    for value in BAD_FORKS:
        r = cli.run(*cmd, f"--forks={value}", code=2)
        assert "--forks" in flat(r.stderr)
    # Nothing was collected or claimed by the refused commands.
    assert cli.json("hosts", "list")[0]["last_collected_at"] is None
    cli.run(*cmd, "--timeout=30", "--forks=4")


def test_services_refuse_the_same_values(fleet: Fleet, tmp_path: Path) -> None:
    enroll_lab(fleet, tmp_path / "lab", 1, models=["a100-8x"], faults={})
    for t in (float("nan"), float("inf"), -1.0, 0.0):
        with pytest.raises(ConfigError, match="timeout"):
            collect(fleet, timeout_s=t)
        with pytest.raises(ConfigError, match="timeout"):
            run_active(fleet, None, "dcgm", timeout_s=t)
    with pytest.raises(ConfigError, match="forks"):
        collect(fleet, forks=0)
    with pytest.raises(ConfigError, match="forks"):
        run_active(fleet, None, "dcgm", forks=-1)
    assert len(collect(fleet).results) == 1  # nothing was left claimed
