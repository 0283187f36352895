"""Issue 24, items 10 and 11: nothing a platform says is lost. On SQLite and PostgreSQL, with a
real HTTP receiver on 127.0.0.1 and real processes:

* a process killed (SIGKILL) right after the commit of an alarm, before anything else ran,
  loses no webhook: the row was written in the alarm's transaction and the next gpufleet
  process (the CLI) delivers it (on 84be469 the row was written after the commit, by an
  ``after_commit`` listener, and the notification was lost);
* a delivery that failed more often than ``GPUFLEET_WEBHOOK_RETRIES`` is still retried and
  delivered (84be469 gave it up after 4 attempts), and one older than
  ``GPUFLEET_WEBHOOK_MAX_AGE_H`` is dead-lettered: ``gpufleet alarms``, the API and
  ``/metrics`` show it;
* a background failure (a failed delivery, a claim renewal that cannot reach the store) is
  logged on its module's logger and counted in ``gpufleet_background_errors_total``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from procrastinate import JobContext
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import select
from tests.api.conftest import auth, write_tokens
from tests.service.test_webhooks import SECRET, Receiver

from gpufleet.api.app import create_app
from gpufleet.api.auth import TokenStore
from gpufleet.domain.events import AlarmKind, AlarmSeverity
from gpufleet.inventory import load_inventory
from gpufleet.service.core import background_errors as background
from gpufleet.service.core import webhooks
from gpufleet.service.core.alarms import raise_alarm
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.core.pipeline import keep_renewing
from gpufleet.service.hosts.enroll import enroll
from gpufleet.store.db import Database
from gpufleet.store.repo import host_by_name
from gpufleet.store.tables import Alarm, WebhookDelivery
from gpufleet.testing import FakeClock

#: The child: opens the fleet, raises an alarm and is killed by SIGKILL the moment its
#: transaction has committed (a listener registered before the alarm's own runs first).
KILLED_CHILD = """
import os, signal, sys
from pathlib import Path
from sqlalchemy import event
from gpufleet.domain.events import AlarmKind, AlarmSeverity
from gpufleet.service.core.alarms import raise_alarm
from gpufleet.service.core.fleet import Fleet
from gpufleet.store.db import Database
from gpufleet.store.repo import host_by_name

f = Fleet.open(home=Path(sys.argv[2]), url=sys.argv[3], actor="doomed")
f.settings = f.settings.model_copy(update={"webhook_url": sys.argv[1]})
with f.db.session() as s:
    event.listen(s, "after_commit", lambda _: os.kill(os.getpid(), signal.SIGKILL))
    h = host_by_name(s, "node-1")
    raise_alarm(s, f, h, AlarmKind.OTHER, AlarmSeverity.CRITICAL, "PSU 2 lost input")
