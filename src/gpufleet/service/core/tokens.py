"""API tokens in the database: create (the token is shown once), list, revoke, authenticate.

A token is ``gft_`` + 43 URL-safe characters (32 random bytes); the database keeps only its
SHA-256 (a token has 256 bits of entropy, so a plain digest cannot be brute-forced and lets
the lookup be one indexed equality). Roles are ordered: ``viewer`` reads; ``operator`` also
acts on hosts and leases; ``admin`` may do everything, tokens included.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import IntEnum
from pathlib import Path

import yaml
from sqlalchemy import select

from gpufleet.domain.events import EventKind
from gpufleet.errors import ConfigError, Conflict, Forbidden, NotFound, Unauthorized
from gpufleet.service.core.fleet import Fleet, record_event
from gpufleet.store.tables import ApiToken

PREFIX = "gft_"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")


class Role(IntEnum):
    """What a token may do; a higher role may do everything a lower one may."""

    VIEWER = 1
    OPERATOR = 2
    ADMIN = 3

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, text: str, where: str = "role") -> Role:
        try:
            return cls[text.strip().upper()]
        except KeyError:
            roles = ", ".join(r.label for r in cls)
            raise ConfigError(f"{where} '{text}': unknown role (use {roles})") from None


@dataclass(frozen=True)
class Principal:
    """Who is calling: the token's name (recorded as the actor of its changes) and role."""

    name: str
    role: Role

    def require(self, role: Role, action: str) -> None:
        """Forbidden (403) unless this principal's role is at least ``role``."""
        if self.role < role:
            raise Forbidden(actor=f"{self.name} ({self.role.label})", action=action)


@dataclass(frozen=True)
class TokenInfo:
    """A token as ``token list`` shows it: never the token, never its digest."""

    name: str
    role: str
    created_at: datetime
    created_by: str
    expires_at: datetime | None
    revoked_at: datetime | None
    state: str  # active, expired, revoked


def token_digest(token: str) -> str:
    """The SHA-256 hex digest stored for ``token``."""
    return hashlib.sha256(token.encode()).hexdigest()


def _state(row: ApiToken, now: datetime) -> str:
    if row.revoked_at is not None:
        return "revoked"
    if row.expires_at is not None and row.expires_at <= now:
        return "expired"
    return "active"


def _info(row: ApiToken, now: datetime) -> TokenInfo:
    return TokenInfo(
        name=row.name,
        role=row.role,
        created_at=row.created_at,
        created_by=row.created_by,
        expires_at=row.expires_at,
        revoked_at=row.revoked_at,
        state=_state(row, now),
    )


def check_name(name: str) -> str:
    name = name.strip()
    if not _NAME.fullmatch(name):
        raise ConfigError(
            f"name '{name[:70]}': 1-64 letters, digits, '.', '_', '@' or '-', starting with a "
            "letter or digit"
        )
    return name


def create_token(
    fleet: Fleet, name: str, role: Role, expires: timedelta | None = None
) -> tuple[TokenInfo, str]:
    """A new token named ``name`` with ``role``; returns it with the secret, which is never
    stored (only its SHA-256) and cannot be shown again. A name held by an active token is a
    Conflict; a revoked or expired token's name is taken over (the audit log keeps both)."""
    name = check_name(name)
    secret = PREFIX + secrets.token_urlsafe(32)
    now = fleet.now()
    with fleet.db.session() as s:
        old = s.scalar(select(ApiToken).where(ApiToken.name == name).with_for_update())
        if old is not None:
            if _state(old, now) == "active":
                raise Conflict(
                    f"token '{name}' exists and is active: revoke it first "
                    f"(gpufleet token revoke {name}) or choose another name"
                )
            s.delete(old)
            s.flush()
        row = ApiToken(
            name=name,
            role=role.label,
            digest=token_digest(secret),
            created_at=now,
            created_by=fleet.actor,
            expires_at=now + expires if expires is not None else None,
        )
        s.add(row)
        info = _info(row, now)
        record_event(
            s,
            fleet,
            EventKind.TOKEN,
            f"token {name} created ({role.label}"
            + (f", expires {info.expires_at.isoformat()})" if info.expires_at else ")"),
            data={
                "action": "create",
                "name": name,
                "role": role.label,
                "expires_at": info.expires_at.isoformat() if info.expires_at else None,
            },
        )
    return info, secret


