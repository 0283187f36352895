"""Time is the operator's time (issue 29 item 3), SQLite and PostgreSQL: a time typed without
a zone is local time (``TZ``), every time shown carries its zone, ``--utc`` reads and shows
UTC. Under ``TZ=Asia/Shanghai`` ``allocate --start DATE T08:00`` books 00:00 UTC and shows
08:00 CST; on 84be469/8608b99 it booked 08:00 UTC (shown as 16:00 CST)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from tests.clitools import Cli, cli_for_backend, flat

SHANGHAI = "Asia/Shanghai"


@pytest.fixture(params=["sqlite", "postgres"])
def gf(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cli]:
    c = cli_for_backend(request, tmp_path, "alice")
    lab = c.tmp / "lab"
    c.run("lab", "create", "--hosts", "2", "--model", "h100-8x", "--dir", str(lab))
    c.run("enroll", "-i", str(lab / "inventory.ini"))
    c.run("validate")
    yield c


def _day() -> str:
    """A day a month ahead (a reservation, whatever the date the tests run)."""
    return (datetime.now(UTC) + timedelta(days=30)).date().isoformat()


def _gpufleet(cli: Cli, *argv: str, tz: str) -> subprocess.CompletedProcess[str]:
    """The ``gpufleet`` program in a process of its own under ``TZ=tz``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    env.update({k: v for k, v in cli.env.items() if v is not None})
    env["TZ"], env["COLUMNS"] = tz, "200"
    return subprocess.run(
        [sys.executable, "-c", "from gpufleet.cli.entry import main; main()",
         *cli.global_args, *argv],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_allocate_start_is_local_time_and_shown_with_its_zone(gf: Cli) -> None:
    day = _day()
    p = _gpufleet(gf, "allocate", "--hosts", "1", "--owner", "a", "--purpose", "p",
                  "--start", f"{day}T08:00", "--for", "24h", "--json", tz=SHANGHAI)  # fmt: skip
    assert p.returncode == 0, p.stderr
    lease = json.loads(p.stdout)["lease"]
    assert lease["starts_at"] == f"{day}T00:00:00+00:00"  # JSON: UTC, as before
    p = _gpufleet(gf, "leases", "list", tz=SHANGHAI)
    assert p.returncode == 0, p.stderr
    assert f"{day} 08:00:00 CST" in flat(p.stdout)
    p = _gpufleet(gf, "--utc", "leases", "list", tz=SHANGHAI)
    assert f"{day} 00:00:00 UTC" in flat(p.stdout) and "CST" not in p.stdout


def test_utc_flag_reads_times_without_a_zone_as_utc(gf: Cli) -> None:
    day = _day()
    gf.env["TZ"] = SHANGHAI
    got = gf.json("--utc", "allocate", "--hosts", "1", "--owner", "a", "--purpose", "p",
                  "--start", f"{day}T08:00", "--for", "24h")  # fmt: skip
    assert got["lease"]["starts_at"] == f"{day}T08:00:00+00:00"
    # a zone given wins over the local one
    got = gf.json("allocate", "--hosts", "1", "--owner", "b", "--purpose", "p",
                  "--start", f"{day}T08:00+02:00", "--for", "24h")  # fmt: skip
    assert got["lease"]["starts_at"] == f"{day}T06:00:00+00:00"
    lid = str(got["lease"]["id"])  # ends the next day at 06:00 UTC, 14:00 CST
    r = gf.run("leases", "renew", lid, "--until", f"{day}T20:00", code=2)
    assert "would shorten lease" in flat(r.stderr) and "--shorten" in r.stderr
    r = gf.run("leases", "renew", lid, "--until", f"{day}T20:00", "--shorten")
    assert f"renewed until {day} 20:00:00 CST" in flat(r.stdout)
    assert gf.json("leases", "show", lid)["ends_at"] == f"{day}T12:00:00+00:00"


def test_capacity_at_hosts_eta_and_maintenance_read_local_time(gf: Cli) -> None:
    day = _day()
    gf.env["TZ"] = SHANGHAI
    host = gf.json("hosts", "list")[0]["name"]
    gf.run("maintenance", "on", host, "--reason", "PSU", "--eta", f"{day}T08:00")
    assert gf.json("hosts", "list", host)[0]["eta"] == f"{day}T00:00:00+00:00"
    gf.run("hosts", "eta", host, f"{day}T09:30")
    assert gf.json("hosts", "list", host)[0]["eta"] == f"{day}T01:30:00+00:00"
    cap = gf.json("capacity", "--at", f"{day}T10:00")
    assert cap["at"] == f"{day}T02:00:00+00:00"
    assert f"{day} 10:00:00 CST" in flat(gf.run("capacity", "--at", f"{day}T10:00").stdout)
    r = gf.run("capacity", "--at", "next tuesday", code=2)
    assert "--at 'next tuesday': not a time" in flat(r.stderr)


def test_the_lean_start_takes_utc() -> None:
    """``gpufleet --utc hosts list`` is still answered by the lean start (issue 8), in UTC."""
    from gpufleet.cli.entry import lean_argv

    got = lean_argv(["--utc", "--home", "h", "hosts", "list", "--json"])
    assert got is not None and got.utc and got.command == ("hosts", "list")
    plain = lean_argv(["hosts", "list"])
    assert plain is not None and not plain.utc
