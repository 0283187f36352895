"""SSH connections kept open by default (issue 25, item 3), over real sshd lab hosts: the
process's engine keeps each host's connection for its next run (one login, counted by sshd
itself, for two collections), closes it after ``GPUFLEET_SSH_IDLE_S`` unused (the server's
per-connection process goes away), and a host whose sshd is killed fails closed
(``unreachable``, its kept connection dropped) while the next run after its restart
connects again; a kept connection is used only under the pin of the run that takes it, one
whose peer went silent is dropped and the host connected again once, and a process that
exits closes what it kept. On SQLite and PostgreSQL (the exit test: a CLI on SQLite)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import select
from tests.sshlab import SshLab, _descendants
from tests.sshlab_fixtures import SshLabFactory

from gpufleet.collect.ssh_pool import SshConnections
from gpufleet.collect.transport import Outcome
from gpufleet.inventory import load_inventory
from gpufleet.lab.fleet import create_fleet
from gpufleet.lab.renderers import render_sections
from gpufleet.service.core.engine import engine
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.collect import collect
from gpufleet.service.hosts.enroll import enroll
from gpufleet.service.views.hosts import show_host
from gpufleet.store.tables import Host

pytestmark = pytest.mark.sshlab
GPUFLEET = str(Path(sys.executable).with_name("gpufleet"))


def _lab(fleet: Fleet, factory: SshLabFactory, tmp_path: Path, n: int = 2) -> SshLab:
    lf = create_fleet(n, models=["a100-8x"], faults={})
    lab = factory()
    targets = {h.name: lab.add_host(h.name, render_sections(h), password_auth=True)
               for h in lf.hosts}
    lab.start()
    lines = ["[gpu_lab]"]
    lines += [f"{name} ansible_host={t.address} ansible_port={t.port} ansible_user={t.user}"
              for name, t in targets.items()]
    lines += ["", "[gpu_lab:vars]", f"ansible_ssh_private_key_file={lab.client_key}",
              "gpufleet_gpu_count=8"]
    inv = tmp_path / "hosts.ini"
    inv.write_text("\n".join(lines) + "\n")
    enroll(fleet, load_inventory(inv))
    return lab


def _logins(lab: SshLab, name: str) -> int:
    return lab.sshd_log(name).count("Accepted publickey")


def _sessions(lab: SshLab, name: str) -> int:
    """The host's sshd per-connection processes (the server side of each open connection)."""
    proc = lab._host(name).proc
    return len(_descendants(proc.pid)) if proc is not None else 0


def _kept() -> SshConnections:
    return engine().keep("ssh", SshConnections)


def _outcomes(fleet: Fleet) -> dict[str, Outcome]:
    return {r.host: r.outcome for r in collect(fleet, timeout_s=20).results}


def test_a_second_collection_reuses_the_connection(
    fleet: Fleet, sshlab_factory: SshLabFactory, tmp_path: Path
) -> None:
    lab = _lab(fleet, sshlab_factory, tmp_path)
    before = _kept().connects
    reused = _kept().reused
    assert _outcomes(fleet) == {"gpu-01": Outcome.OK, "gpu-02": Outcome.OK}
    assert _outcomes(fleet) == {"gpu-01": Outcome.OK, "gpu-02": Outcome.OK}
    assert _kept().connects - before == 2  # one handshake per host for both collections
    assert _kept().reused - reused >= 2
    for name in ("gpu-01", "gpu-02"):
        assert _logins(lab, name) == 1, lab.sshd_log(name)  # sshd saw one login per host
        assert _sessions(lab, name) >= 1  # and the connection is still open


def test_an_idle_connection_closes_after_the_idle_time(
    fleet: Fleet, sshlab_factory: SshLabFactory, tmp_path: Path
) -> None:
    fleet.settings.ssh_idle_s = 5.0  # long enough to see it kept on a loaded machine
    lab = _lab(fleet, sshlab_factory, tmp_path, n=1)
    expired = _kept().expired
    assert _outcomes(fleet) == {"gpu-01": Outcome.OK}
    assert _sessions(lab, "gpu-01") >= 1  # kept open after the run
    deadline = time.monotonic() + 30
    while _sessions(lab, "gpu-01") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _sessions(lab, "gpu-01") == 0  # the server saw it close
    assert _kept().expired - expired >= 1  # (the process's: an earlier test's may expire too)
    assert _outcomes(fleet) == {"gpu-01": Outcome.OK}  # the next run connects again
    assert _logins(lab, "gpu-01") == 2


def test_no_idle_time_closes_every_connection_after_its_run(
    fleet: Fleet, sshlab_factory: SshLabFactory, tmp_path: Path
) -> None:
    fleet.settings.ssh_idle_s = 0
    lab = _lab(fleet, sshlab_factory, tmp_path, n=1)
    assert _outcomes(fleet) == {"gpu-01": Outcome.OK}
    assert _outcomes(fleet) == {"gpu-01": Outcome.OK}
    assert _logins(lab, "gpu-01") == 2


