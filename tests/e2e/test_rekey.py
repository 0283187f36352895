"""Accepting a new SSH host key (issue 6 C.16) on real sshd hosts, SQLite and PostgreSQL.

A host whose key changed is refused during key exchange (nothing runs on it: the lab's fake
tools log every call) and raises an alarm; ``rekey`` releases the pin (first use again) or pins
the fingerprint the operator read on the console; a host that now offers only a key of another
type is a host-key change too, not "unreachable".
"""

from __future__ import annotations

from pathlib import Path

import asyncssh
import pytest
from tests.sshlab import SshLab
from tests.sshlab_fixtures import SshLabFactory, sample_sections

from gpufleet.collect.transport import Outcome, fingerprint
from gpufleet.errors import ConfigError, NotFound
from gpufleet.inventory import load_inventory
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.collect import collect
from gpufleet.service.hosts.enroll import enroll
from gpufleet.service.hosts.operations import rekey_hosts
from gpufleet.service.views.hosts import list_events, show_host

pytestmark = pytest.mark.sshlab

HOST = "gpu-01"


def _one_host(fleet: Fleet, factory: SshLabFactory, tmp_path: Path) -> SshLab:
    """One real sshd host, enrolled and collected once (its ed25519 key pinned)."""
    lab = factory()
    t = lab.add_host(HOST, sample_sections(HOST))
    lab.start()
    inv = tmp_path / "hosts.ini"
    inv.write_text(
        f"[gpu]\n{HOST} ansible_host={t.address} ansible_port={t.port} ansible_user={t.user}\n"
        f"\n[gpu:vars]\nansible_ssh_private_key_file={lab.client_key}\n"
    )
    enroll(fleet, load_inventory(inv))
    (r,) = collect(fleet, HOST, timeout_s=30).results
    assert r.outcome is Outcome.OK, r.reason
    assert show_host(fleet, HOST).host_key == lab.host_public_key(HOST)
    return lab


def _collect(fleet: Fleet) -> tuple[Outcome, str]:
    (r,) = collect(fleet, HOST, timeout_s=30).results
    return r.outcome, r.reason


def _kinds(fleet: Fleet) -> list[str]:
    return [e["kind"] for e in reversed(list_events(fleet, HOST, limit=500))]


def _refused_without_running(fleet: Fleet, lab: SshLab, expect_in_reason: str) -> None:
    """The next collection is refused as a host-key change, with an alarm, and runs nothing."""
    calls = len(lab.calls(HOST))
    alarms = _kinds(fleet).count("alarm")
    outcome, reason = _collect(fleet)
    assert outcome is Outcome.HOST_KEY_CHANGED, reason
    assert expect_in_reason in reason
    assert len(lab.calls(HOST)) == calls  # refused during key exchange: nothing ran
    assert _kinds(fleet).count("alarm") == alarms + 1
    assert show_host(fleet, HOST).view.fault == "host_key_changed"


def test_rekey_after_rotation_pins_the_next_key(
    fleet: Fleet, sshlab_factory: SshLabFactory, tmp_path: Path
) -> None:
    lab = _one_host(fleet, sshlab_factory, tmp_path)
    old = lab.host_public_key(HOST)
    new = lab.rotate_host_key(HOST)
    _refused_without_running(fleet, lab, fingerprint(new))

    (done,) = rekey_hosts(fleet, HOST, "reimaged, ticket OPS-7")
    assert (done.error, done.old, done.expected) == (None, fingerprint(old), None)
    assert show_host(fleet, HOST).host_key is None
    (ev,) = list_events(fleet, HOST, kind="host-key-rekeyed")
    assert ev["actor"] == "pytest"
    assert ev["data"] == {
        "old": fingerprint(old),
        "expected": None,
        "reason": "reimaged, ticket OPS-7",
    }

    calls = len(lab.calls(HOST))
    assert _collect(fleet) == (Outcome.OK, "")
    assert len(lab.calls(HOST)) > calls
    assert show_host(fleet, HOST).host_key == new
    assert _kinds(fleet).count("host-key-pinned") == 2
    # The host stays quarantined for the key change until an operator lifts it.
    assert show_host(fleet, HOST).view.state == "quarantined"


def test_rekey_with_fingerprint_accepts_only_that_key(
    fleet: Fleet, sshlab_factory: SshLabFactory, tmp_path: Path
) -> None:
    lab = _one_host(fleet, sshlab_factory, tmp_path)
    new = lab.rotate_host_key(HOST)
    stranger = asyncssh.generate_private_key("ssh-ed25519").export_public_key("openssh")
    wrong = fingerprint(stranger.decode())

    (done,) = rekey_hosts(fleet, HOST, "reimaged", wrong)
    assert done.expected == wrong
    _refused_without_running(fleet, lab, f"expected {wrong}, offered {fingerprint(new)}")
    assert show_host(fleet, HOST).host_key == wrong  # still waiting for that key

    rekey_hosts(fleet, HOST, "console says so", fingerprint(new))
    calls = len(lab.calls(HOST))
    assert _collect(fleet) == (Outcome.OK, "")
    assert len(lab.calls(HOST)) > calls
    assert show_host(fleet, HOST).host_key == new  # the full key once it matched
    pinned = list_events(fleet, HOST, kind="host-key-pinned")[0]
    assert pinned["data"] == {"fingerprint": fingerprint(new), "expected": fingerprint(new)}
    # ... and from then on it is an ordinary pin.
    assert _collect(fleet) == (Outcome.OK, "")


@pytest.mark.parametrize("key_type", ["ssh-rsa", "ecdsa-sha2-nistp256"])
def test_key_type_change_is_a_host_key_change(
    fleet: Fleet, sshlab_factory: SshLabFactory, tmp_path: Path, key_type: str
) -> None:
    """Pinned ed25519, the host now offers only another type: not "unreachable"."""
    lab = _one_host(fleet, sshlab_factory, tmp_path)
    new = lab.rotate_host_key(HOST, key_type)
    assert new.split()[0] == key_type
    _refused_without_running(fleet, lab, f"offered {fingerprint(new)} ({key_type})")

    rekey_hosts(fleet, HOST, "new key type", fingerprint(new))
    assert _collect(fleet) == (Outcome.OK, "")
    assert show_host(fleet, HOST).host_key == new


def test_rekey_refusals(fleet: Fleet, sshlab_factory: SshLabFactory, tmp_path: Path) -> None:
    _one_host(fleet, sshlab_factory, tmp_path)
    key = show_host(fleet, HOST).host_key
    with pytest.raises(NotFound):
        rekey_hosts(fleet, "gpu-99", "typo")
    with pytest.raises(ConfigError, match="not an SSH SHA256 fingerprint"):
        rekey_hosts(fleet, HOST, "typo", "SHA256:short")
    with pytest.raises(ConfigError, match="name the hosts"):
        rekey_hosts(fleet, "all", "everything")
    assert show_host(fleet, HOST).host_key == key  # nothing changed
    assert list_events(fleet, HOST, kind="host-key-rekeyed") == []
