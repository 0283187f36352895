"""SshTransport against real sshd hosts on loopback (the ssh lab)."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace

import asyncssh
import pytest
from tests.sshlab import SshLab
from tests.sshlab_fixtures import SshLabFactory, sample_sections

from gpufleet.collect.bundle import Section, split_bundle
from gpufleet.collect.script import remote_script
from gpufleet.collect.ssh import SshTransport
from gpufleet.collect.transport import Outcome, RawResult, Target, run_many

pytestmark = pytest.mark.sshlab

SCRIPT = remote_script()
VARIANTS = ("healthy", "driver-down", "no-gpu")
NVIDIA = ("nvidia-smi-xml", "nvidia-smi-q", "topo-m", "nvlink-s")
GENEROUS_S = 120.0  # a loaded 2-core machine can be slow; only the hang test is tight


def collect(target: Target, timeout_s: float = GENEROUS_S,
            transport: SshTransport | None = None) -> RawResult:
    return asyncio.run((transport or SshTransport()).run(target, SCRIPT, timeout_s))


def fingerprint(key: str) -> str:
    return str(asyncssh.import_public_key(key).get_fingerprint("sha256"))


@pytest.fixture(scope="module")
def lab(sshlab_factory: SshLabFactory) -> Iterator[SshLab]:
    lab = sshlab_factory()
    for v in VARIANTS:
        lab.add_host(f"rt-{v}", sample_sections(f"rt-{v}", v))
    lab.add_host("tofu", sample_sections("tofu"))
    lab.start()
    yield lab
    lab.stop()


def target(lab: SshLab, name: str) -> Target:
    return next(t for t in lab.targets() if t.name == name)


@pytest.mark.parametrize("variant", VARIANTS)
def test_round_trip_reproduces_every_section(lab: SshLab, variant: str) -> None:
    given = sample_sections(f"rt-{variant}", variant)
    res = collect(target(lab, f"rt-{variant}"))
    assert res.outcome is Outcome.OK, res.reason
    assert res.reason == ""
    assert res.output is not None
    got = split_bundle(res.output)
    for name, sec in given.items():
        assert got[name] == sec, name
    if variant == "no-gpu":  # no section -> no tool, as on a host without a driver
        for name in NVIDIA:
            assert got[name].rc == 127
            assert "nvidia-smi" in got[name].stderr


def test_set_sections_changes_the_answer_without_restart(lab: SshLab) -> None:
    name = "rt-healthy"
    upgraded = dict(sample_sections(name))
    upgraded["modules"] = Section("modules", "nvidia 99 0 - Live 0x0 (POE)", "", 0)
    upgraded["ibstat"] = Section("ibstat", "", "ibpanic: [ibstat] failed", 255)
    pid_before = lab.sshd_pids()
    lab.set_sections(name, upgraded)
    try:
        res = collect(target(lab, name))
        assert res.output is not None
        got = split_bundle(res.output)
        assert got["modules"] == upgraded["modules"]
        assert got["ibstat"] == upgraded["ibstat"]
        assert lab.sshd_pids() == pid_before
    finally:
        lab.set_sections(name, sample_sections(name))


def test_tofu_returns_the_key_and_pinning_it_succeeds(lab: SshLab) -> None:
    t = target(lab, "tofu")
    first = collect(t)
    assert first.outcome is Outcome.OK, first.reason
    assert first.host_key == lab.host_public_key("tofu")
    assert first.host_key is not None and first.host_key.startswith("ssh-ed25519 AAAA")
    second = collect(replace(t, pinned_host_key=first.host_key))
    assert second.outcome is Outcome.OK, second.reason
    assert second.host_key == first.host_key
    assert second.output is not None and split_bundle(second.output)["hostname"].stdout == "tofu"


def test_output_over_the_cap_is_bad_output(lab: SshLab) -> None:
    res = collect(target(lab, "rt-healthy"),
                  transport=SshTransport(max_output_bytes=1000))
    assert res.outcome is Outcome.BAD_OUTPUT
    assert "1000 bytes" in res.reason


def test_silent_server_times_out_while_connecting() -> None:
    # Listening but never accepting: TCP connects, the SSH banner never comes.
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        port = srv.getsockname()[1]
        start = time.monotonic()
        res = collect(Target("mute", "127.0.0.1", port, user="x"),
                      transport=SshTransport(connect_timeout_s=1.0))
    assert res.outcome is Outcome.TIMEOUT
    assert res.reason == "no answer within 1 s (connecting)"
    assert time.monotonic() - start < 30


def test_unreadable_client_key_is_an_error_not_unreachable(lab: SshLab) -> None:
    res = collect(replace(target(lab, "tofu"), key_file="/nonexistent/key"))
    assert res.outcome is Outcome.ERROR
    assert "cannot load client key" in res.reason


@dataclass
class _ShortTimeoutFor:
    """Gives chosen hosts a short timeout inside one run_many sweep (the hang host)."""

    inner: SshTransport
    short: dict[str, float]
    name: str = "ssh"

    async def run(self, target: Target, script: str, timeout_s: float) -> RawResult:
        return await self.inner.run(target, script, self.short.get(target.name, timeout_s))


def test_many_hosts_concurrently_with_every_failure(sshlab_factory: SshLabFactory) -> None:
    lab = sshlab_factory()
    ok = [f"gpu{i:02d}" for i in range(20)]
    for name in ok:
        lab.add_host(name, sample_sections(name, "no-gpu" if name == "gpu07" else "healthy"))
    lab.add_host("badkey", sample_sections("badkey"), mode="wrong-key")
    lab.add_host("down", sample_sections("down"), mode="stopped")
    lab.add_host("hung", sample_sections("hung"), mode="hang")
    lab.add_host("moved", sample_sections("moved"))
    lab.start()

    first = collect(target(lab, "moved"))
    assert first.outcome is Outcome.OK and first.host_key is not None
    calls_before = lab.calls("moved")
    new_key = lab.rotate_host_key("moved")
    targets = [replace(t, pinned_host_key=first.host_key) if t.name == "moved" else t
               for t in lab.targets()]

    transport = _ShortTimeoutFor(SshTransport(), {"hung": 3.0})
    start = time.monotonic()
    results = {r.host: r for r in asyncio.run(
        run_many(transport, targets, SCRIPT, timeout_s=GENEROUS_S))}
    wall = time.monotonic() - start

    for name in ok:
        r = results[name]
        assert r.outcome is Outcome.OK, (name, r.reason)
        assert r.output is not None
        got = split_bundle(r.output)
        assert got["hostname"].stdout == name
        assert got["nvidia-smi-xml"].rc == (127 if name == "gpu07" else 0)
    assert results["badkey"].outcome is Outcome.AUTH_FAILED
    assert results["badkey"].reason == "gpufleetlab@127.0.0.1: Permission denied (publickey)"
    assert results["down"].outcome is Outcome.UNREACHABLE
    assert "Connection refused" in results["down"].reason
    assert results["hung"].outcome is Outcome.TIMEOUT
    assert results["hung"].reason == "no answer within 3 s (command still running)"
    moved = results["moved"]
    assert moved.outcome is Outcome.HOST_KEY_CHANGED
    assert fingerprint(first.host_key) in moved.reason
    assert fingerprint(new_key) in moved.reason
    assert moved.host_key == new_key and moved.output is None
    assert lab.calls("moved") == calls_before  # nothing ran on the host
    # The hang bounds the sweep: everything else ran alongside it, not after it.
    assert wall < 3.0 + 60
    print(f"\n24 hosts (20 ok + 4 failing) in {wall:.2f} s")

    start = time.monotonic()
    oks = asyncio.run(run_many(SshTransport(), [t for t in targets if t.name in ok], SCRIPT,
                               timeout_s=GENEROUS_S))
    print(f"20 ok hosts in {time.monotonic() - start:.2f} s")
    assert all(r.outcome is Outcome.OK for r in oks)

    lab.stop()
    assert lab.sshd_pids() == []
