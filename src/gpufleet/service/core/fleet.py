"""The application context every use case receives: database, actor, clock, settings."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpufleet.config import Settings, default_actor, load_settings, with_overrides
from gpufleet.domain.events import EventKind
from gpufleet.errors import LocalIOError
from gpufleet.store.db import Database
from gpufleet.store.tables import Event, Host

__all__ = ["Fleet", "Settings", "record_event", "utcnow"]


def utcnow() -> datetime:
    """Current time, timezone-aware (the only clock services read)."""
    return datetime.now(UTC)


@dataclass
class Fleet:
    """One gpufleet deployment as seen by this process: database, actor, clock, settings."""

    db: Database
    home: Path
    actor: str = field(default_factory=default_actor)
    clock: Callable[[], datetime] = utcnow
    settings: Settings = field(default_factory=load_settings)
    #: Merged into the ``data`` of every event recorded through this fleet (an event's own
    #: keys win): a campaign run tags everything it changes with its ticket and name.
    event_data: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def open(
        cls,
        home: Path | None = None,
        url: str | None = None,
        *,
        settings: Settings | None = None,
        **kw: Any,
    ) -> Fleet:
        """Open the fleet database of ``settings`` (default: the environment's); a brand-new
        SQLite one is created, any other must be at this gpufleet's schema (`gpufleet db upgrade`).

        ``home`` and ``url`` override the settings' home and database URL. The settings are
        validated before anything is created: the home directory is made only then.
        """
        if settings is None:
            settings = load_settings(home=home, database_url=url)
        else:
            settings = with_overrides(settings, home=home, database_url=url)
        try:
            settings.home.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise LocalIOError(
                path=f"GPUFLEET_HOME {settings.home}",
                cause=f"cannot create the state directory: {exc.strerror or exc}",
            ) from exc
        db = Database(settings.db_url())
        db.ensure_current()
        kw.setdefault("actor", settings.actor)
        return cls(db=db, home=settings.home, settings=settings, **kw)

    def __post_init__(self) -> None:
        # What the store stamps on its own (the placement summary) reads this fleet's clock.
        self.db.clock = self.now

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
        data={**fleet.event_data, **(data or {})},
    )
    session.add(ev)
    return ev
