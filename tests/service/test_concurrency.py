"""Two real processes writing the same host: no lost update, a consistent event chain.

Issue 6 B.11: an operator's ``maintenance on`` must never be undone by a validation that read
the host's state before the operator wrote it. The deterministic test holds the validating
process between its read and its write (a pause inside ``gpu_health.judge``, which runs between the
two) while a second process puts the host in maintenance; the stress test just runs both in
loops. Both run on SQLite and PostgreSQL (the ``fleet`` fixture).
"""

from __future__ import annotations

import itertools
import multiprocessing as mp
from multiprocessing.synchronize import Event as MpEvent
from pathlib import Path
from typing import Any

from sqlalchemy import select

from gpufleet.lab.demo import enroll_lab
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts import gpu_health, operations
from gpufleet.service.hosts import validate as validate_mod
from gpufleet.store.tables import Event, Host

CTX = mp.get_context("spawn")  # a fresh interpreter per process, nothing shared but the DB


def _lab(fleet: Fleet, tmp_path: Path, n: int = 1) -> None:
    enroll_lab(fleet, tmp_path / "lab", n, models=["h100-8x"], faults={})


def _open(url: str, home: str) -> Fleet:
    return Fleet.open(home=Path(home), url=url, actor="proc")


def _validate_paused(url: str, home: str, read_done: MpEvent, maint_done: MpEvent) -> None:
    """Validate gpu-01, pausing after the host was read until the operator has written."""
    fleet = _open(url, home)
    real = gpu_health.judge

    def paused(*args: Any, **kwargs: Any) -> Any:
        out = real(*args, **kwargs)
        if not read_done.is_set():
            read_done.set()
            # On PostgreSQL the operator waits for our row lock; do not wait for it forever.
            maint_done.wait(5)
        return out

    gpu_health.judge = paused
    validate_mod.validate(fleet, "gpu-01", collect_first=False)
    fleet.db.dispose()


def _maintenance_after_read(url: str, home: str, read_done: MpEvent, maint_done: MpEvent) -> None:
    fleet = _open(url, home)
    assert read_done.wait(60), "validating process never read the host"
    operations.maintenance_on(fleet, "gpu-01", "operator: swap PSU")
    maint_done.set()
    fleet.db.dispose()


def _validate_loop(url: str, home: str, rounds: int) -> None:
    fleet = _open(url, home)
    for _ in range(rounds):
        validate_mod.validate(fleet, "gpu-01", collect_first=False)
    fleet.db.dispose()


def _maintenance_loop(url: str, home: str, rounds: int) -> None:
    fleet = _open(url, home)
    for _ in range(rounds):
        operations.maintenance_on(fleet, "gpu-01", "operator")
        operations.maintenance_off(fleet, "gpu-01", "operator done")
    fleet.db.dispose()


def _run(*procs: Any) -> None:
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0, f"{p.name} exited {p.exitcode}"


def _chain(fleet: Fleet) -> tuple[list[tuple[str, str, str]], str]:
    """(event, from, to) of every transition of gpu-01 in order, and its stored state."""
    with fleet.db.session() as s:
        rows = s.scalars(
            select(Event)
            .where(Event.kind == "transition", Event.host_name == "gpu-01")
            .order_by(Event.id)
        )
        chain = [(r.data["event"], r.data["from"], r.data["to"]) for r in rows]
        host = s.scalar(select(Host).where(Host.name == "gpu-01"))
        assert host is not None
        return chain, str(host.state)


def _assert_consistent(chain: list[tuple[str, str, str]], state: str) -> None:
    for (ev0, _, to0), (ev1, frm1, _) in itertools.pairwise(chain):
        assert frm1 == to0, f"'{ev1}' starts from {frm1} but '{ev0}' left the host {to0}: {chain}"
    assert chain[-1][2] == state, (chain[-1], state)


def test_validation_never_undoes_concurrent_maintenance(fleet: Fleet, tmp_path: Path) -> None:
    _lab(fleet, tmp_path)
    validate_mod.validate(fleet)  # collect + judge: gpu-01 is available
    assert _chain(fleet)[1] == "available"
    read_done, maint_done = CTX.Event(), CTX.Event()
    home = str(tmp_path / "home")
    _run(
        CTX.Process(target=_validate_paused, args=(fleet.db.url, home, read_done, maint_done)),
        CTX.Process(
            target=_maintenance_after_read, args=(fleet.db.url, home, read_done, maint_done)
        ),
    )
    chain, state = _chain(fleet)
    assert state == "maintenance", chain  # the operator's word stands
    _assert_consistent(chain, state)
    assert ("maintenance_on", "available", "maintenance") in chain


def test_concurrent_validate_and_maintenance_loops_keep_the_chain(
    fleet: Fleet, tmp_path: Path
) -> None:
    _lab(fleet, tmp_path)
    validate_mod.validate(fleet)
    home = str(tmp_path / "home")
    _run(
        CTX.Process(target=_validate_loop, args=(fleet.db.url, home, 15)),
        CTX.Process(target=_maintenance_loop, args=(fleet.db.url, home, 15)),
    )
    chain, state = _chain(fleet)
    _assert_consistent(chain, state)
    # every one of the operator's 30 actions was applied, none lost or refused
    assert sum(1 for ev, _, _ in chain if ev in ("maintenance_on", "maintenance_off")) == 30
    # and a validation never moved a host the operator held
    assert all(frm != "maintenance" for ev, frm, _ in chain if ev != "maintenance_off")