print("survived the kill", flush=True)
"""


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.server.shutdown()
    r.server.server_close()


@pytest.fixture(autouse=True)
def _stop_sender(fleet: Fleet) -> Iterator[None]:
    yield
    webhooks.stop(fleet)


def _enroll(fleet: Fleet, tmp_path: Path) -> None:
    (tmp_path / "hosts.ini").write_text("[gpu]\nnode-1 ansible_host=10.0.0.1\n")
    enroll(fleet, load_inventory(tmp_path / "hosts.ini"))


def _configure(fleet: Fleet, url: str, **more: object) -> None:
    fleet.settings = fleet.settings.model_copy(
        update={"webhook_url": url, "webhook_timeout_s": 5.0, **more}
    )


def _rows(fleet: Fleet) -> list[WebhookDelivery]:
    with fleet.db.session() as s:
        return list(s.scalars(select(WebhookDelivery).order_by(WebhookDelivery.id)))


def _alarms(fleet: Fleet) -> list[str]:
    with fleet.db.session() as s:
        return list(s.scalars(select(Alarm.message).order_by(Alarm.id)))


def _wait(fleet: Fleet, cond: object, timeout_s: float = 40.0) -> None:
    assert callable(cond)
    end = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < end, f"not reached in {timeout_s} s: {_rows(fleet)}"
        webhooks.outbox(fleet).wake()
        time.sleep(0.1)


def test_a_process_killed_between_commit_and_delivery_loses_no_webhook(
    fleet: Fleet, tmp_path: Path, receiver: Receiver
) -> None:
    _enroll(fleet, tmp_path)
    url = fleet.settings.db_url()
    child = subprocess.run(
        [sys.executable, "-c", KILLED_CHILD, receiver.url, str(tmp_path / "h1"), url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr  # a real kill -9
    assert "survived" not in child.stdout
    assert receiver.got == []  # it died before sending anything
    assert _alarms(fleet) == ["PSU 2 lost input"]  # the alarm was committed ...
    (row,) = _rows(fleet)  # ... and so was its notification, in the same transaction
    assert (row.kind, row.delivered, row.attempts) == ("alarm-opened", False, 0)
    # the next process (any command that opens the fleet) sends it before it exits
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    env |= {
        "GPUFLEET_HOME": str(tmp_path / "h2"),
        "GPUFLEET_DATABASE_URL": url,
        "GPUFLEET_WEBHOOK_URL": receiver.url,
        "GPUFLEET_WEBHOOK_SECRET": SECRET,
        "COLUMNS": "200",
    }
    gpufleet = Path(sys.executable).with_name("gpufleet")
    nxt = subprocess.run(
        [str(gpufleet), "alarms", "list"], capture_output=True, text=True, timeout=120, env=env
    )
    assert nxt.returncode == 0, nxt.stderr
    assert "PSU 2 lost input" in nxt.stdout
    (payload,) = receiver.payloads()
    assert payload["kind"] == "alarm-opened" and payload["host"] == "node-1"
    assert payload["data"]["message"] == "PSU 2 lost input"  # type: ignore[index]
    headers, body = receiver.got[0]
    assert webhooks.verify(SECRET.encode(), body, headers["X-Gpufleet-Signature"])
    (row,) = _rows(fleet)
    assert row.delivered and row.attempts == 1 and row.next_at is None


def test_a_rolled_back_change_queues_nothing(
    fleet: Fleet, tmp_path: Path, receiver: Receiver
) -> None:
    """The outbox row and the alarm commit together or not at all (here: not at all)."""
    _enroll(fleet, tmp_path)
    _configure(fleet, receiver.url)
    with pytest.raises(RuntimeError), fleet.db.session() as s:
        h = host_by_name(s, "node-1")
        raise_alarm(s, fleet, h, AlarmKind.OTHER, AlarmSeverity.WARNING, "rolled back")
        raise RuntimeError("abort")
    assert _rows(fleet) == [] and _alarms(fleet) == []


def test_retries_go_on_past_the_quick_ones_then_dead_letter_shown_everywhere(
    fleet: Fleet,
    clock: FakeClock,
    tmp_path: Path,
    receiver: Receiver,
    caplog: pytest.LogCaptureFixture,
) -> None:
    _enroll(fleet, tmp_path)
    _configure(fleet, receiver.url, webhook_retries=3, webhook_max_age_h=24.0)
    before = background.counts()[background.WEBHOOK_OUTBOX]
    receiver.statuses = [500, 502, 503, 500]  # fails 4 times: 84be469 gave up there
    caplog.set_level(logging.WARNING, logger="gpufleet.service.core.webhooks")
    assert webhooks.notify(fleet, "alarm-opened", "node-1", {"n": 1}) is None
    _wait(fleet, lambda: all(r.delivered for r in _rows(fleet)))
    (row,) = _rows(fleet)
    assert (row.attempts, row.status, row.next_at) == (5, 200, None)
    assert [st for st, _ in receiver.answered] == [500, 502, 503, 500, 200]
    failed = [r.getMessage() for r in caplog.records if "failed, attempt" in r.getMessage()]
    assert len(failed) == 4 and "HTTP 503" in failed[2], failed
    assert background.counts()[background.WEBHOOK_OUTBOX] - before == 4
    # a notification still failing once older than GPUFLEET_WEBHOOK_MAX_AGE_H: dead-lettered
    receiver.statuses = [500] * 3
    assert webhooks.notify(fleet, "alarm-closed", "node-1", {"n": 2}) is None
    _wait(fleet, lambda: _rows(fleet)[-1].attempts >= 1)
    clock.advance(hours=25)
    _wait(fleet, lambda: _rows(fleet)[-1].next_at is None)
    dead = _rows(fleet)[-1]
    assert (dead.delivered, dead.attempts, dead.error) == (False, 2, "HTTP 500")
    assert receiver.statuses == [500]  # and never tried again
    assert any("dead-lettered" in r.getMessage() for r in caplog.records)
    (letter,) = webhooks.dead_letters(fleet)
    assert (letter.id, letter.kind, letter.host) == (dead.id, "alarm-closed", "node-1")
    # the API and /metrics of the server show it too
    tokens = write_tokens(tmp_path / "tokens.yaml")
    with TestClient(create_app(fleet, TokenStore(tokens))) as c:
        got = c.get("/api/v1/webhooks/dead-letters", headers=auth("viewer"))
        assert got.status_code == 200, got.text
        assert [(d["id"], d["kind"], d["error"]) for d in got.json()] == [
            (dead.id, "alarm-closed", "HTTP 500")
        ]
        text = c.get("/metrics").text
    values = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }
    assert values[("gpufleet_webhook_dead_letters", ())] == 1
    key = ("gpufleet_background_errors_total", (("component", "webhook-outbox"),))
    assert values[key] == background.counts()[background.WEBHOOK_OUTBOX] >= before + 6
    assert values[("gpufleet_background_errors_total", (("component", "claim-renewal"),))] >= 0


def test_a_failed_claim_renewal_is_logged_and_counted(
    fleet: Fleet, caplog: pytest.LogCaptureFixture
) -> None:
    """The renewer of a run whose store went away: 84be469 swallowed it silently."""
    before = background.counts()[background.CLAIM_RENEWAL]
    caplog.set_level(logging.WARNING, logger="gpufleet.service.core.pipeline")
    gone = Database("postgresql+psycopg://nobody@127.0.0.1:1/gone")  # nothing listens there
    broken = Fleet(db=gone, home=fleet.home, settings=fleet.settings, clock=fleet.clock)

    async def until_reported() -> None:
        renewer = asyncio.create_task(
            keep_renewing(broken, "tok", lambda: timedelta(minutes=5), interval_s=0.05))
        try:
            end = time.monotonic() + 20
            while background.counts()[background.CLAIM_RENEWAL] == before:
                assert time.monotonic() < end, "no renewal failure reported"
                await asyncio.sleep(0.05)
        finally:
            renewer.cancel()

    try:
        asyncio.run(until_reported())
    finally:
        broken.db.dispose()
    (rec, *_) = [r for r in caplog.records if r.name == "gpufleet.service.core.pipeline"]
    assert rec.levelno == logging.WARNING
    assert "claim-renewal: cannot renew claims: StoreUnavailable" in rec.getMessage()
    assert "Connection refused" in rec.getMessage()


def test_every_lease_event_is_queued_with_its_change(
    fleet: Fleet, clock: FakeClock, tmp_path: Path, receiver: Receiver
) -> None:
    """Granted, reserved, started (the sweep), renewed, released: one row each, written by the
    lease change's transaction, delivered once (84be469 queued them through a hook after the
    commit, and only where the CLI had installed it)."""
    from tests.service.test_allocation import lab

    from gpufleet.domain.placement import Request
    from gpufleet.service.allocation import allocation, leases
    from gpufleet.service.background.sweeper import sweep

    lab(fleet, tmp_path, n=2)
    _configure(fleet, receiver.url)
    hour = timedelta(hours=1)
    now = fleet.now()
    got = allocation.allocate(fleet, Request(hosts=1), owner="a", purpose="p", duration=hour)
    assert got.lease is not None
    leases.renew(fleet, got.lease.id, duration=2 * hour)
    later = allocation.allocate(
        fleet, Request(hosts=1), owner="b", purpose="q", start=now + hour, duration=hour
    )
    assert later.lease is not None
    clock.advance(minutes=61)
    sweep(fleet)  # the reservation starts
    leases.release(fleet, got.lease.id)
    _wait(fleet, lambda: all(r.delivered for r in _rows(fleet)))
    kinds = [(r.kind, r.payload["data"]["id"]) for r in _rows(fleet)]
    a, b = got.lease.id, later.lease.id
    assert kinds == [
        ("lease-granted", a),
        ("lease-renewed", a),
        ("lease-reserved", b),
        ("lease-started", b),
        ("lease-released", a),
    ]
    sent = [(p["kind"], p["data"]["id"]) for p in receiver.payloads()]  # type: ignore[index]
    assert sorted(sent) == sorted(kinds)


def lost_store_job(fleet: Fleet, job_id: int) -> tuple[JobContext, Database]:
    """The context of periodic job ``job_id`` (the sweep) on a copy of ``fleet`` whose store
    went away, and that store (dispose it)."""
    from procrastinate.jobs import Job
    from procrastinate.testing import InMemoryConnector

    from gpufleet.service.background.tasks import build_app

    gone = Database("postgresql+psycopg://nobody@127.0.0.1:1/gone")
    broken = Fleet(db=gone, home=fleet.home, settings=fleet.settings, clock=fleet.clock)
    app = build_app(InMemoryConnector(), fleet.settings, schedules=False)
    job = Job(id=job_id, queue="periodic", lock=None, queueing_lock=None,
              task_name="gpufleet.sweep", task_kwargs={"timestamp": 0})
    context = JobContext(app=app, job=job, start_timestamp=time.time(),
                         additional_context={"fleet": broken}, abort_reason=lambda: None)
    return context, gone


def test_a_failed_scheduled_task_is_logged_counted_and_still_fails_its_job(
    fleet: Fleet, caplog: pytest.LogCaptureFixture
) -> None:
    """The periodic sweep on a store that went away: reported (``scheduler``), then raised for
    procrastinate to record the failed job."""
    from gpufleet.errors import StoreUnavailable
    from gpufleet.service.background.tasks import sweep_task

    context, gone = lost_store_job(fleet, 1)
    before = background.counts()[background.SCHEDULER]
    caplog.set_level(logging.WARNING, logger="gpufleet.service.background.tasks")
    try:
        with pytest.raises(StoreUnavailable):
            sweep_task(context, timestamp=0)
    finally:
        gone.dispose()
    assert background.counts()[background.SCHEDULER] == before + 1
    (rec,) = [r for r in caplog.records if r.name == "gpufleet.service.background.tasks"]
    assert "scheduler: task sweep_task failed: StoreUnavailable" in rec.getMessage()
