"""Notifications: a JSON POST to ``GPUFLEET_WEBHOOK_URL`` for alarms opening and closing,
remediation and lease events, beside the audit log.

Each body is signed with ``GPUFLEET_WEBHOOK_SECRET``: header ``X-Gpufleet-Signature:
sha256=<hex HMAC-SHA256 of the body>`` (:func:`sign`; a receiver checks it with
:func:`verify`).

Delivery never holds up the caller (an inspection sweep is never delayed by a slow receiver):
:func:`notify` only writes the notification to the outbox (``webhook_deliveries``, one short
insert) and wakes this process's sender, a daemon thread (:class:`Outbox`) that POSTs it. A
failed attempt (connection error, timeout, HTTP status >= 300) is retried with exponential
backoff (0.5 s, 1 s, 2 s ... ``GPUFLEET_WEBHOOK_RETRIES`` times); every row keeps its attempts,
last status and error. A sender claims a row (``claim``, ``claimed_until``: the request timeout
and a margin) before it POSTs, outside any transaction, so two senders (two gpufleet processes
on one database) never send one notification at the same time, and a delivered row is never
sent again. A row whose sender died is taken over when its claim runs out. Every request
carries ``X-Gpufleet-Delivery: <row id>``, the same on each retry of one notification: a
request that timed out on our side but reached the receiver is retried (at least once), and
the receiver drops the repeat by that id. At exit a process
waits for its own outstanding notifications at most as long as their retries take; what is
left is sent by the next gpufleet process that notifies. Callers call
:func:`notify` after their transaction committed; it never raises (a notification must not undo
or break the change) and never prints or stores the secret.

:func:`install` registers :func:`notify` as the lease hook (``service/leases.py``), so lease
expiry and the other lease events are delivered here too.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import hmac
import json
import secrets
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, or_, select, update
from sqlalchemy import event as sa_event
from sqlalchemy.orm import Session

from gpufleet.domain.events import EventKind
from gpufleet.service.fleet import Fleet, utcnow
from gpufleet.store.tables import WebhookDelivery

SIGNATURE_HEADER = "X-Gpufleet-Signature"
DELIVERY_HEADER = "X-Gpufleet-Delivery"
_BACKOFF_S = 0.5
#: Rows one sender claims at a time.
_BATCH = 20


def sign(secret: bytes, body: bytes) -> str:
    """``sha256=<hex>`` of the body under the shared secret."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def verify(secret: bytes, body: bytes, signature: str | None) -> bool:
    """The receiver's check (constant time)."""
    return signature is not None and hmac.compare_digest(sign(secret, body), signature)


