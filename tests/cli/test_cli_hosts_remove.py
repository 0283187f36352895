"""``gpufleet hosts remove`` and ``hosts rekey`` through the CLI, on SQLite and PostgreSQL
(issue 6 C.16): what is removed, what the audit log keeps, refusals and exit codes."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import text
from tests.clitools import Cli, cli_for_backend, flat

from gpufleet.cli.main import app
from gpufleet.store.db import Database

ACTOR = "cli-remove-test"
#: Tables holding rows per host that ``hosts remove`` deletes.
HOST_TABLES = ("fact_snapshots", "gpus", "nics", "collection_results", "validations")


@pytest.fixture(params=["sqlite", "postgres"])
def gf(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Cli, Database]]:
    c = cli_for_backend(request, tmp_path, ACTOR)
    lab = tmp_path / "lab"
    c.run("lab", "create", "--hosts", "4", "--model", "h100-8x", "--dir", str(lab))
    c.run("enroll", "-i", str(lab / "inventory.ini"))
    c.run("validate")  # collects: facts, GPU/NIC rows, collection results, validations
    url = (
        request.getfixturevalue("pg_database_url")
        if request.param == "postgres"
        else f"sqlite:///{tmp_path / 'home' / 'gpufleet.db'}"
    )
    db = Database(url)
    yield c, db
    db.dispose()


def _host_id(db: Database, name: str) -> int:
    with db.engine.connect() as c:
        row = c.execute(text("SELECT id FROM hosts WHERE name = :n"), {"n": name})
        return int(row.scalar_one())


def _rows(db: Database, host_id: int) -> dict[str, int]:
    with db.engine.connect() as c:
        return {
            t: int(
                c.execute(
                    text(f"SELECT count(*) FROM {t} WHERE host_id = :h"), {"h": host_id}
                ).scalar_one()
            )
            for t in HOST_TABLES
        }


def _set(db: Database, name: str, **values: object) -> None:
    cols = ", ".join(f"{k} = :{k}" for k in values)
    with db.engine.begin() as c:
        c.execute(text(f"UPDATE hosts SET {cols} WHERE name = :name"), {**values, "name": name})


def test_remove_deletes_the_host_and_keeps_its_events(gf: tuple[Cli, Database]) -> None:
    cli, db = gf
    hid = _host_id(db, "gpu-02")
    before = _rows(db, hid)
    assert all(before[t] >= 1 for t in ("fact_snapshots", "gpus", "collection_results")), before
    assert before["validations"] >= 1
    events_before = cli.json("events", "gpu-02", "--limit", "500")
    other = _rows(db, _host_id(db, "gpu-03"))

    # Without --yes it asks; "no" removes nothing (exit 1).
    r = cli.runner.invoke(
        app,
        [*cli.global_args, "hosts", "remove", "gpu-02"],
        input="n\n",
        env=cli.env,
    )
    assert r.exit_code == 1 and "nothing removed" in r.stderr
    assert cli.state("gpu-02") == "available"

    out = cli.run("hosts", "remove", "gpu-02", "--yes", "--reason", "sold").stdout
    assert flat(out) == "gpu-02: removed (was available)"
    cli.run("hosts", "list", "gpu-02", code=4)
    cli.run("hosts", "show", "gpu-02", code=4)
    assert _rows(db, hid) == dict.fromkeys(HOST_TABLES, 0)
    assert _rows(db, _host_id(db, "gpu-03")) == other  # the others untouched

    # The audit log keeps every earlier event and a host-removed event with the last state.
    after = cli.json("events", "gpu-02", "--limit", "500")
    assert after[1:] == events_before
    gone = after[0]
    assert (gone["kind"], gone["actor"], gone["host"]) == ("host-removed", ACTOR, "gpu-02")
    assert gone["data"]["state"] == "available" and gone["data"]["reason"] == "sold"
    assert gone["data"]["snapshots"] == before["fact_snapshots"]
    with db.engine.connect() as c:
        ids = c.execute(text("SELECT host_id FROM events WHERE host_name = 'gpu-02'")).scalars()
        assert set(ids) == {None}

    # The name can be enrolled again later: a fresh host, its old history still in the log.
    assert len(cli.json("hosts", "list")) == 3
    cli.run("enroll", "-i", str(cli.tmp / "lab" / "inventory.ini"))
    assert cli.state("gpu-02") == "enrolled"
    again = cli.json("events", "gpu-02", "--limit", "500")
    assert again[0]["kind"] == "enrolled" and again[1:] == after


def test_remove_refusals_and_exit_codes(gf: tuple[Cli, Database]) -> None:
    cli, db = gf
    cli.run("hosts", "remove", "gpu-99", "--yes", code=4)
    cli.run("hosts", "remove", "rack:nowhere", "--yes", code=4)
    r = cli.run("hosts", "remove", "all", "--yes", code=2)
    assert "name the hosts" in flat(r.stderr)

    # Allocated (no allocate command yet: set in the database): refused, exit 5.
    _set(db, "gpu-01", state="allocated")
    r = cli.run("hosts", "remove", "gpu-01", "--yes", code=5)
    assert "gpu-01" in flat(r.stderr) and "allocated" in flat(r.stderr)

    # Claimed by a running collection: refused, exit 6 (retry later).
    until = datetime.now(UTC) + timedelta(minutes=5)
    _set(db, "gpu-03", claim_token="0" * 36, claimed_until=until)
    r = cli.run("hosts", "remove", "gpu-03", "--yes", code=6)
    assert "claimed by a running collection" in flat(r.stderr)

    # A selector: the refusals stay, the rest go; the exit code is the first refusal's.
    hid = _host_id(db, "gpu-04")
    r = cli.run("hosts", "remove", "gpu-0*", "--yes", code=5)
    assert "gpu-02: removed (was available)" in flat(r.stdout)
    assert "gpu-04: removed (was available)" in flat(r.stdout)
    assert [h["name"] for h in cli.json("hosts", "list")] == ["gpu-01", "gpu-03"]
    assert _rows(db, hid) == dict.fromkeys(HOST_TABLES, 0)
    assert [e["kind"] for e in cli.json("events", "--kind", "host-removed")] == [
        "host-removed",
        "host-removed",
    ]

    # An expired claim (a crashed worker) does not block removal.
    _set(db, "gpu-03", claimed_until=datetime.now(UTC) - timedelta(minutes=5))
    cli.run("hosts", "remove", "gpu-03", "--yes")


def test_rekey_cli_exit_codes_and_event(gf: tuple[Cli, Database]) -> None:
    cli, _ = gf
    cli.run("hosts", "rekey", "gpu-99", code=4)
    r = cli.run("hosts", "rekey", "gpu-01", "--fingerprint", "MD5:aa:bb", code=2)
    assert "not an SSH SHA256 fingerprint" in flat(r.stderr)
    fp = "SHA256:" + "A" * 43
    r = cli.run("hosts", "rekey", "gpu-0*", "--fingerprint", fp, code=2)
    assert "matches 4 hosts" in flat(r.stderr)
    shown = cli.json("hosts", "show", "gpu-01")
    old = shown["host_key"]
    assert old  # the sim lab's key, pinned by the first collection

    out = cli.run("hosts", "rekey", "gpu-01", "--fingerprint", fp, "--reason", "OPS-9").stdout
    assert f"next collection accepts only {fp}" in flat(out)
    assert cli.json("hosts", "show", "gpu-01")["host_key"] == fp
    (ev,) = cli.json("events", "gpu-01", "--kind", "host-key-rekeyed")
    assert ev["actor"] == ACTOR and ev["data"]["expected"] == fp and ev["data"]["reason"] == "OPS-9"
    assert ev["data"]["old"].startswith("SHA256:")

    # The sim host offers another key: refused, with the alarm.
    r = cli.run("collect", "gpu-01", code=1)
    assert "host key changed" in flat(r.stdout)
    assert cli.json("events", "gpu-01", "--kind", "alarm")

    # Without --fingerprint: first use again, the sim's key is pinned by the next collection.
    cli.run("hosts", "rekey", "gpu-01")
    assert cli.json("hosts", "show", "gpu-01")["host_key"] is None
    cli.run("collect", "gpu-01")
    assert cli.json("hosts", "show", "gpu-01")["host_key"] == old
