"""Bounds on one exchange with a BMC: a deadline for the whole exchange and a size cap on
each answer's body.

A socket timeout bounds one read, not an exchange: a BMC that trickles one byte a second
answers every read in time and holds its reader for as long as it likes (652 s for one
``bmc status --timeout 5``). An :class:`Exchange` is the whole conversation with one BMC
(every request of one read or one action): when its deadline passes, a timer shuts down
every socket it opened (a blocked read returns at once) and every later request is refused.
A body longer than ``max_body_bytes`` (by its Content-Length, or counted as it streams) is
refused before it is held in memory.

:class:`GuardedConnector` is sushy's connector with the guard mounted on its HTTP session;
the failures surface as :class:`DeadlineExceeded` / :class:`BodyTooLarge`, which
``collect.redfish`` classifies (timeout, bad response).
"""

from __future__ import annotations

import socket
import threading
import time
from contextlib import suppress
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from sushy import connector as sushy_connector  # type: ignore[import-untyped]
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

#: Bytes read from an answer at a time (the cap is checked after each).
CHUNK = 64 * 1024


class DeadlineExceeded(requests.exceptions.RequestException):
    """The exchange's deadline passed (not retried: sushy retries only transient errors)."""


class BodyTooLarge(requests.exceptions.RequestException):
    """An answer's body is over the size cap."""

    def __init__(self, size: int, cap: int, *, announced: bool) -> None:
        if announced:
            text = f"the BMC announces {size} bytes in one answer, over the cap of {cap} bytes"
        else:
            text = f"the BMC sent more than the cap of {cap} bytes in one answer"
        super().__init__(text)
        self.size, self.cap = size, cap


class Exchange:
    """One bounded conversation with a BMC; use as a context manager (starts the timer)."""

    def __init__(self, deadline_s: float | None, max_body_bytes: int) -> None:
        # (a timer cannot wait longer than the platform's TIMEOUT_MAX: ~292 years on Linux)
        self.deadline_s = None if deadline_s is None else min(deadline_s, threading.TIMEOUT_MAX)
        self.max_body_bytes = max_body_bytes
        self.expired = False
        self._ends: float | None = None
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    def __enter__(self) -> Exchange:
        if self.deadline_s is not None:
            self._ends = time.monotonic() + self.deadline_s
            self._timer = threading.Timer(self.deadline_s, self.expire)
            self._timer.daemon = True
            self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._timer is not None:
            self._timer.cancel()
        with self._lock:
            self._socks.clear()

    def track(self, sock: socket.socket) -> None:
        """A socket of this exchange: shut down when the deadline passes."""
        with self._lock:
            if self.expired:
                _shutdown(sock)
            self._socks.append(sock)

    def expire(self) -> None:
        """The deadline passed: shut every socket down (their blocked reads return)."""
        with self._lock:
            self.expired = True
            for sock in self._socks:
                _shutdown(sock)

    def remaining(self) -> float | None:
        """Seconds left; None without a deadline. :class:`DeadlineExceeded` when none."""
        if self._ends is None:
            return None
        left = self._ends - time.monotonic()
        if self.expired or left <= 0:
            raise DeadlineExceeded(f"no complete answer within {self.deadline_s:g} s")
        return left

    def bound(self, timeout: Any) -> Any:
        """``timeout`` (a number or requests' (connect, read) pair) cut to what is left."""
        left = self.remaining()
        if left is None:
            return timeout
        if isinstance(timeout, tuple):
            return tuple(left if t is None else min(float(t), left) for t in timeout)
        return left if timeout is None else min(float(timeout), left)


def _shutdown(sock: socket.socket) -> None:
    # A socket closed since (fd -1) raises EBADF: nothing to wake, nothing else touched.
    with suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def _connection_classes(ex: Exchange) -> tuple[type[HTTPConnection], type[HTTPSConnection]]:
    class _Http(HTTPConnection):
        def _new_conn(self) -> socket.socket:
            sock = super()._new_conn()
            ex.track(sock)
            return sock

    class _Https(HTTPSConnection):
        def _new_conn(self) -> socket.socket:
            sock = super()._new_conn()
            ex.track(sock)  # during the TLS handshake
            return sock

        def connect(self) -> None:
            super().connect()
            if self.sock is not None:
                ex.track(self.sock)  # the TLS socket that replaced it

    return _Http, _Https


class GuardedAdapter(HTTPAdapter):
    """requests' adapter, every socket tracked by ``exchange`` and every body capped."""

    def __init__(self, exchange: Exchange) -> None:
        self.exchange = exchange
        super().__init__(max_retries=0)

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        http_conn, https_conn = _connection_classes(self.exchange)
        http_pool = type("_Pool", (HTTPConnectionPool,), {"ConnectionCls": http_conn})
        https_pool = type("_Pools", (HTTPSConnectionPool,), {"ConnectionCls": https_conn})
        # a new dict: urllib3's module-level one is shared by every pool manager
        self.poolmanager.pool_classes_by_scheme = {"http": http_pool, "https": https_pool}

    def send(  # type: ignore[override]
        self, request: requests.PreparedRequest, stream: bool = False, timeout: Any = None,
        **kwargs: Any,
    ) -> requests.Response:
        ex = self.exchange
        try:
            resp = super().send(request, stream=True, timeout=ex.bound(timeout), **kwargs)
            try:
                self._read_capped(resp)
            except BaseException:
                resp.close()
                raise
        except (requests.exceptions.RequestException, OSError) as exc:
            if isinstance(exc, (DeadlineExceeded, BodyTooLarge)):
                raise
            if ex.expired:
                raise DeadlineExceeded(
                    f"no complete answer within {ex.deadline_s:g} s") from None
            raise
        return resp

    def _read_capped(self, resp: requests.Response) -> None:
        cap = self.exchange.max_body_bytes
        announced = resp.headers.get("Content-Length", "")
        if announced.strip().isdigit() and int(announced) > cap:
            raise BodyTooLarge(int(announced), cap, announced=True)
        chunks: list[bytes] = []
        size = 0
        for chunk in resp.iter_content(CHUNK):
            size += len(chunk)
            if size > cap:
                raise BodyTooLarge(size, cap, announced=False)
            chunks.append(chunk)
            self.exchange.remaining()  # between chunks: a trickle ends at the deadline
        # requests' own buffer, filled as Session.send would without stream=True
        resp._content = b"".join(chunks)
        resp._content_consumed = True


class GuardedConnector(sushy_connector.Connector):  # type: ignore[misc]
    """sushy's connector over a session whose adapter is bounded by ``exchange``."""

    def __init__(self, url: str, exchange: Exchange, **kwargs: Any) -> None:
        super().__init__(url, **kwargs)
        adapter = GuardedAdapter(exchange)
        self._session.mount("http://", adapter)
        self._session.mount("https://", adapter)


def guard_failure(exc: BaseException) -> DeadlineExceeded | BodyTooLarge | None:
    """The guard's failure behind ``exc`` (sushy wraps it in its ConnectionError)."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, (DeadlineExceeded, BodyTooLarge)):
            return cur
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return None
