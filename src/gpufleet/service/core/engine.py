"""The engine that runs work on hosts (issue 25, item 3): coroutines for the network, a
bounded executor for the database.

A run (:class:`gpufleet.service.core.pipeline.Pipeline`) is a coroutine: it talks to hosts on
an event loop and hands every database call (claim, renew, store, release) to the engine's
executor, :meth:`Engine.db`, so no transaction ever blocks the loop while other hosts answer.
The executor is one per process and bounded (:data:`DB_THREADS`): runs that overlap in one
process (the worker's jobs, ``serve --with-worker``) share it, and the database sees at most
that many of the process's sessions at once from runs. A process made by ``fork`` gets its
own (threads do not survive a fork).

:meth:`Engine.run` is the thin synchronous face: it runs one coroutine to its end on a loop
of its own, in the calling thread. Ctrl-C or SIGTERM (``SystemExit``, see
:mod:`gpufleet.cli.process`) in that thread cancels the coroutine, whose ``finally`` blocks
(releasing claims) still run before the error goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar

T = TypeVar("T")
J = TypeVar("J")
P = ParamSpec("P")

#: Threads of the process's database executor: the database calls of runs that are at once.
DB_THREADS = 8

_in_db_thread = threading.local()


def _mark_db_thread() -> None:
    _in_db_thread.yes = True


class Engine:
    """The process's engine: see the module docstring."""

    def __init__(self, db_threads: int = DB_THREADS) -> None:
        self.db_threads = db_threads
        self._pool = ThreadPoolExecutor(
            max_workers=db_threads, thread_name_prefix="gpufleet-db", initializer=_mark_db_thread
        )

    async def db(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn(*args, **kwargs)`` (database work: it blocks) in the executor, awaited. Called
        from a database thread itself (a run started by database work), it runs right there:
        a nested run must not wait for a thread its caller holds."""
        call = functools.partial(fn, *args, **kwargs)
        if getattr(_in_db_thread, "yes", False):
            return call()
        return await asyncio.get_running_loop().run_in_executor(self._pool, call)

    def run(self, work: Coroutine[Any, Any, T]) -> T:
        """Run ``work`` to its end on a loop of its own and return what it returns (the
        synchronous face). An error that leaves the loop (Ctrl-C, SIGTERM's ``SystemExit``,
        one raised by a callback) cancels ``work`` alone, and the loop runs on until its
        ``finally`` blocks are done (results still waiting are stored, claims released);
        then the error goes on."""
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        main = loop.create_task(work)
        try:
            return loop.run_until_complete(main)
        except BaseException:
            if not main.done():
                main.cancel()
                with contextlib.suppress(BaseException):
                    loop.run_until_complete(main)
            raise
        finally:
            try:
                left = asyncio.all_tasks(loop)
                for task in left:
                    task.cancel()
                if left:
                    loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.run_until_complete(loop.shutdown_default_executor())
            finally:
                asyncio.set_event_loop(None)
                loop.close()


_engine: Engine | None = None
_engine_pid = 0
_engine_lock = threading.Lock()


def engine() -> Engine:
    """This process's engine (made on first use, and again in a forked child)."""
    global _engine, _engine_pid
    with _engine_lock:
        if _engine is None or _engine_pid != os.getpid():
            _engine, _engine_pid = Engine(), os.getpid()
        return _engine


async def run_all(
    jobs: AsyncIterator[J],
    workers: int,
    work: Callable[[J], Awaitable[None]],
    room: asyncio.Semaphore | None = None,
) -> None:
    """``work(job)`` for every job, ``workers`` at once: each worker takes the next job in
    turn (no task per job; the iterator, which may await the database for more, is read by
    one worker at a time). ``room``: a job starts only once a slot is free (the caller frees
    one per result stored), so memory does not grow with the jobs."""
    taking = asyncio.Lock()

    async def worker() -> None:
        while True:
            async with taking:
                job = await anext(jobs, None)
            if job is None:
                return
            if room is not None:
                await room.acquire()
            await work(job)

    await asyncio.gather(*(worker() for _ in range(max(1, workers))))
