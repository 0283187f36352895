"""One home of gpufleet's SSH connect and host-key options (issue 25, item 5): the transport
that opens a connection per run and the one that keeps connections open take the same
``asyncssh.connect`` keywords from :func:`connect_options`; Ansible (campaign playbooks)
checks the same pinned keys through :func:`known_hosts_line` and
:func:`openssh_pin_options`. Keys are generated here (no tool output is involved)."""

from __future__ import annotations

import asyncssh
import pytest

from gpufleet.collect.hostkeys import known_hosts_line, openssh_pin_options
from gpufleet.collect.ssh import (
    _KeyCheck,
    auth_methods,
    connect_options,
    host_key_pin,
    openssh_line,
)
from gpufleet.collect.transport import Target

KEY = openssh_line(asyncssh.generate_private_key("ssh-ed25519"))
FINGERPRINT = "SHA256:" + "A" * 43


def test_the_pin_is_a_key_a_fingerprint_or_nothing() -> None:
    assert host_key_pin(Target("h", "10.0.0.1")) == (None, None)
    assert host_key_pin(Target("h", "10.0.0.1", pinned_host_key=FINGERPRINT)) == (None, FINGERPRINT)
    key, expected = host_key_pin(Target("h", "10.0.0.1", pinned_host_key=KEY))
    assert key is not None and openssh_line(key) == KEY and expected is None
    with pytest.raises((asyncssh.KeyImportError, ValueError)):
        host_key_pin(Target("h", "10.0.0.1", pinned_host_key="ssh-ed25519 not-base64"))


def test_the_connect_options_pin_the_key_and_offer_the_password_last() -> None:
    target = Target("h", "10.0.0.1", user="ops", pinned_host_key=KEY, password="s3cret")
    pinned, expected = host_key_pin(target)
    check = _KeyCheck(pinned, expected)
    opts = connect_options(target, check, None, ("/dev/null",))
    assert opts["client_factory"]() is check
    assert opts["known_hosts"] == ([pinned], [], [])
    assert opts["server_host_key_algs"][0] == "ssh-ed25519"  # the pinned type first
    assert opts["username"] == "ops" and opts["config"] == ("/dev/null",)
    assert opts["preferred_auth"] == auth_methods(target) == ("publickey", "password")
    assert (opts["password"], opts["password_auth"], opts["kbdint_auth"]) == ("s3cret", True, False)
    assert opts["client_keys"] == opts["agent_path"] == ()  # () = asyncssh's defaults
    plain = connect_options(Target("h", "10.0.0.1"), _KeyCheck(None), [], ())
    assert plain["known_hosts"] == ([], [], []) and plain["username"] == ()
    assert plain["preferred_auth"] == ("publickey",) and plain["password_auth"] is False
    assert plain["agent_path"] is None  # a key file given: only that key, no agent


def test_ansible_checks_the_same_pinned_keys() -> None:
    assert known_hosts_line("10.0.0.1", 22, KEY + "\n") == f"10.0.0.1 {KEY}"
    assert known_hosts_line("10.0.0.1", 2222, KEY) == f"[10.0.0.1]:2222 {KEY}"
    assert known_hosts_line("10.0.0.1", 22, FINGERPRINT) is None  # OpenSSH cannot check it
    assert known_hosts_line("10.0.0.1", 22, None) is None
    assert openssh_pin_options("/tmp/a b/known_hosts") == (
        "-o UserKnownHostsFile='/tmp/a b/known_hosts' -o StrictHostKeyChecking=yes"
    )
