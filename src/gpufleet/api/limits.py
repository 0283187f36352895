"""The request-body limit: authentication first, then the size, then the body.

FastAPI reads a route's body before it resolves the route's dependencies, so a caller without
a token could make the server hold any body it cared to send (4 x 200 MB took a server to
1.48 GB). :class:`BodyLimit` sits in front of the routes: for a request that carries a body
to ``/api/v1`` it checks the bearer token first (401, nothing read), then the announced
``Content-Length`` against the route's limit (413, nothing read), and counts the bytes of a
body sent without a length as they arrive (413 as soon as the count passes the limit). The
principal it authenticated is handed to the routes' ``caller`` dependency (``deps.py``), so a
token is checked once per request.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpufleet.errors import ConfigError, GpufleetError

#: Routes that take bulk uploads (the larger limit, ``api_max_upload_bytes``).
UPLOAD_PATHS = frozenset({"/api/v1/failures/import"})


class BodyTooLarge(HTTPException):
    """A body that passed its route's limit while it was being read (413)."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body over the limit of {limit} bytes for this route")


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


def _has_body(scope: Scope) -> bool:
    length = _header(scope, b"content-length")
    return _header(scope, b"transfer-encoding") is not None or (
        length is not None and length.strip() != "0"
    )


def too_large(method: str, path: str, size: int | str, limit: int) -> GpufleetError:
    """The error of a body over its route's limit (the API's one JSON error shape)."""
    return GpufleetError(
        f"{method} {path}: request body of {size} bytes is over the limit of {limit} bytes "
        "for this route"
    )


class BodyLimit:
    """ASGI middleware: authenticate, then bound the body, before any route reads it."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        authenticate: Callable[[str | None], Any],
        body_limit: int,
        upload_limit: int,
        prefix: str,
    ) -> None:
        self.app = app
        self.authenticate = authenticate
        self.body_limit = body_limit
        self.upload_limit = upload_limit
        self.prefix = prefix

    def limit_for(self, path: str) -> int:
        return self.upload_limit if path in UPLOAD_PATHS else self.body_limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _has_body(scope):
            await self.app(scope, receive, send)
            return
        method, path = str(scope.get("method", "")), str(scope.get("path", ""))
        limit = self.limit_for(path)
        if path.startswith(self.prefix + "/"):
            try:
                who = await run_in_threadpool(
                    self.authenticate, _header(scope, b"authorization"))
            except GpufleetError as exc:
                await _respond(exc, exc.http_status, scope, receive, send)
                return
            scope.setdefault("state", {})["principal"] = who
        length = _header(scope, b"content-length")
        if length is not None:
            if not length.strip().isdigit():
                err = ConfigError(f"{method} {path}: Content-Length {length[:40]!r} is not "
                                  "a number of bytes")
                await _respond(err, 400, scope, receive, send)
                return
            if int(length) > limit:
                await _respond(too_large(method, path, int(length), limit), 413,
                               scope, receive, send)
                return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge(limit)
            return message

        await self.app(scope, counted, send)


async def _respond(exc: GpufleetError, status: int, scope: Scope, receive: Receive,
                   send: Send) -> None:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    # the client may still be sending: the server drops the connection after this answer
    headers = {**(headers or {}), "Connection": "close"}
    await JSONResponse(exc.as_json(), status_code=status, headers=headers)(scope, receive, send)
