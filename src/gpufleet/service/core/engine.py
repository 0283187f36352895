"""The engine that runs work on hosts (issue 25, item 3): coroutines for the network, a
bounded executor for the database.

A run (:class:`gpufleet.service.core.pipeline.Pipeline`) is a coroutine: it talks to hosts on
an event loop and hands every database call (claim, renew, store, release) to the engine's
executor, :meth:`Engine.db`, so no transaction ever blocks the loop while other hosts answer.
The loop is one per process, long-lived, in a daemon thread (``gpufleet-engine``): runs from
any thread share it, and what a transport keeps open between runs (SSH connections) stays
usable.
What runs keep open between runs on that loop (the SSH connections of
:mod:`gpufleet.collect.ssh_pool`, up to ``GPUFLEET_SSH_IDLE_S`` each) is the engine's
(:meth:`Engine.keep`), closed when the process exits (:meth:`Engine.close`, at exit).
The executor is one per process and bounded (:data:`DB_THREADS`): runs that overlap in one
process (the worker's jobs, ``serve --with-worker``) share it, and the database sees at most
that many of the process's sessions at once from runs. A process made by ``fork`` gets its
own (threads do not survive a fork).

:meth:`Engine.run` is the thin synchronous face: it runs one coroutine to its end on the
process's loop while the calling thread waits. Ctrl-C or SIGTERM (``SystemExit``, see
:mod:`gpufleet.cli.process`) in that thread cancels the coroutine, whose ``finally`` blocks
(releasing claims) still run before the error goes on.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import logging
import os
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ParamSpec, Protocol, TypeVar, cast

log = logging.getLogger(__name__)

T = TypeVar("T")
J = TypeVar("J")
P = ParamSpec("P")


class Closeable(Protocol):
    """What the engine keeps for the runs of its loop (:meth:`Engine.keep`)."""

    async def close(self) -> None: ...


K = TypeVar("K", bound=Closeable)

#: Threads of the process's database executor: the database calls of runs that are at once.
DB_THREADS = 8

#: Threads of the loop's default executor (``asyncio.to_thread``): blocking I/O of runs that
#: is not the database (a Redfish read, a queue job), made only as needed.
IO_THREADS = 256

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
        #: The process's event loop: every run's hosts, and the connections kept open between
        #: runs (:mod:`gpufleet.collect.ssh_pool`), live on it.
        self.loop = asyncio.new_event_loop()
        # Blocking I/O of runs (``asyncio.to_thread``: the Redfish reads of ``bmc status``,
        # the worker's jobs): threads made as needed, up to IO_THREADS.
        self.loop.set_default_executor(
            ThreadPoolExecutor(max_workers=IO_THREADS, thread_name_prefix="gpufleet-io")
        )
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._kept: dict[str, Closeable] = {}

    def keep(self, name: str, make: Callable[[asyncio.AbstractEventLoop], K]) -> K:
        """The process's ``name``, made by ``make(loop)`` on first use: what runs keep open
        between runs on this loop (``"ssh"``: the kept SSH connections). Closed by
        :meth:`close`."""
        with self._lock:
            got = self._kept.get(name)
            if got is None:
                got = self._kept[name] = make(self.loop)
            return cast(K, got)

    def close(self, wait_s: float = 10.0) -> None:
        """Close what runs kept open (:meth:`keep`) on the loop, waiting up to ``wait_s``;
        made again on next use. Run at the process's exit."""
        with self._lock:
            kept = list(self._kept.values())
            self._kept.clear()
            running = self._thread is not None and self._thread.is_alive()
        if not kept or not running:  # nothing was opened on a loop that never ran
            return
        done = asyncio.run_coroutine_threadsafe(_close_all(kept), self.loop)
        if threading.current_thread() is self._thread:
            return  # on the loop itself: it closes them once this callback returns
        try:
            done.result(wait_s)
        except Exception as exc:
            log.debug("engine close: %s", exc)

    async def db(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn(*args, **kwargs)`` (database work: it blocks) in the executor, awaited. Called
        from a database thread itself (a run started by database work), it runs right there:
        a nested run must not wait for a thread its caller holds."""
        call = functools.partial(fn, *args, **kwargs)
        if getattr(_in_db_thread, "yes", False):
            return call()
        return await asyncio.get_running_loop().run_in_executor(self._pool, call)

    def run(self, work: Coroutine[Any, Any, T]) -> T:
        """Run ``work`` to its end on the process's loop and return what it returns (the
        synchronous face; the calling thread waits). Ctrl-C or SIGTERM's ``SystemExit`` in
        the waiting thread cancels ``work``, whose ``finally`` blocks run (results still
        waiting are stored, claims released, within :data:`CANCEL_WAIT_S`); then the error
        goes on. Called from database work (a run started inside another's apply), it runs
        on a loop of its own in that thread, its database calls right there."""
        if getattr(_in_db_thread, "yes", False):
            return _run_here(work)
        if threading.current_thread() is self._thread:
            work.close()
            raise RuntimeError("Engine.run called on the engine's own loop: await the work")
        loop = self._started()
        done = threading.Event()
        box: list[asyncio.Task[tuple[bool, Any]]] = []
        cancelled = False

        def start() -> None:
            task = loop.create_task(_carried(work))
            box.append(task)
            task.add_done_callback(lambda _t: done.set())
            if cancelled:
                task.cancel()

        loop.call_soon_threadsafe(start)
        try:
            done.wait()
        except BaseException:
            cancelled = True
            loop.call_soon_threadsafe(lambda: box[0].cancel() if box else None)
            done.wait(CANCEL_WAIT_S)
            raise
        ok, value = box[0].result()
        if not ok:
            raise value
        return cast(T, value)

    def _started(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=_serve, args=(self.loop,), name="gpufleet-engine", daemon=True
                )
                self._thread.start()
        return self.loop


#: How long an interrupted run's ``finally`` blocks may take before the error goes on anyway
#: (the claims they did not release run out).
CANCEL_WAIT_S = 60.0


async def _carried(work: Coroutine[Any, Any, T]) -> tuple[bool, Any]:
    """``work``'s value or error as a value: nothing a run raises (a callback's
    ``KeyboardInterrupt`` included) leaves the process's loop; the waiting thread raises it."""
    try:
        return True, await work
    except BaseException as exc:
        return False, exc


