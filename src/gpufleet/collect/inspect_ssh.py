"""SSH with connections kept open for the life of one ``gpufleet inspect run --every`` loop.

Every run of a process already keeps its SSH connections for the next run of the process, up
to ``GPUFLEET_SSH_IDLE_S`` (:mod:`gpufleet.collect.ssh_pool`, owned by the engine). An
``--every`` loop keeps its own for as long as it runs, whatever its interval:
:class:`KeptOpenSsh` is the plain :class:`~gpufleet.collect.ssh.SshTransport` over a
:class:`~gpufleet.collect.ssh_pool.SshConnections` of its own, closed when the loop ends
(:meth:`KeptOpenSsh.close`). Host-key checks, authentication, the one reconnect of a broken
connection and the naming of every failure are the plain transport's.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from gpufleet.collect.ssh import SshTransport
from gpufleet.collect.ssh_pool import SshConnections
from gpufleet.collect.transport import RawResult, Target

#: How long a connection of the loop stays kept unused (the loop closes them when it ends).
LOOP_IDLE_S = 7 * 24 * 3600.0


@dataclass
class KeptOpenSsh:
    """An ``ssh`` transport that keeps each host's connection for the next sweep."""

    connect_timeout_s: float = 10.0
    name: str = field(default="ssh", init=False)

    def __post_init__(self) -> None:
        self._pool: SshConnections | None = None
        self._tr: SshTransport | None = None

    @property
    def connects(self) -> int:
        """Connections opened (handshakes) since this transport was made."""
        return self._pool.connects if self._pool is not None else 0

    @property
    def open_connections(self) -> int:
        return self._pool.idle if self._pool is not None else 0

    async def close(self) -> None:
        """Close every connection (on the loop they were opened on)."""
        if self._pool is not None:
            await self._pool.close()
            self._pool, self._tr = None, None

    async def run(self, target: Target, script: str, timeout_s: float) -> RawResult:
        """Run ``script`` on ``target`` over its kept connection (opened when missing); every
        call must come from one event loop (the engine's), where the connections live."""
        if self._pool is None or self._tr is None:
            self._pool = SshConnections(asyncio.get_running_loop())
            self._tr = SshTransport(
                connect_timeout_s=self.connect_timeout_s, connections=self._pool,
                idle_s=LOOP_IDLE_S,
            )
        return await self._tr.run(target, script, timeout_s)
