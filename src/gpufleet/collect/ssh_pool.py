"""SSH connections kept open between runs (issue 25, item 3).

A :class:`SshConnections` holds the authenticated connections that runs of one process left
idle, on the one event loop they were opened on (the process's engine loop,
:mod:`gpufleet.service.core.engine`, which owns one). :class:`~gpufleet.collect.ssh.
SshTransport` takes a connection from it before connecting and gives it back after a command
that ended normally, so the next run of the process (the worker's next chunk, the server's
next collection, the next ``inspect --every`` sweep) sends its command over a connection that
is already there: no TCP, key exchange or authentication.

A connection is taken by one command at a time (never shared by two at once). It is kept
under what decided how it was opened (:func:`pool_key`): the host, its address, port and
user, the client key's fingerprint and the password's digest (a run whose key or password
changed opens a connection of its own). Its host key, verified by key exchange when it was
opened, is checked again against the taking run's pin (:meth:`SshConnections.take`): a
connection opened on first use serves the next run once the key it showed is pinned; one
whose key the pin no longer matches is dropped, and the run connects and is refused as
:mod:`gpufleet.collect.ssh` refuses a changed key. An idle connection is closed after the
idle time its run gave (``GPUFLEET_SSH_IDLE_S``), and every one when the process's engine
shuts down (:meth:`SshConnections.close`). A connection the server closed meanwhile is
dropped when it is taken (see :class:`~gpufleet.collect.ssh.SshTransport` for the one
reconnect).
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import hashlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncssh

#: (host name, address, port, user, client key fingerprints, password digest, local context).
PoolKey = tuple[str, str, int, str | None, str, str | None, str]


def pool_key(
    name: str,
    address: str,
    port: int,
    user: str | None,
    client_keys: list[asyncssh.SSHKey] | None,
    password: str | None,
    ssh_config: tuple[str, ...],
) -> PoolKey:
    """What a kept connection must match to be reused (see the module docstring; the host
    key is checked when it is taken). The password is kept only as a digest (never in clear,
    never printed). What this machine adds to the inventory (the local user, the home's
    default keys and ``~/.ssh/config``, each config file's size and time) is part of the key:
    a host without a user or key in the inventory is reused only while those are the same."""
    keys = (
        ",".join(k.get_fingerprint("sha256") for k in client_keys)
        if client_keys is not None
        else "(default keys)"
    )
    digest = hashlib.sha256(password.encode()).hexdigest() if password is not None else None
    return name, address, port, user, keys, digest, _local_context(ssh_config)


def _local_context(ssh_config: tuple[str, ...]) -> str:
    home = os.path.expanduser("~")
    files = ssh_config or (os.path.join(home, ".ssh", "config"),)
    seen: list[str] = []
    for f in files:
        try:
            st = os.stat(f)
        except OSError:
            seen.append(f"{f}:-")
        else:
            seen.append(f"{f}:{st.st_size}:{st.st_mtime_ns}")
    try:
        local = getpass.getuser()
    except Exception:  # no passwd entry in some containers
        local = "?"
    return f"{local}|{home}|{'|'.join(seen)}"


@dataclass
class _Idle:
    conn: asyncssh.SSHClientConnection
    host_key: str | None
    timer: asyncio.TimerHandle | None


class SshConnections:
    """Idle SSH connections of one event loop, for the next command to the same host."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        #: The loop the connections live on: only commands running on it may use them.
        self.loop = loop
        self._idle: dict[PoolKey, list[_Idle]] = {}
        self._closed = False
        #: Connections opened (handshakes) to be kept, taken again, closed after their idle
        #: time, dropped (found closed, or broken in use): for the tests and the bench.
        self.connects = 0
        self.reused = 0
        self.expired = 0
        self.dropped = 0

    @property
    def idle(self) -> int:
        """Connections idle now."""
        return sum(len(v) for v in self._idle.values())

    def usable_here(self) -> bool:
        """True when the running loop is this one's (a run nested on a loop of its own, in a
        database thread, connects per run)."""
        try:
            return asyncio.get_running_loop() is self.loop and not self._closed
        except RuntimeError:
            return False

    def take(
        self, key: PoolKey, trusted: Callable[[str | None], bool]
    ) -> tuple[asyncssh.SSHClientConnection, str | None] | None:
        """An idle connection under ``key`` and the host key it was opened with, or None. One
        the server closed meanwhile, or whose host key the run's pin does not ``trusted`` (the
        host was pinned, or re-keyed, since), is dropped: the run connects and checks anew."""
        idle = self._idle.get(key)
        while idle:
            got = idle.pop()
            if got.timer is not None:
                got.timer.cancel()
            if got.conn.is_closed() or not trusted(got.host_key):
                got.conn.abort()
                self.dropped += 1
                continue
            if not idle:
                del self._idle[key]
            self.reused += 1
            return got.conn, got.host_key
        self._idle.pop(key, None)
        return None

    def put(
        self,
        key: PoolKey,
        conn: asyncssh.SSHClientConnection,
        host_key: str | None,
        idle_s: float,
    ) -> None:
        """Keep ``conn`` for the next command under ``key``, closed after ``idle_s`` seconds
        unused (0: closed now)."""
        if idle_s <= 0 or self._closed or conn.is_closed():
            conn.abort()
            return
        entry = _Idle(conn, host_key, None)
        entry.timer = self.loop.call_later(idle_s, self._expire, key, entry)
        self._idle.setdefault(key, []).append(entry)

    def _expire(self, key: PoolKey, entry: _Idle) -> None:
        idle = self._idle.get(key, [])
        if entry in idle:
            idle.remove(entry)
            if not idle:
                self._idle.pop(key, None)
            entry.conn.close()
            self.expired += 1

    def opened(self) -> None:
        """A connection to be kept was opened (counted)."""
        self.connects += 1

    async def close(self, wait_s: float = 5.0) -> None:
        """Close every idle connection (on their loop), waiting up to ``wait_s`` for the
        server to see them go; none is kept from now on."""
        self._closed = True
        entries = [e for v in self._idle.values() for e in v]
        self._idle.clear()
        for e in entries:
            if e.timer is not None:
                e.timer.cancel()
            e.conn.close()
        if entries:
            deadline = time.monotonic() + wait_s
            for e in entries:
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                        await e.conn.wait_closed()
