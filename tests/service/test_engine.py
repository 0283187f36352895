"""service/core/engine.py (issue 25, item 3): a run talks to hosts on its event loop and
sends every database call (claim more, renew, store, release) to the engine's bounded
executor; no statement ever runs on the loop. Checked on SQLite and PostgreSQL with the
database's own statement hook, over a collection that claims in batches."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import Any

from sqlalchemy import event

from gpufleet.lab.demo import enroll_lab
from gpufleet.service.core.engine import DB_THREADS, Engine, engine
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.collect import collect


def _on_a_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def test_no_statement_of_a_run_runs_on_its_loop(fleet: Fleet, tmp_path: Path) -> None:
    enroll_lab(fleet, tmp_path / "lab", 7, models=["a100-8x"], faults={})
    seen: list[tuple[str, bool]] = []

    def statement(*_args: Any) -> None:
        seen.append((threading.current_thread().name, _on_a_loop()))

    event.listen(fleet.db.engine, "before_cursor_execute", statement)
    try:
        rep = collect(fleet, forks=2)  # claims in batches of 2: the claims run mid-run
    finally:
        event.remove(fleet.db.engine, "before_cursor_execute", statement)
    assert rep.ok and len(rep.results) == 7
    on_loop = [name for name, loop in seen if loop]
    assert not on_loop, f"{len(on_loop)} statements ran on an event loop"
    assert any(name.startswith("gpufleet-db") for name, _ in seen)


def test_the_engine_is_one_per_process_and_bounded() -> None:
    assert engine() is engine()
    assert engine().db_threads == DB_THREADS

    async def many() -> set[str]:
        e = Engine(db_threads=2)
        names = await asyncio.gather(
            *(e.db(lambda: (threading.Event().wait(0.05), threading.current_thread().name)[1])
              for _ in range(6))
        )
        return set(names)

    assert len(Engine().run(many())) <= 2
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # a forked child gets an engine of its own (no thread survives a fork)
        os.write(w, b"1" if engine() is not None and engine().run(_one()) == 1 else b"0")
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(r, 1) == b"1"


async def _one() -> int:
    return await engine().db(lambda: 1)


def test_one_loop_for_every_run_and_an_interrupt_cancels_only_its_run() -> None:
    e = Engine(db_threads=2)

    async def where() -> asyncio.AbstractEventLoop:
        return asyncio.get_running_loop()

    first = e.run(where())
    assert e.run(where()) is first  # one long-lived loop: kept connections stay usable
    closed: list[str] = []

    async def interrupted() -> None:
        async def boom() -> None:  # a callback's Ctrl-C in another task of the run
            raise KeyboardInterrupt

        try:
            await asyncio.gather(boom(), asyncio.sleep(30))
        finally:
            closed.append(await e.db(lambda: "released"))  # the run's finally still runs

    try:
        e.run(interrupted())
    except KeyboardInterrupt:
        pass
    else:
        raise AssertionError("the interrupt was lost")
    assert closed == ["released"]
    assert e.run(where()) is first  # the loop goes on for the next run


def test_a_run_started_inside_database_work_runs_there() -> None:
    e = Engine(db_threads=1)

    async def outer() -> int:
        return await e.db(lambda: e.run(_inner(e)))  # the only database thread is held

    assert e.run(outer()) == 2


async def _inner(e: Engine) -> int:
    return await e.db(lambda: 2)