def list_tokens(fleet: Fleet, *, include_revoked: bool = True) -> list[TokenInfo]:
    """Every token by name, with its state; never a secret or digest."""
    now = fleet.now()
    with fleet.db.session() as s:
        rows = s.scalars(select(ApiToken).order_by(ApiToken.name)).all()
        out = [_info(r, now) for r in rows]
    return [t for t in out if include_revoked or t.state != "revoked"]


def revoke_token(fleet: Fleet, name: str) -> TokenInfo:
    """Revoke the token ``name`` at once (its next call is refused, 401); NotFound when no
    such token, a Conflict when it is already revoked."""
    now = fleet.now()
    with fleet.db.session() as s:
        row = s.scalar(select(ApiToken).where(ApiToken.name == name).with_for_update())
        if row is None:
            raise NotFound(f"no token named '{name[:70]}' (gpufleet token list)")
        if row.revoked_at is not None:
            raise Conflict(f"token '{name}' is already revoked")
        row.revoked_at = now
        record_event(
            s,
            fleet,
            EventKind.TOKEN,
            f"token {name} revoked",
            data={"action": "revoke", "name": name, "role": row.role},
        )
        return _info(row, now)


def any_tokens(fleet: Fleet) -> bool:
    """Whether the database holds any token (revoked ones count: the API stays closed)."""
    with fleet.db.session() as s:
        return s.scalar(select(ApiToken.id).limit(1)) is not None


def authenticate_token(fleet: Fleet, token: str) -> Principal | None:
    """The principal of an active database token; None when unknown, revoked or expired."""
    if not token.startswith(PREFIX):
        return None
    with fleet.db.session() as s:
        row = s.scalar(select(ApiToken).where(ApiToken.digest == token_digest(token)))
        if row is None or _state(row, fleet.now()) != "active":
            return None
        return Principal(name=row.name, role=Role.parse(row.role, f"token {row.name}"))


def record_api_call(
    fleet: Fleet, principal: Principal, method: str, path: str, status: int
) -> None:
    """One ``api-call`` event for a mutating call, under the token's name (never the body)."""
    with fleet.db.session() as s:
        record_event(
            s,
            fleet,
            EventKind.API_CALL,
            f"{method} {path} -> {status}",
            data={"method": method, "path": path, "status": status, "role": principal.role.label},
            actor=f"api:{principal.name}",
        )


# --- the tokens file (GPUFLEET_API_TOKENS_FILE) and the check of a bearer token -------------

_SHA256 = re.compile(r"[0-9a-f]{64}")


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

    def lookup(self, token: str) -> Principal | None:
        """The principal of ``token`` in the file; None when the file has no such digest."""
        if self.path is None:
            return None
        with self._lock:
            self._reload()
            return self._tokens.get(token_digest(token))


class Authenticator:
    """One server's check of ``Authorization: Bearer TOKEN``: database tokens (``gft_``) and
    the tokens file."""

    def __init__(self, fleet: Fleet, file: TokenStore) -> None:
        self.fleet = fleet
        self.file = file

    def configured(self) -> bool:
        """Whether any token can be accepted (a tokens file, or a token in the database)."""
        return self.file.path is not None or any_tokens(self.fleet)

    def token(self, token: str) -> Principal:
        """The principal of a bare token; Unauthorized (401) naming what to do."""
        token = token.strip()
        if token:
            found = (
                authenticate_token(self.fleet, token)
                if token.startswith(PREFIX)
                else self.file.lookup(token)
            )
            if found is not None:
                return found
        if not self.configured():
            raise Unauthorized(
                reason="no API tokens are configured (gpufleet token create, or "
                "GPUFLEET_API_TOKENS_FILE)"
            )
        if not token:
            raise Unauthorized(reason="send 'Authorization: Bearer TOKEN'")
        raise Unauthorized(reason="unknown, expired or revoked token")

    def authenticate(self, authorization: str | None) -> Principal:
        """The principal of an ``Authorization: Bearer TOKEN`` header; Unauthorized (401)."""
        scheme, _, token = (authorization or "").strip().partition(" ")
        if scheme.lower() != "bearer":
            token = ""
        return self.token(token)