def _json(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def _post(url: str, body: bytes, headers: dict[str, str], timeout_s: float) -> int:
    req = urllib.request.Request(url, data=body, headers=headers, method="POST")
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # the operator's URL
        return int(resp.status)


def _body(fleet: Fleet, kind: str, host: str | None, data: dict[str, Any]) -> dict[str, Any]:
    payload = {"kind": kind, "host": host, "at": fleet.now().isoformat(), "data": data}
    return dict(json.loads(json.dumps(payload, default=_json, sort_keys=True)))


def enqueue(
    fleet: Fleet, kind: str, host: str | None, data: dict[str, Any]
) -> WebhookDelivery | None:
    """Put one notification in the outbox (due now) and wake the sender; None when no webhook
    is set. Returns at once: the POST happens in the sender thread."""
    if not fleet.settings.webhook_url:
        return None
    row = WebhookDelivery(
        at=fleet.now(),
        kind=kind,
        host_name=host,
        payload=_body(fleet, kind, host, data),
        attempts=0,
        delivered=False,
        next_at=utcnow(),
    )
    with fleet.db.session() as s:
        s.add(row)
        s.flush()
        s.expunge(row)
    outbox(fleet).wake(row.id)
    return row


def _due(now: datetime) -> Any:
    return and_(
        WebhookDelivery.delivered.is_(False),
        WebhookDelivery.next_at.is_not(None),
        WebhookDelivery.next_at <= now,
        or_(WebhookDelivery.claimed_until.is_(None), WebhookDelivery.claimed_until < now),
    )


def _claim(fleet: Fleet, token: str, limit: int = _BATCH) -> list[int]:
    """Claim up to ``limit`` due rows for ``token`` (a row is claimed by one sender: the
    conditional update of each row succeeds for one of them)."""
    now = utcnow()
    hold = now + timedelta(seconds=fleet.settings.webhook_timeout_s + 30)
    got: list[int] = []
    with fleet.db.session() as s:
        ids = list(
            s.scalars(
                select(WebhookDelivery.id)
                .where(_due(now))
                .order_by(WebhookDelivery.next_at, WebhookDelivery.id)
                .limit(limit)
            )
        )
        for rid in ids:
            res = s.execute(
                update(WebhookDelivery)
                .where(WebhookDelivery.id == rid, _due(now))
                .values(claim=token, claimed_until=hold)
                .execution_options(synchronize_session=False)
            )
            if getattr(res, "rowcount", 0) == 1:
                got.append(rid)
    return got


def _attempt(fleet: Fleet, rid: int, token: str) -> bool:
    """One POST of a claimed row (no transaction open during it) and its record; True when the
    row is finished (delivered, or out of retries)."""
    settings = fleet.settings
    with fleet.db.session() as s:
        row = s.get(WebhookDelivery, rid)
        if row is None or row.claim != token or row.delivered:
            return True
        payload, attempts = row.payload, row.attempts
    url = settings.webhook_url
    status: int | None = None
    error: str | None = None
    delivered = False
    if not url:
        error = "no webhook URL configured (GPUFLEET_WEBHOOK_URL)"
    else:
        body = json.dumps(payload, sort_keys=True).encode()
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "gpufleet",
            DELIVERY_HEADER: str(rid),  # the same on every retry: the receiver's dedup key
        }
        if settings.webhook_secret is not None:
            secret = settings.webhook_secret.get_secret_value().encode()
            headers[SIGNATURE_HEADER] = sign(secret, body)
        try:
            status = _post(url, body, headers, settings.webhook_timeout_s)
            delivered = status < 300
            error = None if delivered else f"HTTP {status}"
        except urllib.error.HTTPError as exc:
            status, error = exc.code, f"HTTP {exc.code}"
        except (OSError, ValueError) as exc:  # refused, timeout, bad URL
            status, error = None, f"{type(exc).__name__}: {exc}"
    attempts += 1
    now = utcnow()
    finished = delivered or attempts > settings.webhook_retries or not url
    values: dict[str, Any] = {
        "attempts": attempts,
        "delivered": delivered,
        "status": status,
        "error": error,
        "claim": None,
        "claimed_until": None,
        "next_at": None if finished else now + timedelta(seconds=_BACKOFF_S * 2 ** (attempts - 1)),
        "delivered_at": now if delivered else None,
    }
    with fleet.db.session() as s:
        s.execute(
            update(WebhookDelivery)
            .where(WebhookDelivery.id == rid, WebhookDelivery.claim == token)
            .values(**values)
            .execution_options(synchronize_session=False)
        )
    return finished


def pending(fleet: Fleet, ids: set[int] | None = None) -> int:
    """Rows not finished yet (due or waiting for a retry), of ``ids`` or all."""
    with fleet.db.session() as s:
        q = select(WebhookDelivery.id).where(
            WebhookDelivery.delivered.is_(False), WebhookDelivery.next_at.is_not(None)
        )
        if ids is not None:
            q = q.where(WebhookDelivery.id.in_(ids))
        return len(list(s.scalars(q)))


