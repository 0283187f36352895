"""Webhooks on SQLite and PostgreSQL, received by a real HTTP server on 127.0.0.1: alarms
opening and closing (sent only after the transaction commits, nothing on rollback),
remediation, lease events through the lease hook point; every body HMAC-signed with the
shared secret, a failed delivery retried with backoff, an unreachable receiver recorded and
never breaking the caller, the secret never stored."""

from __future__ import annotations

import json
import threading
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
from gpufleet.service import leases, remediation, webhooks
from gpufleet.service.alarms import close_alarms, raise_alarm
from gpufleet.service.enroll import enroll
from gpufleet.service.fleet import Fleet
from gpufleet.store.repo import host_by_name
from gpufleet.store.tables import WebhookDelivery

SECRET = "s3cr3t-webhook-key"


class Receiver:
    """A real http.server: records (headers, body) and answers the queued statuses (200 once
    the queue is empty)."""

    def __init__(self) -> None:
        self.got: list[tuple[dict[str, str], bytes]] = []
        self.statuses: list[int] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                outer.got.append((dict(self.headers), body))
                self.send_response(outer.statuses.pop(0) if outer.statuses else 200)
                self.end_headers()

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


def _configure(fleet: Fleet, url: str, retries: int = 3) -> None:
    fleet.settings = fleet.settings.model_copy(
        update={
            "webhook_url": url,
            "webhook_secret": SecretStr(SECRET),
            "webhook_retries": retries,
        }
    )


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
    assert len(receiver.got) == 2  # 500, then 200
    headers, body = receiver.got[-1]
    assert webhooks.verify(SECRET.encode(), body, headers["X-Gpufleet-Signature"])
    assert not webhooks.verify(b"another secret", body, headers["X-Gpufleet-Signature"])
    opened = receiver.payloads()[-1]
    assert opened["kind"] == "alarm-opened" and opened["host"] == "node-1"
    assert opened["data"] == {"kind": "other", "severity": "critical", "message": "GPU 3 fell off"}
    with fleet.db.session() as s:
        close_alarms(s, fleet, host_by_name(s, "node-1"), AlarmKind.OTHER, "GPU reseated")
    closed = receiver.payloads()[-1]
    assert closed["kind"] == "alarm-closed" and closed["data"]["reason"] == "GPU reseated"  # type: ignore[index]
    with fleet.db.session() as s:
        rows = list(s.scalars(select(WebhookDelivery).order_by(WebhookDelivery.id)))
    assert [(r.kind, r.attempts, r.delivered) for r in rows] == [
        ("alarm-opened", 2, True),
        ("alarm-closed", 1, True),
    ]
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
    with fleet.db.session() as s:
        (row,) = s.scalars(select(WebhookDelivery))
        assert row.kind == "remediation" and not row.delivered and row.attempts == 2
        assert row.error and "Connection refused" in row.error
        assert row.payload["data"]["steps"][0]["action"] == "service-request"
    problem = webhooks.notify(fleet, "remediation", "node-1", {"x": 1})
    assert problem is not None and "not delivered after 2 attempt(s)" in problem


def test_lease_events_are_delivered_through_the_hook_point(
    fleet: Fleet, receiver: Receiver
) -> None:
    _configure(fleet, receiver.url)
    remove = webhooks.install(fleet)
    try:
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
        assert leases.call_hooks(EventKind.LEASE_EXPIRED, view) == []
    finally:
        remove()
    (payload,) = receiver.payloads()
    assert payload["kind"] == "lease-expired"
    assert payload["data"]["owner"] == "team-a"  # type: ignore[index]
    headers, body = receiver.got[0]
    assert webhooks.verify(SECRET.encode(), body, headers["X-Gpufleet-Signature"])
