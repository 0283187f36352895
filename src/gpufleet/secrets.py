"""Secrets from inventories: which variables are secret, how they are redacted and sealed.

A variable is secret when its name contains ``pass``, ``secret``, ``token`` or ``key``
(``ansible_ssh_pass``, ``ansible_become_password``, ``vault_token``, ``api_key``), unless it
names a key *file* or another non-secret setting (``ansible_ssh_private_key_file``,
``ansible_host_key_checking``). Secret values are never printed and never stored in clear:
:func:`seal_vars` encrypts them with Fernet (``cryptography``) under the operator's key,
``$GPUFLEET_SECRET_KEY`` or the file named by ``$GPUFLEET_SECRET_KEY_FILE``. Without a key an
inventory holding a secret is refused (fail closed) with a message saying how to give one.

The key is read from the environment by :func:`secret_key_from_env` (a small reader of its
own until configuration loading moves into one place).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken

from gpufleet.errors import ConfigError

__all__ = [
    "KEY_ENV",
    "KEY_FILE_ENV",
    "REDACTED",
    "SEALED_PREFIX",
    "SSH_PASSWORD_VARS",
    "SecretBox",
    "is_secret_var",
    "redact_text",
    "redact_vars",
    "secret_key_from_env",
    "ssh_password",
]

KEY_ENV = "GPUFLEET_SECRET_KEY"
KEY_FILE_ENV = "GPUFLEET_SECRET_KEY_FILE"
#: What a secret value is shown as.
REDACTED = "<redacted>"
#: Prefix of a sealed (encrypted) value in the hosts table.
SEALED_PREFIX = "fernet:"

_SECRET_WORD = re.compile(r"pass|secret|token|key", re.IGNORECASE)
# Names that contain one of the words but hold a path or a setting, not a secret.
_NOT_SECRET_SUFFIX = re.compile(r"_(?:file|path|dir|checking)$", re.IGNORECASE)
_NOT_SECRET = frozenset(
    {
        "ansible_ssh_private_key_file",
        "ansible_private_key_file",
        "ansible_host_key_checking",
        "ansible_ssh_host_key_checking",
        "ansible_password_prompt",
    }
)

HOW_TO_KEY = (
    f"set {KEY_ENV} to a Fernet key, or {KEY_FILE_ENV} to a file holding one "
    "(make one with: python -c 'from cryptography.fernet import Fernet; "
    "print(Fernet.generate_key().decode())'), or remove the variable from the inventory"
)


def is_secret_var(name: str) -> bool:
    """True when the variable ``name`` holds a secret (see the module docstring)."""
    low = name.lower()
    if low in _NOT_SECRET or _NOT_SECRET_SUFFIX.search(low):
        return False
    return _SECRET_WORD.search(low) is not None


def redact_vars(values: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``values`` with every secret value replaced by :data:`REDACTED`."""
    return {k: (REDACTED if is_secret_var(k) and v != "" else v) for k, v in values.items()}


_ASSIGNMENT = re.compile(r"""(?P<key>[\w.-]+)(?P<sep>\s*[=:]\s*)(?P<value>"[^"]*"?|'[^']*'?|\S*)""")


def redact_text(text: str) -> str:
    """``text`` (an inventory line) with the values of secret ``key=value`` pairs redacted."""

    def sub(m: re.Match[str]) -> str:
        if is_secret_var(m["key"]) and m["value"]:
            return m["key"] + m["sep"] + REDACTED
        return m.group(0)

    return _ASSIGNMENT.sub(sub, text)


def secret_key_from_env(environ: Mapping[str, str] | None = None) -> bytes | None:
    """The operator's Fernet key from ``$GPUFLEET_SECRET_KEY`` or ``$GPUFLEET_SECRET_KEY_FILE``.

    None when neither is set; :class:`ConfigError` when the key file cannot be read.
    """
    env = os.environ if environ is None else environ
    raw = env.get(KEY_ENV, "").strip()
    if raw:
        return raw.encode()
    path = env.get(KEY_FILE_ENV, "").strip()
    if not path:
        return None
    try:
        text = Path(path).expanduser().read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{KEY_FILE_ENV}={path}: cannot read the key file: {exc}") from None
    if not text:
        raise ConfigError(f"{KEY_FILE_ENV}={path}: the key file is empty")
    return text.encode()


class SecretBox:
    """Seals and opens secret values with one Fernet key."""

    def __init__(self, key: bytes) -> None:
        try:
            self._fernet = Fernet(key)
        except (ValueError, TypeError):
            raise ConfigError(
                f"the secret key ({KEY_ENV} / {KEY_FILE_ENV}) is not a Fernet key "
                "(32 url-safe base64-encoded bytes); " + HOW_TO_KEY
            ) from None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> SecretBox | None:
        """The box for the operator's key, or None when no key is configured."""
        key = secret_key_from_env(environ)
        return None if key is None else cls(key)

    def seal(self, value: str) -> str:
        """``value`` encrypted, as stored: ``fernet:<token>``."""
        return SEALED_PREFIX + self._fernet.encrypt(value.encode()).decode()

    def open(self, sealed: str) -> str:
        """The clear value of a sealed one; :class:`ConfigError` with a different key."""
        if not sealed.startswith(SEALED_PREFIX):
            raise ConfigError("not a sealed secret value")
        try:
            return self._fernet.decrypt(sealed[len(SEALED_PREFIX) :].encode()).decode()
        except InvalidToken:
            raise ConfigError(
                "a stored secret cannot be decrypted with this key "
                f"({KEY_ENV} / {KEY_FILE_ENV} differs from the one it was sealed with)"
            ) from None

    def same(self, sealed: str | None, clear: str) -> bool:
        """True when ``sealed`` holds ``clear`` (False for another key or a clear value)."""
        if sealed is None or not sealed.startswith(SEALED_PREFIX):
            return False
        try:
            return self.open(sealed) == clear
        except ConfigError:
            return False


#: Inventory variables holding the SSH login password, in the order ansible-core's ssh plugin
#: resolves them (a later spelling in its ``vars`` list wins, so the first one set here wins).
SSH_PASSWORD_VARS = ("ansible_ssh_password", "ansible_ssh_pass", "ansible_password")


def ssh_password(host_vars: Mapping[str, str], key: Callable[[], bytes | None]) -> str | None:
    """The clear SSH password of a host from its stored (sealed) variables; None when none.

    ``key`` gives the operator's key (``Settings.secret_key_bytes``) and is only called when a
    password is stored. :class:`ConfigError` naming the variable and ``GPUFLEET_SECRET_KEY``
    when the password cannot be opened (no key, another key) or was stored in clear. The
    message never holds the value.
    """
    var = next((v for v in SSH_PASSWORD_VARS if host_vars.get(v)), None)
    if var is None:
        return None
    sealed = host_vars[var]
    if not sealed.startswith(SEALED_PREFIX):
        raise ConfigError(
            f"{var} is stored unencrypted; enroll the inventory again with {KEY_ENV} "
            f"(or {KEY_FILE_ENV}) set"
        )
    raw = key()
    if raw is None:
        raise ConfigError(
            f"{var} is stored encrypted and no secret key is set: set {KEY_ENV} (or "
            f"{KEY_FILE_ENV}) to the key it was enrolled with"
        )
    try:
        return SecretBox(raw).open(sealed)
    except ConfigError as exc:
        raise ConfigError(f"{var}: {exc}") from None
