"""Local transport: run the collection script on this machine (``gpufleet collect --local``).

Same contract as the SSH transport: the script goes to ``sh`` on stdin, a non-zero exit still
returns OK with the output (the parser judges it), and only failures to run at all, timeouts
and runaway output become outcomes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Mapping
from typing import Any

from gpufleet.collect.transport import Outcome, RawResult, Target

#: ``sh -c 'eval "$(cat)"'``: read the WHOLE script from stdin first, then run it. With a plain
#: ``sh -s`` a tool that reads stdin could swallow the rest of the script; this way every tool
#: sees an empty stdin, and the command line is the same for any remote login shell.
SH_ARGV: tuple[str, ...] = ("sh", "-c", 'eval "$(cat)"')
SH_COMMAND = "sh -c 'eval \"$(cat)\"'"

#: Larger output than this is not collection output; stop reading rather than fill memory.
MAX_OUTPUT_BYTES = 64 * 1024 * 1024
_STDERR_KEEP = 4096


class OutputTooLarge(Exception):
    """The script produced more than the output cap."""


async def read_capped(stream: asyncio.StreamReader, limit: int) -> bytes:
    """Read a stream to EOF, failing once it exceeds ``limit`` bytes."""
    chunks: list[bytes] = []
    size = 0
    while chunk := await stream.read(1 << 16):
        size += len(chunk)
        if size > limit:
            raise OutputTooLarge(f"output exceeds {size_text(limit)}")
        chunks.append(chunk)
    return b"".join(chunks)


def size_text(n: int) -> str:
    """Human size for messages: "64 MiB" or "1000 bytes"."""
    return f"{n // (1024 * 1024)} MiB" if n >= 1024 * 1024 else f"{n} bytes"


async def _read_tail(stream: asyncio.StreamReader, keep: int) -> bytes:
    # stderr is drained (a full pipe would stall the script) but only its tail is kept.
    tail = b""
    while chunk := await stream.read(1 << 16):
        tail = (tail + chunk)[-keep:]
    return tail


def exit_note(status: int | None, stderr: bytes) -> str:
    """Reason text for an OK result whose script exited non-zero ("" when it exited 0)."""
    if status == 0:
        return ""
    if status is None:
        return "script ended without an exit status (killed by a signal?)"
    err = stderr.decode("utf-8", errors="replace").strip().splitlines()
    tail = f": {err[-1][:200]}" if err else ""
    return f"script exited with status {status}{tail}"


class LocalTransport:
    """Runs the script with ``sh`` on this machine, whatever the target's address."""

    name = "local"

    def __init__(
        self, env: Mapping[str, str] | None = None, *, max_output_bytes: int = MAX_OUTPUT_BYTES
    ) -> None:
        #: Overrides on top of this process's environment (tests point PATH at fake tools).
        self.env = dict(env or {})
        self.max_output_bytes = max_output_bytes

    async def run(self, target: Target, script: str, timeout_s: float) -> RawResult:
        """Run ``script`` locally within ``timeout_s``; failures are reported, never raised."""
        start = time.monotonic()

        def result(outcome: Outcome, reason: str = "", output: str | None = None) -> RawResult:
            return RawResult(
                target.name, outcome, reason, output=output, duration_s=time.monotonic() - start
            )

        try:
            proc = await asyncio.create_subprocess_exec(
                *SH_ARGV,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env={**os.environ, **self.env},
                start_new_session=True,
            )  # own process group: a timeout kills every tool too
        except OSError as exc:
            return result(Outcome.ERROR, f"cannot start sh: {exc}")
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        stdin, stdout, stderr = proc.stdin, proc.stdout, proc.stderr

        async def feed() -> None:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                stdin.write(script.encode())
                await stdin.drain()
                stdin.close()

        out_task = asyncio.ensure_future(read_capped(stdout, self.max_output_bytes))
        err_task = asyncio.ensure_future(_read_tail(stderr, _STDERR_KEEP))
        tasks: list[asyncio.Future[Any]] = [asyncio.ensure_future(feed()), out_task, err_task]
        try:
            async with asyncio.timeout(timeout_s):
                await asyncio.gather(*tasks)
                status = await proc.wait()
        except TimeoutError:
            await _kill(proc, tasks)
            return result(
                Outcome.TIMEOUT, f"no answer within {timeout_s:.0f} s (command still running)"
            )
        except OutputTooLarge as exc:
            await _kill(proc, tasks)
            return result(Outcome.BAD_OUTPUT, str(exc))
        except BaseException:
            await _kill(proc, tasks)
            raise
        return result(
            Outcome.OK,
            exit_note(status, err_task.result()),
            output=out_task.result().decode("utf-8", errors="replace"),
        )


async def _kill(proc: asyncio.subprocess.Process, tasks: list[asyncio.Future[Any]]) -> None:
    for t in tasks:  # gather leaves siblings running when one fails
        t.cancel()
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        await asyncio.wait_for(proc.wait(), 5)
    # A tool under `timeout` has its own process group and may still hold the pipes; close
    # them now rather than when the event loop is already gone.
    transport = getattr(proc, "_transport", None)
    if transport is not None:
        transport.close()
