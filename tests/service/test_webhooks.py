"""Webhooks on SQLite and PostgreSQL, received by a real HTTP server on 127.0.0.1: alarms
opening and closing (sent only after the transaction commits, nothing on rollback),
remediation, lease events through the lease hook point; every body HMAC-signed with the
shared secret, a failed delivery retried with backoff, an unreachable receiver recorded and
never breaking the caller, the secret never stored. Delivery goes through the outbox and its
sender thread: an inspection sweep is not delayed by a receiver that takes 5 s, and two
senders on one database never deliver a notification twice."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
from pydantic import SecretStr
from sqlalchemy import select

from gpufleet.domain.events import AlarmKind, AlarmSeverity, EventKind
from gpufleet.domain.remediation import Action
from gpufleet.inventory import load_inventory
from gpufleet.service.allocation import leases
from gpufleet.service.core import webhooks
from gpufleet.service.core.alarms import close_alarms, raise_alarm
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.health import remediation
from gpufleet.service.hosts.enroll import enroll
from gpufleet.store.repo import host_by_name
from gpufleet.store.tables import Alarm, WebhookDelivery
from gpufleet.testing import FakeClock

SECRET = "s3cr3t-webhook-key"


class Receiver:
    """A real http.server: records (headers, body) and answers the queued statuses (200 once
    the queue is empty), after ``delay_s`` seconds for the first ``slow`` requests; ``answered``
    holds (status, body) of each answer sent."""

    def __init__(self) -> None:
        self.got: list[tuple[dict[str, str], bytes]] = []
        self.answered: list[tuple[int, bytes]] = []
        self.statuses: list[int] = []
        self.slow = 0
        self.delay_s = 0.0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                outer.got.append((dict(self.headers), body))
                if outer.slow > 0:
                    outer.slow -= 1
                    time.sleep(outer.delay_s)
                status = outer.statuses.pop(0) if outer.statuses else 200
                self.send_response(status)
                self.end_headers()
                outer.answered.append((status, body))

            def log_message(self, *args: object) -> None:
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def payloads(self) -> list[dict[str, object]]:
        return [json.loads(body) for _, body in self.got]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.server.shutdown()
    r.server.server_close()


@pytest.fixture(autouse=True)
def _stop_sender(fleet: Fleet) -> Iterator[None]:
    yield
    webhooks.stop(fleet)  # before the fleet's database is closed


def _configure(fleet: Fleet, url: str, retries: int = 3, timeout_s: float = 5.0) -> None:
    fleet.settings = fleet.settings.model_copy(
        update={
            "webhook_url": url,
            "webhook_secret": SecretStr(SECRET),
            "webhook_retries": retries,
            "webhook_timeout_s": timeout_s,
        }
    )


def _flush(fleet: Fleet) -> None:
    assert webhooks.outbox(fleet).flush(30), "webhooks still pending after 30 s"


def _enroll(fleet: Fleet, tmp_path: Path) -> None:
    (tmp_path / "hosts.ini").write_text("[gpu]\nnode-1 ansible_host=10.0.0.1\n")
    enroll(fleet, load_inventory(tmp_path / "hosts.ini"))


def test_alarms_sent_after_commit_signed_and_retried(
    fleet: Fleet, tmp_path: Path, receiver: Receiver
) -> None:
    _configure(fleet, receiver.url)
    _enroll(fleet, tmp_path)
    # a rolled-back transaction notifies nobody
    with pytest.raises(RuntimeError), fleet.db.session() as s:
        h = host_by_name(s, "node-1")
        raise_alarm(s, fleet, h, AlarmKind.OTHER, AlarmSeverity.CRITICAL, "rolled back")
        raise RuntimeError("abort")
    assert receiver.got == []
    receiver.statuses = [500]  # the first try fails: retried after a backoff
    with fleet.db.session() as s:
        h = host_by_name(s, "node-1")
        raise_alarm(s, fleet, h, AlarmKind.OTHER, AlarmSeverity.CRITICAL, "GPU 3 fell off")
        assert receiver.got == []  # not while the transaction is open
    _flush(fleet)
    assert len(receiver.got) == 2  # 500, then 200
    headers, body = receiver.got[-1]
    assert webhooks.verify(SECRET.encode(), body, headers["X-Gpufleet-Signature"])
    assert not webhooks.verify(b"another secret", body, headers["X-Gpufleet-Signature"])
    opened = receiver.payloads()[-1]
    assert opened["kind"] == "alarm-opened" and opened["host"] == "node-1"
    assert opened["data"] == {"kind": "other", "severity": "critical", "message": "GPU 3 fell off"}
    with fleet.db.session() as s:
        close_alarms(s, fleet, host_by_name(s, "node-1"), AlarmKind.OTHER, "GPU reseated")
    _flush(fleet)
    closed = receiver.payloads()[-1]
    assert closed["kind"] == "alarm-closed" and closed["data"]["reason"] == "GPU reseated"  # type: ignore[index]
    with fleet.db.session() as s:
        rows = list(s.scalars(select(WebhookDelivery).order_by(WebhookDelivery.id)))
    assert [(r.kind, r.attempts, r.delivered) for r in rows] == [
        ("alarm-opened", 2, True),
        ("alarm-closed", 1, True),
    ]
    assert all(r.delivered_at is not None and r.next_at is None for r in rows)
    assert headers["X-Gpufleet-Delivery"] == str(rows[0].id)  # the receiver's dedup key
    assert all(SECRET not in json.dumps(r.payload) + (r.error or "") for r in rows)


def test_unreachable_receiver_is_recorded_and_never_breaks_remediation(
    fleet: Fleet, tmp_path: Path, receiver: Receiver
) -> None:
    _enroll(fleet, tmp_path)
    receiver.server.shutdown()
    receiver.server.server_close()  # nobody listens there any more
    _configure(fleet, receiver.url, retries=1)
    eta = fleet.now() + timedelta(days=2)
    got = remediation.remediate(fleet, "node-1", Action.SERVICE_REQUEST, ticket="RMA-77", eta=eta)
    assert got.ok and got.state == "maintenance"
    _flush(fleet)  # two quick attempts, 0.5 s apart; retried later, up to the maximum age
    with fleet.db.session() as s:
        (row,) = s.scalars(select(WebhookDelivery))
        assert row.kind == "remediation" and not row.delivered and row.attempts >= 2
        assert row.error and "Connection refused" in row.error
        assert row.next_at is not None and row.delivered_at is None  # not given up
        assert row.payload["data"]["steps"][0]["action"] == "service-request"
    assert webhooks.notify(fleet, "remediation", "node-1", {"x": 1}) is None  # queued


def test_lease_events_are_queued_in_the_lease_transaction(
    fleet: Fleet, receiver: Receiver
) -> None:
    _configure(fleet, receiver.url)
    if True:
        now = fleet.now()
        view = leases.LeaseView(
            id=9,
            owner="team-a",
            purpose="llm",
            state="active",
            actor="pytest",
            starts_at=now,
            ends_at=now,
            created_at=now,
            hosts=["node-1"],
            gpus=8,
            gpu_uuids={},
            request={},
        )
        with pytest.raises(RuntimeError), fleet.db.session() as s:
            leases.queue_webhook(s, fleet, EventKind.LEASE_RENEWED, view)
            raise RuntimeError("rolled back: nothing queued")
        with fleet.db.session() as s:  # queued in the lease change's own transaction
            leases.queue_webhook(s, fleet, EventKind.LEASE_EXPIRED, view)
    _flush(fleet)
    (payload,) = receiver.payloads()
    assert payload["kind"] == "lease-expired"
    assert payload["data"]["owner"] == "team-a"  # type: ignore[index]
    headers, body = receiver.got[0]
    assert webhooks.verify(SECRET.encode(), body, headers["X-Gpufleet-Signature"])


def test_a_slow_receiver_never_delays_an_inspection_sweep(
    fleet: Fleet, clock: FakeClock, tmp_path: Path, receiver: Receiver
) -> None:
    from gpufleet.lab.demo import enroll_lab
    from gpufleet.lab.fleet import LabFleet
    from gpufleet.service.health.inspect import inspect
    from gpufleet.service.hosts.validate import validate

    fleet.settings.guard_share = 1.0
    d = tmp_path / "lab"
    enroll_lab(fleet, d, 2, models=["h100-8x"], faults={})
    validate(fleet)
    inspect(fleet)
    fl = LabFleet.load(d)
    hosts = [
        h.model_copy(update={"faults": ["ecc-uncorrectable"] if h.name == "gpu-01" else []})
        for h in fl.hosts
    ]
    fl.model_copy(update={"hosts": hosts}).save(d)
    _configure(fleet, receiver.url, timeout_s=20)
    receiver.slow, receiver.delay_s = 1, 5.0  # the first request takes 5 s to answer
    clock.advance(minutes=5)
    t0 = time.monotonic()
    inspect(fleet)  # opens a critical alarm on gpu-01: one notification
    took = time.monotonic() - t0
    assert receiver.answered == []  # the sweep returned while the receiver was still busy
    assert took < 5.0, f"the sweep took {took:.1f} s"
    with fleet.db.session() as s:
        (alarm,) = s.scalars(select(Alarm).where(Alarm.closed_at.is_(None)))
        assert alarm.data["rule"] == "ecc-uncorrectable"
    _flush(fleet)
    (payload,) = receiver.payloads()  # delivered once, after the slow answer
    assert payload["kind"] == "alarm-opened" and payload["host"] == "gpu-01"
    assert payload["data"]["rule"] == "ecc-uncorrectable"  # type: ignore[index]
    assert payload["data"]["severity"] == "critical"  # type: ignore[index]
    headers, body = receiver.got[0]
    assert webhooks.verify(SECRET.encode(), body, headers["X-Gpufleet-Signature"])
    with fleet.db.session() as s:
        (row,) = s.scalars(select(WebhookDelivery))
        assert (row.attempts, row.delivered, row.status) == (1, True, 200)


def test_two_senders_retry_with_backoff_and_never_deliver_twice(
    fleet: Fleet, receiver: Receiver
) -> None:
    """Two senders (as two gpufleet processes would) drain one outbox while the receiver fails
    the first requests: every notification is answered 200 exactly once, failures retried."""
    _configure(fleet, receiver.url, retries=4)
    other = Fleet(db=fleet.db, home=fleet.home, settings=fleet.settings, clock=fleet.clock)
    receiver.statuses = [500, 503, 500, 502]  # the first four requests fail
    try:
        for n in range(12):
            webhooks.notify(fleet if n % 2 else other, "alarm-opened", f"node-{n}", {"n": n})
        _flush(fleet)
        _flush(other)
    finally:
        webhooks.stop(other)
    ok = [json.loads(b)["data"]["n"] for st, b in receiver.answered if st == 200]
    assert sorted(ok) == list(range(12))  # each once
    failed = [st for st, _ in receiver.answered if st != 200]
    assert sorted(failed) == [500, 500, 502, 503]
    with fleet.db.session() as s:
        rows = list(s.scalars(select(WebhookDelivery)))
    assert len(rows) == 12 and all(r.delivered and r.next_at is None for r in rows)
    assert sum(r.attempts for r in rows) == 16  # 12 successes + 4 retried failures


def test_a_short_lived_process_delivers_its_notifications_before_it_exits(
    fleet: Fleet, tmp_path: Path, receiver: Receiver
) -> None:
    """A one-shot command (``gpufleet alarms resolve``) queues and returns at once; at exit the
    process waits for its own notifications (here one failed attempt, then the retry)."""
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from gpufleet.service.core import webhooks\n"
        "from gpufleet.service.core.fleet import Fleet\n"
        "f = Fleet.open(home=Path(sys.argv[2]), url=sys.argv[3], actor='pytest')\n"
        "f.settings = f.settings.model_copy(update={'webhook_url': sys.argv[1]})\n"
        "assert webhooks.notify(f, 'alarm-opened', 'node-9', {'n': 9}) is None\n"
        "print('queued', flush=True)\n"
    )
    receiver.statuses = [500]
    out = subprocess.run(
        [sys.executable, "-c", script, receiver.url, str(tmp_path / "h2"), fleet.settings.db_url()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "queued"
    assert [p["host"] for p in receiver.payloads()] == ["node-9", "node-9"]  # 500, then 200
    with fleet.db.session() as s:
        (row,) = s.scalars(select(WebhookDelivery))
    assert (row.attempts, row.delivered, row.next_at) == (2, True, None)