async def _close_all(kept: list[Closeable]) -> None:
    for k in kept:
        try:
            await k.close()
        except Exception as exc:
            log.debug("engine close: %s: %s", type(k).__name__, exc)


def _serve(loop: asyncio.AbstractEventLoop) -> None:
    """The engine's thread: the loop runs for the life of the process. An error that escapes
    one of its tasks (a callback's ``KeyboardInterrupt`` in a run's worker task) reaches the
    run that awaits that task; the loop goes on for the others."""
    asyncio.set_event_loop(loop)
    while True:
        try:
            loop.run_forever()
            return
        except BaseException as exc:
            log.debug("engine loop: %s escaped a task; the loop goes on", type(exc).__name__)


def _run_here(work: Coroutine[Any, Any, T]) -> T:
    """Run ``work`` on a loop of its own in this thread (a run nested in database work)."""
    loop = asyncio.new_event_loop()
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
            atexit.register(_at_exit, _engine_pid)
        return _engine


def _at_exit(pid: int) -> None:
    """The process ends: what its runs kept open is closed (the servers see the SSH
    connections go), while the engine's daemon thread still runs."""
    if _engine is not None and _engine_pid == pid == os.getpid():
        _engine.close()


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

    await together(*(worker() for _ in range(max(1, workers))))


async def together(*work: Coroutine[Any, Any, None]) -> None:
    """Await every one of ``work`` at once; on the first error (or a cancel) the others are
    cancelled and awaited before it goes on: nothing of a run outlives it on the process's
    loop, which other runs share."""
    tasks = [asyncio.ensure_future(w) for w in work]
    try:
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
