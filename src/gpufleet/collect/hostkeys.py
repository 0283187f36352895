"""Pinned SSH host keys: a full OpenSSH public key, or an operator's expected fingerprint.

``Host.host_key`` (and :attr:`~gpufleet.collect.transport.Target.pinned_host_key`) holds one of:

- ``None``: nothing pinned; the next collection trusts the key it is offered (first use);
- ``ssh-ed25519 AAAA...``: the key pinned on first use; any other key is refused;
- ``SHA256:...``: set by ``gpufleet hosts rekey HOST --fingerprint``: only a key with that
  fingerprint is accepted, and once one is, the store keeps that full key instead.
"""

from __future__ import annotations

import re
import shlex

from gpufleet.collect.transport import fingerprint
from gpufleet.errors import ConfigError

#: OpenSSH's SHA256 fingerprint: the unpadded base64 of a 32-byte digest.
_FINGERPRINT = re.compile(r"^SHA256:[A-Za-z0-9+/]{43}$")


def is_fingerprint_pin(pin: str | None) -> bool:
    """True when ``pin`` is an expected fingerprint rather than a full key."""
    return pin is not None and pin.startswith("SHA256:")


def check_fingerprint(text: str) -> str:
    """``text`` as a SHA256 fingerprint (``ssh-keygen -lf`` prints it); ConfigError if not."""
    value = text.strip()
    if not _FINGERPRINT.match(value):
        raise ConfigError(
            f"--fingerprint: {text!r} is not an SSH SHA256 fingerprint "
            "(expected SHA256: and 43 base64 characters, as 'ssh-keygen -lf KEY.pub' prints it)"
        )
    return value


def pin_fingerprint(pin: str) -> str:
    """The fingerprint a pin stands for (the pin itself when it is one)."""
    return pin if is_fingerprint_pin(pin) else fingerprint(pin)


def pin_accepts(pin: str, key: str) -> bool:
    """True when the offered public key line ``key`` satisfies ``pin``."""
    if is_fingerprint_pin(pin):
        return fingerprint(key) == pin
    return pin.split()[:2] == key.split()[:2]


def known_hosts_line(address: str, port: int, pin: str | None) -> str | None:
    """The OpenSSH ``known_hosts`` line of a host's pinned key (``[address]:port`` off port
    22); None when nothing or only a fingerprint is pinned (OpenSSH cannot check that)."""
    if not pin or is_fingerprint_pin(pin):
        return None
    where = address if port == 22 else f"[{address}]:{port}"
    return f"{where} {pin.strip()}"


def openssh_pin_options(known_hosts: str) -> str:
    """OpenSSH client options that check the keys gpufleet pinned (written to ``known_hosts``
    by :func:`known_hosts_line`) and never trust a new one on first use."""
    return f"-o UserKnownHostsFile={shlex.quote(known_hosts)} -o StrictHostKeyChecking=yes"
