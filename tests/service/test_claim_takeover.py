"""Claims of a dead local process are taken over at once, on SQLite and PostgreSQL (issue 24,
item 11): ``gpufleet collect`` killed with SIGKILL while real sshd hosts hang leaves its
claims (nothing runs its clean-up; Ctrl-C releases them or leaves them to be taken over),
each naming its owner (boot id, pid, start time,
machine); the next collect sees that owner is gone from this boot and takes the hosts at
once instead of skipping them for minutes. A claim of a live process is still respected, and
a run that skipped held hosts does not exit 0: it exits 1 and names them.

Fail on main 84be469: the second collect skips both hosts (``all held elsewhere``, exit 6)
and a collect that skipped one host of two exits 0."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select
from tests.clitools import Cli, cli_for_backend, flat
from tests.sshlab_fixtures import SshLabFactory

from gpufleet.inventory import load_inventory
from gpufleet.lab.fleet import create_fleet, write_inventory
from gpufleet.service.core.claim_owner import boot_id, owner_gone, this_owner
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.collect import claim, collect
from gpufleet.service.hosts.enroll import enroll
from gpufleet.store.tables import Host


def _claims(fleet: Fleet) -> dict[str, tuple[str | None, str | None]]:
    with fleet.db.session() as s:
        return {h.name: (h.claim_token, h.claim_owner)
                for h in s.scalars(select(Host).order_by(Host.name))}


def test_owner_of_this_process_is_alive_and_a_dead_one_is_gone() -> None:
    me = this_owner()
    assert me is not None and me.startswith(f"{boot_id()} {os.getpid()} ")
    assert not owner_gone(me)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    parts = me.split(" ")
    stat = Path(f"/proc/{child.pid}/stat").read_text().rpartition(")")[2].split()
    theirs = f"{parts[0]} {child.pid} {stat[19]} {parts[3]}"
    assert not owner_gone(theirs)
    child.kill()
    child.wait()
    assert owner_gone(theirs)
    # a reused pid (another start time), another boot, another machine: only the first is gone
    assert owner_gone(f"{parts[0]} {os.getpid()} 1 {parts[3]}")
    assert not owner_gone(f"00000000-0000-0000-0000-000000000000 {child.pid} 1 {parts[3]}")
    assert not owner_gone(f"{parts[0]} {child.pid} {stat[19]} another-machine")
    assert not owner_gone(None) and not owner_gone("garbage")


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["kill-9", "ctrl-c"])
def test_killed_collect_claims_are_taken_over_at_once(
    fleet: Fleet, sshlab_factory: SshLabFactory, tmp_path: Path, sig: signal.Signals
) -> None:
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
        [sys.executable, "-c", "from gpufleet.cli.main import app; app()",
         "--home", str(tmp_path / "home"), "--db", fleet.db.url,
         "collect", "--timeout", "120", "--json"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while sum(tok is not None for tok, _ in _claims(fleet).values()) < 2:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the collector never claimed the hosts"
            time.sleep(0.1)
        time.sleep(1.0)  # connected, the script hangs
        proc.send_signal(sig)
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    held = _claims(fleet)
    if sig == signal.SIGKILL:
        assert proc.returncode == -signal.SIGKILL
        assert {tok for tok, _ in held.values()} != {None}, "SIGKILL runs no clean-up"
        owners = {who for _, who in held.values()}
        assert len(owners) == 1
        (owner,) = owners
        assert owner is not None and owner.split(" ")[1] == str(proc.pid)

    t0 = time.monotonic()
    rep = collect(fleet, timeout_s=3)
    took = time.monotonic() - t0
    assert rep.skipped_locked == []
    assert sorted(r.host for r in rep.results) == ["hang-1", "hang-2"]
    assert {r.outcome.value for r in rep.results} == {"timeout"}  # tried, not skipped
    assert took < 60, took
    assert {tok for tok, _ in _claims(fleet).values()} == {None}  # and released


@pytest.fixture(params=["sqlite", "postgres"])
def cli(request: pytest.FixtureRequest, tmp_path: Path) -> Cli:
    return cli_for_backend(request, tmp_path, "claims-test")


def test_a_live_claim_is_respected_and_skipping_is_not_success(
    cli: Cli, tmp_path: Path
) -> None:
    d = tmp_path / "lab"
    fl = create_fleet(3, models=["a100-8x"], faults={})
    fl.save(d)
    write_inventory(fl, d / "inventory.ini", transport="sim", lab_dir=d)
    cli.run("enroll", "-i", str(d / "inventory.ini"))
    url = cli.global_args[-1] if "--db" in cli.global_args else None
    other = Fleet.open(home=tmp_path / "home", url=url)  # a live worker (this process)
    try:
        claim(other, "gpu-02", None, timedelta(hours=1))
        r = cli.run("collect", code=1)
        out = flat(r.stdout + r.stderr)
        assert "1 hosts skipped: being collected by another worker: gpu-02" in out
        assert "2 hosts: 2 ok" in out
        rep = cli.json("collect", code=1)
        assert rep["skipped_locked"] == ["gpu-02"] and rep["counts"] == {"ok": 2}
        with other.db.session() as s:
            h = s.scalar(select(Host).where(Host.name == "gpu-02"))
            assert h is not None and h.claim_token is not None
            assert h.claim_owner == this_owner()  # held by this (live) process
    finally:
        other.db.dispose()
