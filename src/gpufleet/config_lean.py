"""The settings of the fast reads, without pydantic (issue 30 item 3, start-up).

:func:`gpufleet.config.load_settings` validates every ``GPUFLEET_*`` setting with pydantic
(~70 ms of imports). The lean starts of the quick reads (:mod:`gpufleet.cli.entry`) need two of
them, where the state lives: the home and the database URL. :func:`lean_store` gives them only
when it can tell they are exactly what :func:`~gpufleet.config.load_settings` would give and
that it would raise nothing and warn of nothing: no ``GPUFLEET_*`` variable set but the few this
module validates the same way (:data:`LEAN_VARIABLES`), each variable given once, the home
and the URL of a plain shape. Anything else is None, fail-closed: the caller takes the ordinary
path, which loads the settings with pydantic and reports what there is to report (an invalid
value, an unknown variable's warning, remote mode).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

#: ``GPUFLEET_*`` variables that are known but are not settings of this process (GPUFLEET_LANG:
#: the language of the messages, read by :mod:`gpufleet.i18n`).
NOT_SETTINGS = frozenset({"GPUFLEET_SYSROOT", "GPUFLEET_LANG"})

#: The variables :func:`lean_store` validates as the settings do; any other ``GPUFLEET_*``
#: variable set sends the command to the ordinary path.
LEAN_VARIABLES = frozenset({"GPUFLEET_HOME", "GPUFLEET_DATABASE_URL", "GPUFLEET_ACTOR"})

#: A PostgreSQL URL of the plain shape both SQLAlchemy and libpq read alike (user, password
#: without percent-escapes, host, port, database; no query).
_PG = re.compile(
    r"postgresql\+psycopg://(?:[A-Za-z0-9_.-]+(?::[A-Za-z0-9_.~-]*)?@)?"
    r"[A-Za-z0-9_.-]+(?::[0-9]{1,5})?/[A-Za-z0-9_.-]+"
)


@dataclass(frozen=True)
class LeanStore:
    """Where the state lives, as :class:`gpufleet.config.Settings` says it (``home``,
    ``database_url``; :meth:`db_url` as ``Settings.db_url``)."""

    home: Path
    database_url: str | None

    def db_url(self) -> str:
        """The database URL: ``database_url`` or SQLite in the home (nothing is created)."""
        return self.database_url or f"sqlite:///{self.home / 'gpufleet.db'}"


def lean_store(
    home: Path | None = None,
    database_url: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> LeanStore | None:
    """The home and database URL the settings would have, given the environment and the
    global options ``home`` / ``database_url`` (None: not given); None whenever the ordinary
    settings must be loaded (see the module's doc)."""
    env = os.environ if environ is None else environ
    given: dict[str, str] = {}
    for name, value in env.items():
        up = name.upper()
        if not up.startswith("GPUFLEET_") or up in NOT_SETTINGS:
            continue
        if up not in LEAN_VARIABLES or up in given:  # unknown, another setting, given twice
            return None
        given[up] = value
    actor = given.get("GPUFLEET_ACTOR")
    if actor is not None and not _valid_actor(actor):
        return None
    if home is None:
        home = Path(given["GPUFLEET_HOME"]) if "GPUFLEET_HOME" in given else default_home()
        if not given.get("GPUFLEET_HOME", "x").strip():
            return None  # an empty home: the settings' own reading
    home = home.expanduser()
    if home.exists() and not home.is_dir():
        return None
    url = database_url if database_url is not None else given.get("GPUFLEET_DATABASE_URL")
    if url == "":
        url = None
    if url is not None and not _plain_url(url):
        return None
    return LeanStore(home=home, database_url=url)


def default_home() -> Path:
    """``~/.local/share/gpufleet`` (``GPUFLEET_HOME`` / ``--home`` override it)."""
    return Path.home() / ".local" / "share" / "gpufleet"


def _valid_actor(value: str) -> bool:
    """What ``Settings``' actor check accepts."""
    v = value.strip()
    return bool(v) and len(v) <= 128 and not any(ord(c) < 32 or 0x7F <= ord(c) < 0xA0 for c in v)


def _plain_url(url: str) -> bool:
    """A database URL of a shape the lean reads open and the settings accept."""
    if url.startswith("sqlite:///"):
        path = url.removeprefix("sqlite:///")
        return bool(path) and not any(c in path for c in "?#%") and not path.startswith(":")
    return _PG.fullmatch(url) is not None
