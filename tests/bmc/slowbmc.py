"""Misbehaving BMCs on loopback, real sockets: one that trickles its answer a byte at a time,
one that announces a 300 MB body, one that streams a body without end. Each answers every
connection the same way and stops on its own (``life_s``) so a client without a deadline
still ends."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

#: The Redfish service root a trickling BMC would eventually send (a valid answer).
ROOT = json.dumps({"@odata.id": "/redfish/v1/", "Id": "RootService", "Name": "Root",
                   "RedfishVersion": "1.6.0", "Systems": {"@odata.id": "/redfish/v1/Systems"}})


def _read_request(conn: socket.socket) -> bool:
    data = b""
    while b"\r\n\r\n" not in data:
        more = conn.recv(4096)
        if not more:
            return False
        data += more
    return True


def _trickle(conn: socket.socket, stop: threading.Event, every_s: float, life_s: float) -> None:
    body = ROOT.encode()
    answer = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
              + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    ends = time.monotonic() + life_s
    for i in range(len(answer)):
        if stop.is_set() or time.monotonic() > ends:
            return
        conn.sendall(answer[i:i + 1])
        time.sleep(every_s)


def _huge(conn: socket.socket, stop: threading.Event, announce: bool, life_s: float) -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
    head += b"Content-Length: 300000000\r\n\r\n" if announce else b"\r\n"
    conn.sendall(head + b'{"pad": "')
    chunk = b"x" * 65536
    ends = time.monotonic() + life_s
    while not stop.is_set() and time.monotonic() < ends:
        conn.sendall(chunk)


@contextmanager
def misbehaving_bmc(kind: str, *, every_s: float = 1.0, life_s: float = 30.0) -> Iterator[str]:
    """``kind``: ``trickle`` (one byte every ``every_s``), ``huge`` (Content-Length 300 MB,
    streamed), ``endless`` (no length, streamed until the client goes). Yields its URL."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(32)
    srv.settimeout(0.2)
    stop = threading.Event()

    def handle(conn: socket.socket) -> None:
        try:
            with conn:
                if not _read_request(conn):
                    return
                if kind == "trickle":
                    _trickle(conn, stop, every_s, life_s)
                else:
                    _huge(conn, stop, kind == "huge", life_s)
        except OSError:
            pass  # the client gave up: what a bounded client does

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except (TimeoutError, OSError):
                continue
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.getsockname()[1]}"
    finally:
        stop.set()
        t.join(timeout=5)
        srv.close()
