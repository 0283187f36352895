"""SSH with connections kept open between sweeps (``gpufleet inspect run --every``).

:class:`KeptOpenSsh` holds one authenticated connection per host on the event loop its runs
share (the process's engine loop, :mod:`gpufleet.service.core.engine`: one per process, for
its life), so successive sweeps send one command per host over a connection that is already
there: no TCP, key exchange or
authentication per sweep. A connection is opened as :class:`~gpufleet.collect.ssh.SshTransport`
opens one (same pinned-key check, algorithms and authentication); when opening fails, the
plain transport runs the command instead, so every failure is named in one place. A command
that outlives its timeout drops that host's connection (the next sweep reconnects); a
connection the server closed is reopened once within the same sweep.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import asyncssh

from gpufleet.collect.local import exit_note
from gpufleet.collect.ssh import (
    SshTransport,
    _KeyCheck,
    _TooLarge,
    connect_options,
    host_key_pin,
    openssh_line,
)
from gpufleet.collect.transport import Outcome, RawResult, Target

_Key = tuple[str, int, str | None, str | None, str | None]


@dataclass
class KeptOpenSsh:
    """An ``ssh`` transport that keeps each host's connection for the next command."""

    connect_timeout_s: float = 10.0
    name: str = field(default="ssh", init=False)
    #: Connections opened (handshakes) since this transport was made.
    connects: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self._plain = SshTransport(connect_timeout_s=self.connect_timeout_s)
        self._conns: dict[_Key, asyncssh.SSHClientConnection] = {}
        self._keys: dict[_Key, str | None] = {}

    @property
    def open_connections(self) -> int:
        return len(self._conns)

    async def close(self) -> None:
        """Close every connection (on the loop they were opened on)."""
        for conn in list(self._conns.values()):
            conn.abort()
        self._conns.clear()

    async def run(self, target: Target, script: str, timeout_s: float) -> RawResult:
        """Run ``script`` on ``target`` over its kept connection (opened when missing); every
        call must come from one event loop (the engine's), where the connections live."""
        start = time.monotonic()
        key: _Key = (
            target.address,
            target.port,
            target.user,
            target.key_file,
            target.pinned_host_key,
        )
        for attempt in (1, 2):
            conn = self._conns.get(key)
            if conn is None:
                try:
                    async with asyncio.timeout(min(self.connect_timeout_s, timeout_s)):
                        conn = await self._connect(target)
                except Exception:
                    # Let the plain transport try and name the failure (refused, auth, key).
                    return await self._plain.run(target, script, timeout_s)
                self._conns[key] = conn
                server_key = conn.get_server_host_key()
                self._keys[key] = openssh_line(server_key) if server_key is not None else None
            left = max(0.1, timeout_s - (time.monotonic() - start))
            try:
                async with asyncio.timeout(left):
                    out, status, err = await self._plain._exec(conn, script)
            except TimeoutError:
                self._drop(key)
                return RawResult(
                    target.name,
                    Outcome.TIMEOUT,
                    f"no answer within {timeout_s:.0f} s (command still running)",
                    host_key=self._keys.get(key),
                    duration_s=time.monotonic() - start,
                )
            except _TooLarge:
                self._drop(key)
                return RawResult(
                    target.name,
                    Outcome.BAD_OUTPUT,
                    "output too large",
                    duration_s=time.monotonic() - start,
                )
            except (asyncssh.Error, OSError, EOFError, BrokenPipeError):
                self._drop(key)
                if attempt == 1:
                    continue  # the server closed it since the last sweep: reconnect once
                return await self._plain.run(target, script, timeout_s)
            return RawResult(
                target.name,
                Outcome.OK,
                exit_note(status, err),
                output=out.decode("utf-8", errors="replace"),
                host_key=self._keys.get(key),
                duration_s=time.monotonic() - start,
            )
        raise AssertionError("unreachable")  # pragma: no cover

    def _drop(self, key: _Key) -> None:
        conn = self._conns.pop(key, None)
        if conn is not None:
            conn.abort()

    async def _connect(self, target: Target) -> asyncssh.SSHClientConnection:
        pinned, expected = host_key_pin(target)
        client_keys = self._plain._client_keys(target.key_file) if target.key_file else None
        check = _KeyCheck(pinned, expected)
        conn = await asyncssh.connect(
            target.address,
            target.port,
            **connect_options(target, check, client_keys, self._plain.ssh_config),
            keepalive_interval=60,
        )
        self.connects += 1
        return conn
