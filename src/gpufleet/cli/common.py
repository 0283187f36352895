"""Shared CLI plumbing: settings and the fleet from global options, JSON output, literal text,
one error boundary.

Errors: every error ends in one line ``error: MESSAGE`` on stderr and the error's exit code
(:mod:`gpufleet.errors`); database and local I/O failures that escape a service are turned into
:class:`~gpufleet.errors.StoreError` / :class:`~gpufleet.errors.LocalIOError` (exit 2). With
``--json`` the error is printed instead as ``{"error": {"code", "message", "retryable"}}`` on
**stdout**, where the caller already reads the command's JSON (stderr stays empty); the exit
code is the same. ``--debug`` adds the traceback on stderr.

Literal text: text from remote hosts and operators (host names, reasons, tool output) is shown
as it is. :func:`lit` escapes Rich markup in a value put into a markup string or table cell,
and both consoles replace terminal control characters (ESC, CSI, OSC, other C0/C1 controls,
bidi overrides) by visible ``\\xNN`` escapes when they print, so no escape sequence from a
host reaches the operator's terminal. JSON output keeps values faithful (JSON-escaped).
"""

from __future__ import annotations

import errno
import logging
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from enum import Enum
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, cast

from gpufleet.errors import GpufleetError, LocalIOError, StoreError, StoreUnavailable

if TYPE_CHECKING:
    import typer

    from gpufleet.cli.console import SafeConsole
    from gpufleet.config import Settings
    from gpufleet.service.core.fleet import Fleet

    console: SafeConsole
    err_console: SafeConsole

#: Terminal control characters: C0 except tab and newline, DEL, C1, and the bidi overrides.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _visible(m: re.Match[str]) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def printable(text: str) -> str:
    """``text`` with every terminal control character replaced by a visible escape
    (``\\x1b``), so that it cannot move the cursor, retitle the window or hide itself."""
    return _CONTROL.sub(_visible, text)


def lit(value: object) -> str:
    """A value shown literally inside Rich markup (a table cell, an f-string printed):
    markup characters escaped, control characters made visible; None as ``-``."""
    if value is None:
        return "-"
    from rich.markup import escape

    return escape(printable(str(value)))


def __getattr__(name: str) -> Any:
    """``console``, ``err_console`` (:class:`~gpufleet.cli.console.SafeConsole`) and the class
    itself, made on first use: Rich costs ~100 ms of start-up, and a command printing JSON
    or plain text needs none of it (issue 8)."""
    if name in ("console", "err_console", "SafeConsole"):
        from gpufleet.cli import console as made

        globals().update(
            console=made.console, err_console=made.err_console, SafeConsole=made.SafeConsole
        )
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _err_console() -> SafeConsole:
    return __getattr__("err_console")  # type: ignore[no-any-return]


_log = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")


@dataclass
class GlobalOptions:
    """Options given before the command (``gpufleet --home DIR hosts list``)."""

    home: Path | None = None
    db_url: str | None = None
    debug: bool = False
    #: ``--utc``: read times without a zone as UTC, and show times in UTC.
    utc: bool = False
    #: ``--wide`` of the running table command: every column shown (:mod:`gpufleet.cli.tables`).
    wide: bool = False
    #: The validated settings of the running command (loaded by :func:`boundary`).
    settings: Settings | None = None


OPTIONS = GlobalOptions()


_OPEN: dict[tuple[Path | None, str | None], Fleet] = {}


def current_settings() -> Settings:
    """The settings of this command: environment + global options, validated (loaded once
    per command, before anything is created or written). Unknown ``GPUFLEET_*`` variables
    are reported on stderr as warnings."""
    if OPTIONS.settings is None:
        # here, not at import: pydantic costs ~70 ms the fast reads do without (issue 30)
        from gpufleet.config import load_settings, unknown_variables

        OPTIONS.settings = load_settings(home=OPTIONS.home, database_url=OPTIONS.db_url)
        from gpufleet.logs import configure  # the logs of this command (issue 25)

        configure(OPTIONS.settings, debug=OPTIONS.debug)
        for line in unknown_variables():
            from gpufleet.i18n import _

            label = _("warning:")
            _err_console().print(f"[yellow]{label}[/] {lit(line)}", soft_wrap=True)
    return OPTIONS.settings


