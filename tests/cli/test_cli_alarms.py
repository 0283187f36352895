"""``gpufleet alarms list|show|ack|resolve`` on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.clitools import Cli, cli_for_backend

from gpufleet.domain.events import AlarmKind, AlarmSeverity
from gpufleet.service.core.alarms import raise_alarm
from gpufleet.service.core.fleet import Fleet
from gpufleet.store.repo import host_by_name


@pytest.fixture(params=["sqlite", "postgres"])
def cli(request: pytest.FixtureRequest, tmp_path: Path) -> Cli:
    c = cli_for_backend(request, tmp_path, "alice")
    inv = tmp_path / "inv.ini"
    inv.write_text("[gpu]\ngpu-01 ansible_host=10.0.0.1\ngpu-02 ansible_host=10.0.0.2\n")
    c.run("enroll", "-i", str(inv))
    return c


def _raise(cli: Cli, host: str, kind: AlarmKind, message: str) -> None:
    """Raise an alarm the way collection does (service.alarms.raise_alarm)."""
    args = cli.global_args
    home = Path(args[args.index("--home") + 1])
    url = args[args.index("--db") + 1] if "--db" in args else None
    fleet = Fleet.open(home=home, url=url, actor="collector")
    try:
        with fleet.db.session() as s:
            raise_alarm(s, fleet, host_by_name(s, host), kind, AlarmSeverity.CRITICAL, message)
    finally:
        fleet.db.dispose()


def test_list_show_ack_resolve(cli: Cli) -> None:
    _raise(cli, "gpu-01", AlarmKind.HOST_KEY_CHANGED, "host key changed")
    _raise(cli, "gpu-02", AlarmKind.HOST_KEY_CHANGED, "host key changed too")
    rows = cli.json("alarms", "list")
    assert [(r["host"], r["kind"], r["severity"]) for r in rows] == [
        ("gpu-01", "host-key-changed", "critical"), ("gpu-02", "host-key-changed", "critical")
    ]
    first = rows[0]["id"]
    assert [r["host"] for r in cli.json("alarms", "list", "gpu-02")] == ["gpu-02"]
    cli.run("alarms", "list", "nope-*", code=4)

    shown = cli.json("alarms", "show", str(first))
    assert (shown["host"], shown["acknowledged_by"], shown["closed_at"]) == ("gpu-01", None, None)
    cli.run("alarms", "show", "999999", code=4)

    acked = cli.json("alarms", "ack", str(first), "--reason", "looking")
    assert acked["acknowledged_by"] == "alice" and acked["closed_at"] is None
    cli.run("alarms", "ack", str(first), code=2)  # twice: refused
    assert len(cli.json("alarms", "list")) == 2  # acknowledged alarms stay open

    cli.run("alarms", "resolve", str(first), code=2)  # --reason is required
    cli.run("alarms", "resolve", str(first), "--reason", "  ", code=2)
    done = cli.json("alarms", "resolve", str(first), "--reason", "reimaged, key verified")
    assert done["closed_at"] is not None
    assert done["reason"] == "resolved by alice: reimaged, key verified"
    cli.run("alarms", "resolve", str(first), "--reason", "again", code=2)

    assert [r["host"] for r in cli.json("alarms", "list")] == ["gpu-02"]
    assert [r["id"] for r in cli.json("alarms", "list", "--all")] == [first, rows[1]["id"]]

    events = cli.json("events", "gpu-01")
    kinds = [e["kind"] for e in events]
    assert "alarm-acknowledged" in kinds and "alarm-resolved" in kinds
    resolved = next(e for e in events if e["kind"] == "alarm-resolved")
    assert resolved["actor"] == "alice"
    assert resolved["data"]["reason"] == "reimaged, key verified"


def test_table_output(cli: Cli) -> None:
    _raise(cli, "gpu-01", AlarmKind.HOST_KEY_CHANGED, "host key changed")
    out = cli.run("alarms", "list").stdout
    assert "gpu-01" in out and "host-key-changed" in out
