"""Log set-up (issue 25, item 4): one home, called by the entry points, never at import.

Modules log on their own logger (``logging.getLogger(__name__)``) and pass the ids they have
with ``extra=`` (:func:`ids`): ``log.warning("...", extra=ids(host=name, run=run_id))``.
:func:`configure` (the CLI's settings loader ``cli.common.current_settings``, then ``gpufleet
serve`` and ``gpufleet worker`` again with their own default) installs one handler on the root
logger that writes to the current ``sys.stderr``:

- ``GPUFLEET_LOG_FORMAT=text`` (default): ``TIME LEVEL LOGGER: MESSAGE [host=.. run=..]``;
- ``GPUFLEET_LOG_FORMAT=json``: one JSON object per line with ``time`` (ISO 8601, UTC offset),
  ``level``, ``logger``, ``message``, the ids present (:data:`IDS`) and ``exception``.

The level is ``GPUFLEET_LOG_LEVEL``, else the entry point's default (WARNING for commands,
INFO for ``serve`` and ``worker``); ``--debug`` makes it DEBUG. Other libraries' lines show
from WARNING up only (``worker --verbose``: at the same level as gpufleet's). Every secret of
the settings (tokens, BMC password, webhook secret, API secret key) and every value given to
:func:`hide` is replaced by ``***`` in every line, whoever logged it.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from pydantic import SecretStr

if TYPE_CHECKING:
    from gpufleet.config import Settings

#: The ids a log call may pass with ``extra=`` (see :func:`ids`), in the order shown.
IDS = ("host", "run", "job", "lease", "campaign", "delivery", "component")

#: What a hidden secret reads as.
MASK = "***"

_lock = threading.Lock()
_hidden: set[str] = set()


def ids(**given: object) -> dict[str, object]:
    """The ``extra=`` of a log call: the ids of :data:`IDS` that are not None."""
    unknown = set(given) - set(IDS)
    assert not unknown, f"not a log id: {sorted(unknown)}"
    return {k: v for k, v in given.items() if v is not None}


def hide(secret: str | SecretStr | None) -> None:
    """Never show ``secret`` in a log line (values shorter than 4 characters are ignored:
    masking them would mangle ordinary words)."""
    value = secret.get_secret_value() if isinstance(secret, SecretStr) else secret
    if value and len(value) >= 4:
        with _lock:
            _hidden.add(value)


def redact(text: str) -> str:
    """``text`` with every hidden secret replaced by :data:`MASK`."""
    with _lock:
        secrets = sorted(_hidden, key=len, reverse=True)  # a longer one first
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, MASK)
    return text


def _time(record: logging.LogRecord) -> str:
    return datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")


def _ids(record: logging.LogRecord) -> dict[str, object]:
    found: dict[str, object] = {}
    for key in IDS:
        value = record.__dict__.get(key)
        if value is not None:
            found[key] = value if isinstance(value, (int, float, bool, str)) else str(value)
    return found


class JsonFormatter(logging.Formatter):
    """One JSON object per record (see the module's text)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": _time(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update(_ids(record))
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return redact(json.dumps(line, ensure_ascii=False, default=str))


class TextFormatter(logging.Formatter):
    """``TIME LEVEL LOGGER: MESSAGE [key=value ...]`` on one line (plus a traceback)."""

    def format(self, record: logging.LogRecord) -> str:
        found = _ids(record)
        tail = f" [{' '.join(f'{k}={v}' for k, v in found.items())}]" if found else ""
        text = f"{_time(record)} {record.levelname} {record.name}: {record.getMessage()}{tail}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return redact(text)


class _Handler(logging.Handler):
    """Writes to the ``sys.stderr`` of the moment (a test's captured stream included); other
    libraries' records pass from ``floor`` up only."""

    def __init__(self, level: int, floor: int) -> None:
        super().__init__(level)
        self.floor = floor

    def filter(self, record: logging.LogRecord) -> bool:
        own = record.name == "gpufleet" or record.name.startswith("gpufleet.")
        return (own or record.levelno >= self.floor) and bool(super().filter(record))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
            stream = sys.stderr
            stream.write(line + "\n")
            stream.flush()
        except Exception:  # a closed stderr must not stop the work that logs
            self.handleError(record)


def level_of(settings: Settings | None, *, debug: bool, default: int) -> int:
    """The level :func:`configure` sets: DEBUG with ``--debug``, else GPUFLEET_LOG_LEVEL,
    else ``default``."""
    if debug:
        return logging.DEBUG
    if settings is not None and settings.log_level is not None:
        return logging.getLevelNamesMapping()[settings.log_level]
    return default


def configure(
    settings: Settings | None,
    *,
    debug: bool = False,
    default: int = logging.WARNING,
    verbose: bool = False,
) -> int:
    """Install gpufleet's one log handler on the root logger (replacing the one a previous
    call installed) and return its level. ``verbose``: other libraries' lines at that level
    too, not only from WARNING up."""
    level = level_of(settings, debug=debug, default=default)
    if settings is not None:
        for name in type(settings).model_fields:
            value = getattr(settings, name)
            if isinstance(value, SecretStr):
                hide(value)
    floor = level if verbose else max(level, logging.WARNING)
    handler = _Handler(level, floor)
    as_json = settings is not None and settings.log_format == "json"
    handler.setFormatter(JsonFormatter() if as_json else TextFormatter())
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _Handler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    # other libraries make no record below the floor (asyncssh's INFO lines cost time);
    # gpufleet's own loggers go down to the level
    root.setLevel(floor)
    logging.getLogger("gpufleet").setLevel(level if level < floor else logging.NOTSET)
    return level
