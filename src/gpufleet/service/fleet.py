"""The application context every use case receives: database, actor, clock, settings."""

from __future__ import annotations

import getpass
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from gpufleet.domain.events import EventKind
from gpufleet.store.db import Database, database_url, default_home
from gpufleet.store.tables import Event, Host


def utcnow() -> datetime:
    """Current time, timezone-aware (the only clock services read)."""
    return datetime.now(UTC)


def default_actor() -> str:
    """``$GPUFLEET_ACTOR`` (e.g. a CI job id) or the OS user."""
    env = os.environ.get("GPUFLEET_ACTOR")
    if env:
        return env
    try:
        return getpass.getuser()
    except Exception:  # no passwd entry in some containers
        return "unknown"


@dataclass
class Settings:
    """Tunables with production defaults."""

    validation_ttl: timedelta = timedelta(days=30)
    validating_deadline: timedelta = timedelta(hours=2)
    reclaiming_deadline: timedelta = timedelta(minutes=30)
    collect_timeout_s: float = 120.0
    connect_timeout_s: float = 10.0
    forks: int = 200
    profiles_file: Path | None = None
    xid_policy_file: Path | None = None

    @classmethod
    def from_env(cls) -> Settings:
        """Defaults overridden by ``GPUFLEET_*`` environment variables (documented in README)."""
        s = cls()
        env = os.environ
        if v := env.get("GPUFLEET_PROFILES"):
            s.profiles_file = Path(v)
        if v := env.get("GPUFLEET_XID_POLICY"):
            s.xid_policy_file = Path(v)
        if v := env.get("GPUFLEET_VALIDATION_TTL_HOURS"):
            s.validation_ttl = timedelta(hours=float(v))
        if v := env.get("GPUFLEET_VALIDATING_DEADLINE_MINUTES"):
            s.validating_deadline = timedelta(minutes=float(v))
        if v := env.get("GPUFLEET_RECLAIMING_DEADLINE_MINUTES"):
            s.reclaiming_deadline = timedelta(minutes=float(v))
        return s


@dataclass
class Fleet:
    """One gpufleet deployment as seen by this process."""

    db: Database
    home: Path
    actor: str = field(default_factory=default_actor)
    clock: Callable[[], datetime] = utcnow
    settings: Settings = field(default_factory=Settings.from_env)

    @classmethod
    def open(cls, home: Path | None = None, url: str | None = None, **kw: Any) -> Fleet:
        """Open (and migrate) the fleet database under ``home`` or at ``url``."""
        home = home or default_home()
        home.mkdir(parents=True, exist_ok=True)
        db = Database(url or database_url(home))
        db.migrate()
        return cls(db=db, home=home, **kw)

    def now(self) -> datetime:
        return self.clock()


def record_event(
    session: Any,
    fleet: Fleet,
    kind: EventKind,
    message: str,
    *,
    host: Host | None = None,
    data: dict[str, Any] | None = None,
    actor: str | None = None,
) -> Event:
    """Append one event to the audit log (inside the caller's transaction)."""
    ev = Event(
        at=fleet.now(),
        actor=actor or fleet.actor,
        host_id=host.id if host is not None else None,
        host_name=host.name if host is not None else None,
        kind=kind,
        message=message,
        data=data or {},
    )
    session.add(ev)
    return ev
