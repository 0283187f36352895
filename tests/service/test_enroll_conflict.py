"""Concurrent enrolls of the same inventory (issue 24, item 11): the loser of the race on the
host name's unique key gets a retryable Conflict, retried on a fresh read, not a ``store``
error. On 84be469 the IntegrityError reached the caller (``store``, exit 2).

PostgreSQL: the second INSERT of a name waits on the first transaction's uncommitted row and
fails once it commits, which is the race exactly (SQLite serialises whole writers instead).
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from gpufleet.domain.states import HostState
from gpufleet.inventory import load_inventory
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.enroll import EnrollReport, enroll
from gpufleet.store.tables import Host


@pytest.mark.parametrize("fleet", ["postgres"], indirect=True)
def test_an_enroll_that_loses_the_race_retries_and_finds_the_host(
    fleet: Fleet, tmp_path: Path
) -> None:
    inv = tmp_path / "hosts.ini"
    inv.write_text("race-01 ansible_host=192.0.2.31\n")
    inventory = load_inventory(inv)
    held = threading.Event()
    release = threading.Event()

    def other_enroll() -> None:  # another process, in the middle of its transaction
        now = fleet.now()
        with fleet.db.session() as s:
            s.add(Host(name="race-01", address="192.0.2.99", state=HostState.ENROLLED,
                       state_entered_at=now, created_at=now, updated_at=now))
            s.flush()
            held.set()
            release.wait(30)

    other = threading.Thread(target=other_enroll)
    other.start()
    assert held.wait(30)
    got: list[EnrollReport | BaseException] = []

    def ours() -> None:
        try:
            got.append(enroll(fleet, inventory))
        except BaseException as exc:  # what the caller would see
            got.append(exc)

    mine = threading.Thread(target=ours)
    mine.start()
    mine.join(1.5)  # waiting on the other's row
    assert mine.is_alive() and not got
    release.set()
    other.join(30)
    mine.join(30)
    (rep,) = got
    assert isinstance(rep, EnrollReport), repr(rep)
    assert rep.updated == ["race-01"] and rep.added == []  # found on the retry, updated
    with fleet.db.session() as s:
        (h,) = s.query(Host).all()
        assert (h.name, h.address) == ("race-01", "192.0.2.31")