def open_fleet() -> Fleet:
    """The fleet selected by the global options / environment (one per process and target)."""
    key = (OPTIONS.home, OPTIONS.db_url)
    if current_settings().url is not None:  # remote mode never opens the database
        from gpufleet.cli.remote import not_available

        raise not_available()
    if key not in _OPEN:
        from gpufleet.service.core.fleet import Fleet

        _OPEN[key] = Fleet.open(settings=current_settings())
        _log.debug("opened the fleet database %s", _OPEN[key].db.safe_url)
        if _OPEN[key].settings.webhook_url:  # notifications a dead process left (issue 24)
            from gpufleet.service.core.webhooks import resume

            resume(_OPEN[key])
    return _OPEN[key]


def close_fleets() -> None:
    """Release every database connection this process opened."""
    while _OPEN:
        _OPEN.popitem()[1].db.dispose()


def lean_shown(show: Callable[[R], object], value: R) -> Callable[[], int]:
    """What prints ``value`` with ``show`` and gives the exit code 0 (:func:`lean_read`)."""

    def shown() -> int:
        show(value)
        return 0

    return shown


def lean_read(read: Callable[[Fleet], Callable[[], int]]) -> int | None:
    """Run a read command answered lean (:mod:`gpufleet.cli.entry`, issue 8 start-up):
    ``read`` takes the fleet, does all that may fail and returns what prints the answer and
    gives the exit code. None (nothing printed) whenever the Typer command must run instead
    and report in its one way: unknown ``GPUFLEET_*`` variables (its warnings), remote mode
    (``GPUFLEET_URL``), invalid settings, a selector that matches nothing, any failure while
    reading."""
    from gpufleet.cli.entry import imports_done
    from gpufleet.config import unknown_variables

    imports_done()
    try:
        try:
            if unknown_variables() or current_settings().url is not None:
                return None
            show = read(open_fleet())
        except Exception:  # reported by the command, through the error boundary
            return None
        return show()
    finally:
        close_fleets()


def operator_zone() -> tzinfo | None:
    """The zone the operator reads and types times in: UTC with ``--utc``, else the local
    zone (``TZ``, else the machine's; None). docs/reference.md, "Times"."""
    import os

    from gpufleet.domain.times import local_zone

    return UTC if OPTIONS.utc else local_zone(os.environ)


def when(value: str | None, flag: str) -> datetime | None:
    """A time the operator typed for ``flag`` (:func:`gpufleet.domain.times.parse_time` in
    :func:`operator_zone`), None when not given; ConfigError (exit 2) naming the flag."""
    from gpufleet.domain.times import parse_time

    return None if value is None else parse_time(value, flag, operator_zone())


def iso_time(dt: datetime) -> str:
    """The one JSON timestamp format: ISO 8601 with the zone (``2026-01-05T10:00:00+00:00``);
    naive values are UTC (that is how the store keeps them)."""
    from gpufleet.domain.times import as_utc

    return as_utc(dt).isoformat()


def local_time(dt: datetime | None) -> str:
    """The one table timestamp format: the operator's time, readable, with the zone
    (``2026-01-05 11:00:00 CET``; UTC with ``--utc``); ``-`` when unknown."""
    if dt is None:
        return "-"
    from gpufleet.domain.times import shown

    return shown(dt, operator_zone()).strftime("%Y-%m-%d %H:%M:%S %Z").strip()


def cell(value: object) -> str:
    """A value as a table shows it: never a Python repr or ``None`` (``-`` for unknown,
    lists joined, mappings as ``k=v``, enums by value, times via :func:`local_time`)."""
    if value is None or value == "":
        return "-"
    if isinstance(value, datetime):
        return local_time(value)
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict):
        return ", ".join(f"{k}={cell(v)}" for k, v in value.items()) or "-"
    if isinstance(value, list | tuple | set | frozenset):
        return ", ".join(cell(v) for v in value) or "-"
    return str(value)


def _json_default(value: object) -> object:
    if isinstance(value, datetime):
        return iso_time(value)
    if isinstance(value, Enum):
        return value.value
    return str(value)


def print_json(data: Any) -> None:
    """Machine-readable output on stdout (stable keys, ISO 8601 timestamps with zone)."""
    from gpufleet.cli.json_text import dumps_indented  # json.dumps(indent=2), faster

    sys.stdout.write(dumps_indented(data, _json_default) + "\n")


def _redacted_url() -> str:
    settings = OPTIONS.settings
    if settings is None:
        return "(not configured)"
    from sqlalchemy.engine import make_url

    return make_url(settings.db_url()).render_as_string(hide_password=True)