def test_a_killed_sshd_fails_the_host_closed_and_the_next_run_reconnects(
    fleet: Fleet, sshlab_factory: SshLabFactory, tmp_path: Path
) -> None:
    lab = _lab(fleet, sshlab_factory, tmp_path)
    assert _outcomes(fleet) == {"gpu-01": Outcome.OK, "gpu-02": Outcome.OK}
    lab.stop_host("gpu-01")  # sshd and its sessions killed; the port refuses connections
    got = _outcomes(fleet)
    assert got == {"gpu-01": Outcome.UNREACHABLE, "gpu-02": Outcome.OK}
    assert show_host(fleet, "gpu-01").view.last_outcome == Outcome.UNREACHABLE.value
    lab.start_host("gpu-01")
    assert _outcomes(fleet) == {"gpu-01": Outcome.OK, "gpu-02": Outcome.OK}
    assert _logins(lab, "gpu-01") == 2  # connected again after the restart
    assert _logins(lab, "gpu-02") == 1  # the other host kept its connection throughout


def test_a_kept_connection_is_checked_against_the_pin_of_each_run(
    fleet: Fleet, sshlab_factory: SshLabFactory, tmp_path: Path
) -> None:
    """The host is pinned to another key while its connection is kept (an operator's
    ``hosts rekey --fingerprint``): the kept connection is dropped, never used, and the
    fresh connection is refused as a changed key."""
    lab = _lab(fleet, sshlab_factory, tmp_path, n=1)
    assert _outcomes(fleet) == {"gpu-01": Outcome.OK}
    assert _sessions(lab, "gpu-01") >= 1
    dropped = _kept().dropped
    with fleet.db.session() as s:
        h = s.scalars(select(Host).where(Host.name == "gpu-01")).one()
        assert h.host_key == lab.host_public_key("gpu-01")  # pinned on first use
        h.host_key = "SHA256:" + "A" * 43
    assert _outcomes(fleet) == {"gpu-01": Outcome.HOST_KEY_CHANGED}
    assert _kept().dropped - dropped == 1
    assert _logins(lab, "gpu-01") == 1  # refused during key exchange: no second login


def test_a_kept_connection_whose_peer_went_silent_is_dropped_and_reconnected_once(
    fleet: Fleet, sshlab_factory: SshLabFactory, tmp_path: Path
) -> None:
    """The server side of a kept connection stops answering (its sshd process frozen, as a
    peer gone behind a dropped NAT entry): the next run cannot open a session on it within
    the connect timeout, drops it before sending anything, connects again and collects."""
    fleet.settings.connect_timeout_s = 2.0
    lab = _lab(fleet, sshlab_factory, tmp_path, n=1)
    assert _outcomes(fleet) == {"gpu-01": Outcome.OK}
    proc = lab._host("gpu-01").proc
    assert proc is not None
    frozen = _descendants(proc.pid)
    assert frozen
    for pid in frozen:
        os.kill(pid, signal.SIGSTOP)
    try:
        dropped = _kept().dropped
        calls = len(lab.calls("gpu-01"))
        assert _outcomes(fleet) == {"gpu-01": Outcome.OK}
        assert _kept().dropped - dropped == 1
        assert _logins(lab, "gpu-01") == 2
        assert len(lab.calls("gpu-01")) > calls  # the script ran once more, on the new one
    finally:
        for pid in frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_a_process_that_exits_closes_its_kept_connections(
    sshlab_factory: SshLabFactory, tmp_path: Path
) -> None:
    """``gpufleet collect`` ends: the engine closes the connection it kept (an SSH disconnect
    the server logs, not a dropped socket), and no session is left on the host."""
    lf = create_fleet(1, models=["a100-8x"], faults={})
    lab = sshlab_factory()
    t = lab.add_host("gpu-01", render_sections(lf.hosts[0]), password_auth=True)
    lab.start()
    inv = tmp_path / "hosts.ini"
    inv.write_text(f"[g]\ngpu-01 ansible_host={t.address} ansible_port={t.port} "
                   f"ansible_user={t.user} ansible_ssh_private_key_file={lab.client_key} "
                   "gpufleet_gpu_count=8\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    home = ["--home", str(tmp_path / "home")]
    subprocess.run([GPUFLEET, *home, "enroll", "-i", str(inv)], env=env, check=True,
                   capture_output=True, timeout=120)
    got = subprocess.run([GPUFLEET, *home, "collect"], env=env, capture_output=True, text=True,
                         timeout=120)
    assert got.returncode == 0, got.stdout + got.stderr
    deadline = time.monotonic() + 10
    while _sessions(lab, "gpu-01") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _sessions(lab, "gpu-01") == 0
    log = lab.sshd_log("gpu-01")
    assert log.count("Accepted publickey") == 1
    assert "Received disconnect" in log and "Disconnected by application" in log, log
