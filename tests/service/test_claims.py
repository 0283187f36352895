"""B.10: collection claims are never left behind, on SQLite and PostgreSQL.

A bad transport is refused before anything is claimed (or fails only its host); Ctrl-C,
SIGTERM (a real subprocess) and a database error release the claims; a claim lasts as long as
the work needs; a collect that got nothing because every host is held elsewhere says so and
exits non-zero.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.exc import DatabaseError
from tests.clitools import Cli, cli_for_backend, flat
from tests.sshlab_fixtures import SshLabFactory

from gpufleet.collect.transport import Outcome, RawResult
from gpufleet.errors import ConfigError, GpufleetError
from gpufleet.inventory import load_inventory
from gpufleet.lab.demo import enroll_lab
from gpufleet.lab.fleet import create_fleet, write_inventory
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.collect import claim, collect
from gpufleet.service.hosts.enroll import enroll
from gpufleet.store.tables import Host


def lab(fleet: Fleet, tmp_path: Path, n: int = 4) -> Path:
    d = tmp_path / "lab"
    enroll_lab(fleet, d, n, models=["a100-8x"], faults={})
    return d


def _token(h: Host) -> str | None:
    # (named lock_token before schema 0002: read either, so this file also runs on c1fac72)
    return getattr(h, "claim_token", getattr(h, "lock_token", None))


def _until(h: Host) -> datetime | None:
    return getattr(h, "claimed_until", getattr(h, "locked_until", None))


def claims(fleet: Fleet) -> dict[str, str | None]:
    with fleet.db.session() as s:
        return {h.name: _token(h) for h in s.scalars(select(Host).order_by(Host.name))}


def no_claims(fleet: Fleet) -> bool:
    return all(v is None for v in claims(fleet).values())


def test_unknown_transport_option_is_refused_before_any_claim(
    fleet: Fleet, tmp_path: Path
) -> None:
    lab(fleet, tmp_path)
    with pytest.raises(ConfigError, match="unknown transport 'shh'"):
        collect(fleet, transport="shh")
    assert no_claims(fleet)
    assert len(collect(fleet).results) == 4  # nothing was left held


def test_unknown_transport_variable_fails_only_that_host(fleet: Fleet, tmp_path: Path) -> None:
    lab(fleet, tmp_path)
    # Enroll refuses unknown names now; a host enrolled earlier may still name a transport
    # whose plugin has since been uninstalled.
    with fleet.db.session() as s:
        h = s.scalars(select(Host).where(Host.name == "gpu-03")).one()
        h.vars = {**h.vars, "gpufleet_transport": "simm"}
    rep = collect(fleet)
    by = {r.host: r for r in rep.results}
    assert by["gpu-03"].outcome is Outcome.ERROR and "simm" in by["gpu-03"].reason
    assert all(by[n].outcome is Outcome.OK for n in ("gpu-01", "gpu-02", "gpu-04"))
    assert not rep.ok
    assert no_claims(fleet)


def _refuse_snapshots_of(fleet: Fleet, host_id: int) -> list[str]:
    """DDL that makes the real database refuse to store a snapshot of ``host_id`` (and the
    DDL that undoes it): the database gives out while that one host is stored."""
    if fleet.db.dialect == "postgresql":
        return [
            "CREATE FUNCTION pytest_refuse() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN RAISE EXCEPTION 'disk I/O error'; END $$",
            "CREATE TRIGGER pytest_refuse BEFORE INSERT ON fact_snapshots FOR EACH ROW "
            f"WHEN (NEW.host_id = {host_id}) EXECUTE FUNCTION pytest_refuse()",
        ], ["DROP TRIGGER pytest_refuse ON fact_snapshots", "DROP FUNCTION pytest_refuse()"]
    return [
        "CREATE TRIGGER pytest_refuse BEFORE INSERT ON fact_snapshots "
        f"WHEN NEW.host_id = {host_id} BEGIN SELECT RAISE(ABORT, 'disk I/O error'); END",
    ], ["DROP TRIGGER pytest_refuse"]


def _ddl(fleet: Fleet, statements: list[str]) -> None:
    with fleet.db.engine.begin() as conn:
        for sql in statements:
            conn.exec_driver_sql(sql)


def test_database_error_while_storing_releases_every_claim(fleet: Fleet, tmp_path: Path) -> None:
    lab(fleet, tmp_path)
    with fleet.db.session() as s:
        host_id = s.scalars(select(Host.id).where(Host.name == "gpu-02")).one()
    refuse, undo = _refuse_snapshots_of(fleet, host_id)
    _ddl(fleet, refuse)
    try:
        with pytest.raises((DatabaseError, GpufleetError), match="disk I/O error"):
            collect(fleet)
        assert no_claims(fleet)
    finally:
        _ddl(fleet, undo)
    assert len(collect(fleet).results) == 4


def test_ctrl_c_releases_every_claim(fleet: Fleet, tmp_path: Path) -> None:
    lab(fleet, tmp_path)
    seen: list[str] = []

    def interrupt(r: RawResult) -> None:
        seen.append(r.host)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        collect(fleet, forks=1, on_result=interrupt)
    assert seen
    assert no_claims(fleet)
    assert len(collect(fleet).results) == 4


def test_claim_lasts_in_proportion_to_the_work(fleet: Fleet, tmp_path: Path) -> None:
    lab(fleet, tmp_path, n=10)
    fleet.settings.connect_timeout_s = 5
    start = fleet.now()
    leases: list[timedelta] = []

    def look(_n: int) -> None:
        with fleet.db.session() as s:
            leases.extend(u - start for h in s.scalars(select(Host)) if (u := _until(h)))

    collect(fleet, forks=3, timeout_s=20, on_start=look)
    # 10 hosts, 3 at once: claimed in batches of 3 as slots free up (the other 7 stay free
    # for other workers), each batch one wave of up to 20 + 5 s plus a minute of slack.
    assert leases == [timedelta(seconds=25 + 60)] * 3
    leases.clear()
    collect(fleet, forks=50, timeout_s=20, on_start=look)
    assert leases == [timedelta(seconds=25 + 60)] * 10


def test_collection_claims_in_batches_so_workers_split_it(fleet: Fleet, tmp_path: Path) -> None:
    """Hosts are claimed `forks` at a time as the run goes: another worker that claims hosts
    after this run started gets them, and this run skips them (each host collected once)."""
    lab(fleet, tmp_path, n=6)
    other: list[list[str]] = []

    def another_worker_claims(_r: RawResult) -> None:
        if not other:  # the first result: gpu-01/02 claimed and running, the rest still free
            _run, held, _busy = claim(fleet, "gpu-05,gpu-06", None, timedelta(minutes=5))
            other.append(sorted(c.target.name for c in held))

    rep = collect(fleet, forks=2, on_result=another_worker_claims)
    assert other == [["gpu-05", "gpu-06"]]
    assert sorted(r.host for r in rep.results) == ["gpu-01", "gpu-02", "gpu-03", "gpu-04"]
    assert all(r.outcome is Outcome.OK for r in rep.results)
    assert rep.skipped_locked == ["gpu-05", "gpu-06"] and not rep.all_held_elsewhere
    with fleet.db.session() as s:
        held = {h.name: _token(h) for h in s.scalars(select(Host))}
    assert sorted(n for n, t in held.items() if t is not None) == ["gpu-05", "gpu-06"]  # theirs


def test_running_collection_renews_its_claims(fleet: Fleet, tmp_path: Path) -> None:
    from gpufleet.service.hosts.collect import renew_claims

    lab(fleet, tmp_path, n=2)
    _run, held, _ = claim(fleet, None, None, timedelta(minutes=1))
    fleet.clock.advance(seconds=50)  # type: ignore[attr-defined]
    assert renew_claims(fleet, held[0].token, timedelta(minutes=1)) == 2
    fleet.clock.advance(seconds=50)  # type: ignore[attr-defined]
    rep = collect(fleet)  # the first claim would have run out; the renewed one holds
    assert rep.results == [] and rep.skipped_locked == ["gpu-01", "gpu-02"]


def test_all_hosts_held_elsewhere_is_not_success(fleet: Fleet, tmp_path: Path) -> None:
    lab(fleet, tmp_path, n=2)
    claim(fleet, None, None, timedelta(minutes=5))
    rep = collect(fleet)
    assert rep.all_held_elsewhere and not rep.ok


@pytest.fixture(params=["sqlite", "postgres"])
def cli(request: pytest.FixtureRequest, tmp_path: Path) -> Cli:
    return cli_for_backend(request, tmp_path, "claims-test")


def test_cli_says_when_every_host_is_held_elsewhere(cli: Cli, tmp_path: Path) -> None:
    d = tmp_path / "lab"
    fl = create_fleet(2, models=["a100-8x"], faults={})
    fl.save(d)
    write_inventory(fl, d / "inventory.ini", transport="sim", lab_dir=d)
    cli.run("enroll", "-i", str(d / "inventory.ini"))
    cli.run("collect")
    url = cli.global_args[-1] if "--db" in cli.global_args else None
    other = Fleet.open(home=tmp_path / "home", url=url)  # another worker holds both hosts
    claim(other, None, None, timedelta(hours=1))
    other.db.dispose()
    r = cli.run("collect", code=6)
    assert "nothing collected" in flat(r.stdout + r.stderr)
    assert "2 hosts" in flat(r.stdout + r.stderr)


# ----------------------------------------------------- SIGTERM, with a real subprocess


def test_sigterm_releases_claims(
    fleet: Fleet, sshlab_factory: SshLabFactory, tmp_path: Path
) -> None:
    """``gpufleet collect`` killed with SIGTERM while real sshd hosts hang: it exits, and
    leaves no host claimed."""
    lab_ = sshlab_factory()
    targets = [lab_.add_host(f"hang-{i}", {}, mode="hang") for i in (1, 2)]
    lab_.start()
    inv = tmp_path / "hosts.ini"
    inv.write_text("\n".join(
        f"{t.name} ansible_host={t.address} ansible_port={t.port} ansible_user={t.user} "
        f"ansible_ssh_private_key_file={t.key_file}" for t in targets) + "\n")
    enroll(fleet, load_inventory(inv))
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    proc = subprocess.Popen(
        [sys.executable, "-c", "from gpufleet.cli.entry import main; main()",
         "--home", str(tmp_path / "home"), "--db", fleet.db.url,
         "collect", "--timeout", "120", "--json"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while sum(v is not None for v in claims(fleet).values()) < 2:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the collector never claimed the hosts"
            time.sleep(0.1)
        time.sleep(1.0)  # connected, the script hangs
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, err.decode()
    assert b"Traceback" not in err
    assert no_claims(fleet)