def infrastructure_error(exc: BaseException) -> GpufleetError | None:
    """The gpufleet error for a database or local I/O failure that escaped a service (None:
    not one of those, a bug: let it show its traceback)."""
    sqlalchemy_exc = sys.modules.get("sqlalchemy.exc")  # not imported: not from the store
    if sqlalchemy_exc is not None and isinstance(exc, sqlalchemy_exc.SQLAlchemyError):
        from sqlalchemy.exc import DBAPIError

        # What makes a database failure retryable: one list, in store/db.py.
        from gpufleet.store.db import PERMANENT_MARKERS, UNAVAILABLE_MARKERS

        orig = exc.orig if isinstance(exc, DBAPIError) else None
        text = str(orig if orig is not None else exc).strip()
        cause = text.splitlines()[0].strip() if text else type(exc).__name__
        lowered = text.lower()
        permanent = any(m in lowered for m in PERMANENT_MARKERS)
        if (
            isinstance(exc, DBAPIError)
            and not permanent
            and any(m in lowered for m in UNAVAILABLE_MARKERS)
        ):
            return StoreUnavailable(url=_redacted_url(), cause=cause)
        if "disk is full" in lowered or "no space left" in lowered:
            cause += " (free disk space, then retry)"
        return StoreError(url=_redacted_url(), cause=cause)
    alembic_exc = sys.modules.get("alembic.util.exc")
    if alembic_exc is not None and isinstance(exc, alembic_exc.CommandError):
        return StoreError(url=_redacted_url(), cause=f"migration: {exc}")
    if isinstance(exc, OSError) and not isinstance(exc, BrokenPipeError):
        why = exc.strerror or str(exc) or type(exc).__name__
        if exc.errno == errno.ENOSPC:
            why += " (free disk space, then retry)"
        return LocalIOError(path=exc.filename or "local I/O", cause=why)
    return None


def error_text(exc: GpufleetError) -> str:
    """An error's message in the operator's language (JSON keeps the English, ``str(exc)``):
    read back against :mod:`gpufleet.domain.error_texts`, else the class's template
    translated; English: ``str(exc)`` itself."""
    from gpufleet.i18n import _, language

    english = str(exc)
    if language() == "en":
        return english
    from gpufleet.domain.error_texts import localize

    message = localize(english, _)
    return message if message != english else exc.formatted(_(exc.template))


def fail(exc: GpufleetError, *, as_json: bool) -> typer.Exit:
    """Report ``exc`` the one way (a line on stderr, or the JSON shape on stdout) and return
    the exit to raise. Call it inside the ``except`` block (``--debug`` prints the traceback)."""
    if OPTIONS.debug:
        _err_console().print_exception()
    if as_json:
        print_json(exc.as_json())
    else:
        from gpufleet.i18n import _

        message = " ".join(error_text(exc).split("\n"))
        label = _("error:")
        _err_console().print(f"[bold red]{label}[/] {lit(message)}", soft_wrap=True)
    import typer  # imported here: ``labels HOST`` runs without Typer (cli/entry.py)

    return typer.Exit(exc.exit_code)


def boundary(fn: Callable[P, R]) -> Callable[P, R]:
    """The CLI's one error boundary: settings are loaded and validated first; gpufleet errors
    (and database / local I/O failures) print one line, or the JSON error shape under
    ``--json``, and exit with their code."""

    @wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        as_json = bool(kwargs.get("as_json"))
        OPTIONS.wide = bool(kwargs.get("wide"))
        try:
            OPTIONS.settings = None
            if current_settings().url is not None:  # remote mode: the API, never the database
                from gpufleet.cli.remote import call_remote

                return cast(R, call_remote(fn, kwargs))
            return fn(*args, **kwargs)
        except GpufleetError as exc:
            raise fail(exc, as_json=as_json) from None
        except Exception as exc:
            err = infrastructure_error(exc)
            if err is None:
                raise
            raise fail(err, as_json=as_json) from None
        finally:
            close_fleets()

    return wrapper


@dataclass
class HostProgress:
    """Callbacks a collection reports through: total once, then one call per host."""

    on_start: Callable[[int], None]
    on_result: Callable[[Any], None]


@contextmanager
def host_progress(label: str, *, quiet: bool) -> Iterator[HostProgress]:
    """A progress bar over hosts (hidden with ``quiet``, e.g. under ``--json``)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(
        TextColumn(f"[bold]{label}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[last]}"),
        TimeElapsedColumn(),
        console=__getattr__("console"),
        transient=True,
        disable=quiet,
    )
    with progress:
        task = progress.add_task(label, total=None, last="")
        yield HostProgress(
            on_start=lambda n: progress.update(task, total=n),
            on_result=lambda r: progress.update(
                task, advance=1, last=f"{lit(r.host)}: {r.outcome.value}"
            ),
        )
