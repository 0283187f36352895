"""Exit codes of lease refusals through the CLI, SQLite and PostgreSQL: a refusal because of
the lease's state is not a usage error. Unknown lease 4, ended lease 5 (invalid transition),
another owner's lease or a renewal into a reservation 6 (conflict), bad flags 2. Also the
lessee's users recorded with ``allocate --user``."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from tests.clitools import Cli, cli_for_backend, flat


@pytest.fixture(params=["sqlite", "postgres"])
def gf(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cli]:
    c = cli_for_backend(request, tmp_path, "alice")
    lab = c.tmp / "lab"
    c.run("lab", "create", "--hosts", "2", "--model", "h100-8x", "--dir", str(lab))
    c.run("enroll", "-i", str(lab / "inventory.ini"))
    c.run("validate")
    yield c


def _iso(dt: datetime) -> str:
    return dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M")


def test_renew_and_release_refusals_exit_by_cause(gf: Cli) -> None:
    got = gf.json(
        "allocate",
        "--hosts",
        "1",
        "--owner",
        "team-a",
        "--purpose",
        "finetune",
        "--for",
        "24h",
        "--user",
        "alice",
        "--user",
        "bob",
        "--user",
        "alice",
    )
    lease = got["lease"]
    lid, host = str(lease["id"]), lease["hosts"][0]
    assert lease["users"] == ["alice", "bob"]
    assert gf.json("leases", "show", lid)["users"] == ["alice", "bob"]
    assert "lessee users: alice, bob" in flat(gf.run("leases", "show", lid).stdout)
    # the same host reserved by another team from +48h to +72h
    start = datetime.now(UTC) + timedelta(hours=48)
    rsv = gf.json(
        "allocate",
        "--hosts",
        "1",
        "--selector",
        host,
        "--owner",
        "team-b",
        "--purpose",
        "eval",
        "--start",
        _iso(start),
        "--for",
        "24h",
    )
    assert rsv["lease"]["state"] == "reserved" and rsv["lease"]["users"] is None

    r = gf.run("leases", "renew", lid, "--for", "60h", code=6)  # into the reservation
    assert f"host {host}" in flat(r.stderr) and "another lease holds it then" in flat(r.stderr)
    r = gf.run("leases", "renew", lid, "--for", "20h", "--owner", "team-b", code=6)
    assert "owned by 'team-a', not 'team-b'" in flat(r.stderr)
    renewed = gf.json("leases", "renew", lid, "--for", "20h", "--owner", "team-a")  # 24h + 20h
    assert renewed["users"] == ["alice", "bob"]
    # usage errors stay 2: both --for and --until, a bad time, past the longest lease
    gf.run("leases", "renew", lid, "--for", "30h", "--until", _iso(start), code=2)
    gf.run("leases", "renew", lid, "--until", "thursday", code=2)
    gf.run("leases", "renew", lid, "--for", "400d", code=2)
    gf.run("leases", "renew", "999", "--for", "1h", code=4)
    gf.run("allocate", "--hosts", "1", "--owner", "x", "--purpose", "y", "--for", "1h",
           "--user", "bad user", code=2)  # fmt: skip

    r = gf.run("leases", "release", lid, "--owner", "team-b", code=6)
    assert "owned by 'team-a'" in flat(r.stderr)
    assert gf.state(host) == "allocated"  # nothing happened
    out = gf.json("leases", "release", lid, "--owner", "team-a")
    assert out["lease"]["state"] == "released"
    gf.run("leases", "release", lid, code=5)
    gf.run("leases", "renew", lid, "--for", "1h", code=5)
    gf.run("leases", "release", "999", code=4)
