"""Transports: how the collection script reaches a host and how each failure is named.

A transport runs one script on one target and returns a :class:`RawResult`; it never raises
for a host-level failure (unreachable, auth, host key, timeout), it *reports* it, so one bad
host never spoils a sweep. :func:`run_many` fans out with bounded concurrency.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol


class Outcome(StrEnum):
    """Per-host result of one collection attempt."""

    OK = "ok"
    UNREACHABLE = "unreachable"
    AUTH_FAILED = "auth failed"
    HOST_KEY_CHANGED = "host key changed"
    TIMEOUT = "timeout"
    BAD_OUTPUT = "bad output"
    ERROR = "error"


@dataclass(frozen=True)
class Target:
    """Where and how to reach one host."""

    name: str
    address: str
    port: int = 22
    user: str | None = None
    key_file: str | None = None
    pinned_host_key: str | None = None  # OpenSSH public key line, pinned on first use


@dataclass(frozen=True)
class RawResult:
    """What came back from one host, before parsing."""

    host: str
    outcome: Outcome
    reason: str = ""
    output: str | None = None
    host_key: str | None = None  # the key the server presented (OpenSSH format)
    duration_s: float = 0.0


class Transport(Protocol):
    """Runs the collection script on one target."""

    name: str

    async def run(self, target: Target, script: str, timeout_s: float) -> RawResult:
        """Run ``script`` on ``target``; report failures in the result, never raise."""
        ...


async def run_many(
    transport: Transport,
    targets: Sequence[Target],
    script: str,
    *,
    forks: int = 200,
    timeout_s: float = 120.0,
    on_result: Callable[[RawResult], None] | None = None,
) -> list[RawResult]:
    """Run the script on every target, at most ``forks`` at once, results in target order."""
    sem = asyncio.Semaphore(max(1, forks))

    async def one(t: Target) -> RawResult:
        async with sem:
            start = time.monotonic()
            try:
                res = await transport.run(t, script, timeout_s)
            except Exception as exc:  # a transport bug must not sink the sweep
                res = RawResult(
                    t.name,
                    Outcome.ERROR,
                    f"{type(exc).__name__}: {exc}",
                    duration_s=time.monotonic() - start,
                )
        if on_result is not None:
            on_result(res)
        return res

    return list(await asyncio.gather(*(one(t) for t in targets)))
