"""API authentication: bearer tokens with a role, from ``GPUFLEET_API_TOKENS_FILE``.

The file is YAML, one entry per token, keyed by the **SHA-256 hex digest** of the token (the
token itself is never stored)::

    # printf %s "$TOKEN" | sha256sum
    3f1c...e9: viewer
    a81b...04: {role: operator, name: ci-pipeline}

Roles are ordered: ``viewer`` reads; ``operator`` also acts on hosts and leases (allocate,
renew, release, record failures, acknowledge alarms); ``admin`` may do everything
(maintenance, and what later rounds add). The file is read again when it changes, so a
removed line revokes its token without a restart. No file configured: every call is refused
(401): the API fails closed.
"""

from __future__ import annotations

import hashlib
import re
import threading
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path

import yaml

from gpufleet.errors import ConfigError, Forbidden, Unauthorized

_SHA256 = re.compile(r"[0-9a-f]{64}")


class Role(IntEnum):
    """What a token may do; a higher role may do everything a lower one may."""

    VIEWER = 1
    OPERATOR = 2
    ADMIN = 3

    @property
    def label(self) -> str:
        return self.name.lower()


@dataclass(frozen=True)
class Principal:
    """Who is calling: the token's name (recorded as the actor of its changes) and role."""

    name: str
    role: Role

    def require(self, role: Role, action: str) -> None:
        """Forbidden (403) unless this principal's role is at least ``role``."""
        if self.role < role:
            raise Forbidden(actor=f"{self.name} ({self.role.label})", action=action)


def token_digest(token: str) -> str:
    """The SHA-256 hex digest a tokens file stores for ``token``."""
    return hashlib.sha256(token.encode()).hexdigest()


def parse_tokens(path: Path, text: str) -> dict[str, Principal]:
    """digest -> principal from the tokens file's text; ConfigError naming file and entry."""
    where = f"GPUFLEET_API_TOKENS_FILE {path}"
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{where}{line}: not YAML ({getattr(exc, 'problem', exc)})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping of SHA-256 digest -> role")
    out: dict[str, Principal] = {}
    roles = ", ".join(r.label for r in Role)
    for key, value in data.items():
        digest = str(key).strip().lower()
        if not _SHA256.fullmatch(digest):
            raise ConfigError(
                f"{where}: entry '{str(key)[:8]}...' is not a SHA-256 hex digest (store "
                "printf %s TOKEN | sha256sum, never the token itself)"
            )
        name = f"token-{digest[:8]}"
        role_text = value
        if isinstance(value, dict):
            role_text = value.get("role")
            name = str(value.get("name") or name)
        try:
            role = Role[str(role_text).upper()]
        except KeyError:
            raise ConfigError(
                f"{where}: token {digest[:8]}...: unknown role '{role_text}' (use {roles})"
            ) from None
        out[digest] = Principal(name=name, role=role)
    return out


class TokenStore:
    """The tokens of one server, re-read from the file when its modification time changes."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._tokens: dict[str, Principal] = {}
        if path is not None:
            self._reload()  # a bad file stops the server at start, not at the first call

    def _reload(self) -> None:
        assert self.path is not None
        try:
            st = self.path.stat()
            stamp = (st.st_mtime_ns, st.st_size)
            if stamp == self._stamp:
                return
            text = self.path.read_text()
        except OSError as exc:
            raise ConfigError(
                f"GPUFLEET_API_TOKENS_FILE {self.path}: cannot read ({exc.strerror or exc})"
            ) from None
        self._tokens = parse_tokens(self.path, text)
        self._stamp = stamp

    def authenticate(self, authorization: str | None) -> Principal:
        """The principal of an ``Authorization: Bearer TOKEN`` header; Unauthorized (401)."""
        if self.path is None:
            raise Unauthorized(reason="no API tokens are configured (GPUFLEET_API_TOKENS_FILE)")
        if not authorization:
            raise Unauthorized(reason="send 'Authorization: Bearer TOKEN'")
        scheme, _, token = authorization.strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthorized(reason="send 'Authorization: Bearer TOKEN'")
        with self._lock:
            self._reload()
            principal = self._tokens.get(token_digest(token.strip()))
        if principal is None:
            raise Unauthorized(reason="unknown or revoked token")
        return principal