class Outbox:
    """This process's sender for one fleet: a daemon thread that claims due rows and POSTs
    them, sleeping until the next retry is due or it is woken by :meth:`wake`."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.token = secrets.token_hex(8)
        self.mine: set[int] = set()  # rows this process put in the outbox, not finished yet
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.errors: list[str] = []
        self.thread = threading.Thread(target=self._run, name="gpufleet-webhooks", daemon=True)
        self.thread.start()

    def wake(self, rid: int | None = None) -> None:
        if rid is not None:
            with self._lock:
                self.mine.add(rid)
        self._wake.set()

    def _next_due_s(self) -> float:
        with self.fleet.db.session() as s:
            nxt = s.scalar(
                select(WebhookDelivery.next_at)
                .where(WebhookDelivery.delivered.is_(False), WebhookDelivery.next_at.is_not(None))
                .order_by(WebhookDelivery.next_at)
                .limit(1)
            )
        if nxt is None:
            return 60.0
        return min(60.0, max(0.05, (nxt - utcnow()).total_seconds()))

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            wait = 1.0
            try:
                while ids := _claim(self.fleet, self.token):
                    for rid in ids:
                        if _attempt(self.fleet, rid, self.token):
                            with self._lock:
                                self.mine.discard(rid)
                        if self._stop.is_set():
                            return
                wait = self._next_due_s()
            except Exception as exc:  # a store hiccup: keep the thread, try again later
                self.errors.append(f"{type(exc).__name__}: {exc}")
                del self.errors[:-20]
            self._wake.wait(wait)

    def flush(self, timeout_s: float) -> bool:
        """Wait until every row this process enqueued is finished; False on timeout."""
        end = time.monotonic() + timeout_s
        while True:
            with self._lock:
                mine = set(self.mine)
            if not mine or not pending(self.fleet, mine):
                with self._lock:
                    self.mine -= mine
                return True
            if time.monotonic() >= end:
                return False
            self._wake.set()
            time.sleep(0.05)

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        self.thread.join(timeout_s)


_OUTBOXES: dict[int, Outbox] = {}
_OUTBOX_LOCK = threading.Lock()


def outbox(fleet: Fleet) -> Outbox:
    """This process's sender for ``fleet`` (started on first use)."""
    with _OUTBOX_LOCK:
        box = _OUTBOXES.get(id(fleet))
        if box is None or box.fleet is not fleet or not box.thread.is_alive():
            if not _OUTBOXES:
                atexit.register(_at_exit)
            box = _OUTBOXES[id(fleet)] = Outbox(fleet)
        return box


def stop(fleet: Fleet) -> None:
    """Stop this process's sender for ``fleet`` (what it has not sent stays in the outbox)."""
    with _OUTBOX_LOCK:
        box = _OUTBOXES.pop(id(fleet), None)
    if box is not None:
        box.stop()


def _retry_budget_s(fleet: Fleet) -> float:
    st = fleet.settings
    n = st.webhook_retries + 1
    backoff = _BACKOFF_S * float(2**st.webhook_retries)
    return float(n * st.webhook_timeout_s + backoff + 1.0)


def _at_exit() -> None:
    """At exit, wait for this process's own notifications (bounded by their retries)."""
    for key, box in list(_OUTBOXES.items()):
        # the store may be gone at exit: the rows stay in the outbox
        with contextlib.suppress(Exception):
            box.flush(_retry_budget_s(box.fleet))
        box.stop(1.0)
        _OUTBOXES.pop(key, None)


def notify(fleet: Fleet, kind: str, host: str | None, data: dict[str, Any]) -> str | None:
    """Queue a notification, never raising: returns a problem in words, or None (queued, or
    no webhook configured). Delivery happens in the background (see the module doc)."""
    try:
        enqueue(fleet, kind, host, data)
    except Exception as exc:  # a broken store must never break the caller
        return f"webhook {kind}: {type(exc).__name__}: {exc}"
    return None


_PENDING = "gpufleet_webhooks"


def after_commit(
    s: Session, fleet: Fleet, kind: str, host: str | None, data: dict[str, Any]
) -> None:
    """Deliver a notification once the caller's transaction commits (never inside it; a
    rolled-back transaction sends nothing). A no-op when no webhook is configured."""
    if not fleet.settings.webhook_url:
        return
    pending: list[tuple[str, str | None, dict[str, Any]]] | None = s.info.get(_PENDING)
    if pending is None:
        pending = s.info[_PENDING] = []

        def send(session: Session) -> None:
            todo = session.info.pop(_PENDING, [])
            for k, h, d in todo:
                notify(fleet, k, h, d)

        def drop(session: Session) -> None:
            session.info.pop(_PENDING, None)

        sa_event.listen(s, "after_commit", send, once=True)
        sa_event.listen(s, "after_rollback", drop, once=True)
    pending.append((kind, host, data))


def install(fleet: Fleet) -> Callable[[], None]:
    """Deliver every lease event (granted, reserved, started, renewed, released, expired)
    through the lease hook point; returns the function that removes the hook."""
    from gpufleet.service.leases import register_lease_hook

    def lease_hook(kind: EventKind, lease: dict[str, Any]) -> None:
        problem = notify(fleet, kind.value, None, lease)
        if problem:
            raise RuntimeError(problem)  # reported in the lease result's warnings

    return register_lease_hook(lease_hook)
