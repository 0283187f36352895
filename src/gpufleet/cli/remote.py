"""Remote mode: with ``GPUFLEET_URL`` set, commands call a gpufleet server's API
(``/api/v1``, ``Authorization: Bearer $GPUFLEET_TOKEN``) instead of opening the database,
for people without database access.

The CLI's error boundary (:func:`gpufleet.cli.common.boundary`) hands every command to
:func:`call_remote`. A read is a row of the table :data:`gpufleet.cli.remote_table.READS`
(method, path, parameters, body, schema, paging, view, presenter) served by one handler
(the runs it follows on the server too: :mod:`~gpufleet.cli.remote_runs`). It calls the
API, builds the service's read model from the answer and prints it with the command's own
presenter, so ``--json`` and the tables are the local ones. Any other command fails
closed: exit 2 with a message naming it; never a silent fall-back to a local database.

HTTP errors become the error class the server names (its ``code``), so the exit codes are
the one table of :mod:`gpufleet.errors` (401 ``unauthorized`` and 403 ``forbidden`` exit 2,
404 exit 4, 409 exit 5 or 6); a server that cannot be reached (refused, timeout, a proxy's
502/503/504) is :class:`~gpufleet.errors.ServerUnavailable` (exit 2, retryable). The token
is only ever put into the request header: no message, log line or traceback carries it.

Standard library only (urllib): the client needs nothing the CLI does not already have.
"""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from typer._click.globals import get_current_context  # typer's own copy of Click

from gpufleet.cli.common import OPTIONS, current_settings
from gpufleet.errors import (
    ConfigError,
    Conflict,
    Forbidden,
    GpufleetError,
    NotFound,
    ServerUnavailable,
    Unauthorized,
)

#: Commands that need no database and run as they are in remote mode.
LOCAL_ONLY = frozenset({"gpufleet.cli.preflight.preflight_cmd"})

#: Seconds one HTTP request may take.
TIMEOUT_S = 60.0
#: Seconds between two polls of a background run.
POLL_S = 0.5


def command_name() -> str:
    """The command being run, as typed: ``gpufleet hosts remove``."""
    ctx = get_current_context(silent=True)
    names: list[str] = []
    while ctx is not None:
        names.append(ctx.info_name or "")
        ctx = ctx.parent
    names[-1:] = ["gpufleet"]
    return " ".join(reversed([n for n in names if n]))


def not_available(what: str | None = None) -> ConfigError:
    """The refusal of a command (or an option of one) that remote mode does not offer (code
    ``config``, exit 2; the CLI's line reads it back in the operator's language through
    :mod:`gpufleet.domain.error_texts`, JSON keeps the English)."""
    return ConfigError(
        f"{what or command_name()} is not available over GPUFLEET_URL; run it where the "
        "database is reachable (unset GPUFLEET_URL)"
    )


def _error_classes() -> dict[str, type[GpufleetError]]:
    out: dict[str, type[GpufleetError]] = {}
    todo: list[type[GpufleetError]] = [GpufleetError]
    while todo:
        cls = todo.pop()
        out.setdefault(cls.code, cls)
        todo.extend(cls.__subclasses__())
    return out


#: The class of an HTTP status when the answer carries no error shape of ours.
_BY_STATUS: dict[int, type[GpufleetError]] = {
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    400: ConfigError,
    422: ConfigError,
}


def server_error(status: int, body: bytes, url: str) -> GpufleetError:
    """The gpufleet error an HTTP error answer stands for, with the server's message."""
    code = message = None
    try:
        err = json.loads(body)["error"]
        code, message = str(err["code"]), str(err["message"])
    except (ValueError, KeyError, TypeError):
        pass
    cls = _error_classes().get(code or "") if code else None
    if cls is None or cls is GpufleetError:
        if status in (502, 503, 504) or (cls is None and status >= 500):
            return ServerUnavailable(
                url=url, cause=f"HTTP {status}" + (f": {message}" if message else "")
            )
        cls = _BY_STATUS.get(status, GpufleetError)
    text = message or f"HTTP {status}"
    if cls in (Unauthorized, Forbidden):
        text += f" (server {url}; check GPUFLEET_TOKEN)"
    return _made(cls, text)


@dataclass
class Client:
    """The API of one gpufleet server, as one token."""

    url: str
    token: str | None

    def call(
        self,
        method: str,
        path: str,
        params: Mapping[str, object] | None = None,
        body: object = None,
    ) -> Any:
        """``METHOD /api/v1/PATH`` -> the decoded JSON answer; errors as gpufleet errors."""
        query = {
            k: ("true" if v is True else "false" if v is False else str(v))
            for k, v in (params or {}).items()
            if v is not None
        }
        target = f"{self.url}/api/v1/{path}" + (
            f"?{urllib.parse.urlencode(query)}" if query else ""
        )
        data = None if body is None else json.dumps(body, default=str).encode()
        req = urllib.request.Request(target, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            raise server_error(exc.code, exc.read(), self.url) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", None) or exc
            why = getattr(reason, "strerror", None) or str(reason) or type(reason).__name__
            if isinstance(reason, socket.timeout | TimeoutError):
                why = f"no answer within {TIMEOUT_S:g} s"
            raise ServerUnavailable(url=self.url, cause=why) from None
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            raise ServerUnavailable(url=self.url, cause="the answer is not JSON") from None

    def get(self, path: str, **params: object) -> Any:
        return self.call("GET", path, params)

    def post(self, path: str, body: object) -> Any:
        return self.call("POST", path, body=body)


def client() -> Client:
    """The client of ``GPUFLEET_URL`` with ``GPUFLEET_TOKEN``."""
    s = current_settings()
    assert s.url is not None
    return Client(s.url, s.token.get_secret_value() if s.token is not None else None)


def call_remote(fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    """Run the command ``fn`` in remote mode: its row of the table, the command itself
    when it needs no database (:data:`LOCAL_ONLY`), else the refusal."""
    from gpufleet.cli.remote_table import READS, serve

    key = f"{fn.__module__}.{fn.__qualname__}"
    if key in LOCAL_ONLY:
        return fn(**kwargs)
    read = READS.get(key.removeprefix("gpufleet.cli."))
    if read is None:
        raise not_available()
    if OPTIONS.db_url is not None:
        raise ConfigError("--db and GPUFLEET_URL are both given; use one (unset GPUFLEET_URL)")
    serve(client(), read, kwargs)
    return None


def refuse_options(**given: object) -> None:
    """Options the API does not offer: refused (named) when given, never ignored."""
    for flag, value in given.items():
        if value not in (None, False):
            raise not_available(f"{command_name()} {flag}")


def error_of(code: str, message: str) -> GpufleetError:
    """The gpufleet error of the server's ``code`` with its message as it is."""
    return _made(_error_classes().get(code, GpufleetError), message)


def _made(cls: type[GpufleetError], message: str) -> GpufleetError:
    exc = cls.__new__(cls)  # the server's message as it is, whatever the class's fields
    GpufleetError.__init__(exc, message)
    return exc


def host_outcome(d: Mapping[str, Any]) -> Any:
    """One host's outcome of a change through a selector (``HostOutcomeOut``) as the
    service's ``HostOutcome``: the error is the class the server named."""
    from gpufleet.service.hosts.operations import HostOutcome

    err = d.get("error")
    error = None if err is None else error_of(str(err["code"]), str(err["message"]))
    return HostOutcome(host=d["host"], state=d.get("state"), error=error)

