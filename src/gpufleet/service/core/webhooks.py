"""Notifications: a JSON POST to ``GPUFLEET_WEBHOOK_URL`` for alarms opening and closing,
remediation and lease events, beside the audit log.

Each body is signed with ``GPUFLEET_WEBHOOK_SECRET``: header ``X-Gpufleet-Signature:
sha256=<hex HMAC-SHA256 of the body>`` (:func:`sign`; a receiver checks it with
:func:`verify`).

A transactional outbox (issue 24, item 10): :func:`enqueue` writes the notification as a row
of ``webhook_deliveries`` in the caller's own transaction, beside the alarm, remediation or
lease change that causes it; both commit together or neither does, so a process killed
right after its commit loses nothing (the next gpufleet process sends the row). Once the
transaction commits the process's sender, a daemon thread (:class:`Outbox`), is woken and
POSTs it; no request is ever made inside a transaction and no caller waits for the receiver.
A failed attempt (connection error, timeout, HTTP status >= 300) is logged, counted
(``gpufleet_background_errors_total{component="webhook-outbox"}``) and retried with
exponential backoff (0.5 s, 1 s, 2 s ... at most :data:`MAX_BACKOFF_S` apart) until it is
delivered or older than ``GPUFLEET_WEBHOOK_MAX_AGE_H``: then it is dead-lettered (kept,
``next_at`` empty, not delivered; ``gpufleet alarms``, ``GET /api/v1/webhooks/dead-letters``
and ``gpufleet_webhook_dead_letters`` show it). A sender claims a row (``claim``,
``claimed_until``: the request timeout and a margin) before it POSTs, outside any
transaction, so two senders (two gpufleet processes on one database) never send one
notification at the same time, and a delivered row is never sent again. A row whose sender
died is taken over when its claim runs out. Every request carries ``X-Gpufleet-Delivery:
<row id>``, the same on each retry of one notification: a request that timed out on our side
but reached the receiver is retried (at least once), and the receiver drops the repeat by
that id. At exit a process waits for its own notifications at most as long as their first
``GPUFLEET_WEBHOOK_RETRIES`` retries take; what is left is sent by the next gpufleet process
(:func:`resume` starts the sender of a process that opens the fleet while rows wait).
"""

from __future__ import annotations

import atexit
import hashlib
import hmac
import json
import logging
import secrets
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, func, or_, select, update
from sqlalchemy import event as sa_event
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.orm import Session

from gpufleet.service.core import background_errors as background
from gpufleet.service.core.fleet import Fleet, utcnow
from gpufleet.store.tables import WebhookDelivery

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Gpufleet-Signature"
DELIVERY_HEADER = "X-Gpufleet-Delivery"
_BACKOFF_S = 0.5
#: The longest wait between two attempts of one notification.
MAX_BACKOFF_S = 600.0
#: Rows one sender claims at a time.
_BATCH = 20


def _schedule_now() -> datetime:
    """The sender's timer (``next_at``, ``claimed_until``, when a retry is due): wall-clock
    UTC, like a timeout, so a retry comes after real seconds whatever the fleet's clock says
    (a test's hand-moved clock, too). What a row records (``at``, ``delivered_at``, its age
    for the dead letter) reads the fleet's clock, ``fleet.now()``."""
    return utcnow()


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


def backoff_s(attempts: int) -> float:
    """The wait after the ``attempts``-th failed attempt (0.5 s doubling, capped)."""
    return min(MAX_BACKOFF_S, _BACKOFF_S * 2.0 ** min(max(attempts - 1, 0), 30))


_PENDING = "gpufleet_webhooks"


def enqueue(
    s: Session, fleet: Fleet, kind: str, host: str | None, data: dict[str, Any]
) -> WebhookDelivery | None:
    """Write one notification to the outbox in the caller's transaction ``s`` (due at once);
    None when no webhook is configured. The sender is woken when ``s`` commits; a rolled-back
    transaction sends nothing. Nothing is swallowed: a row that cannot be written fails the
    transaction that causes it (a change is never committed without its notification)."""
    if not fleet.settings.webhook_url:
        return None
    row = WebhookDelivery(
        at=fleet.now(),
        kind=kind,
        host_name=host,
        payload=_body(fleet, kind, host, data),
        attempts=0,
        delivered=False,
        next_at=_schedule_now(),
    )
    s.add(row)
    rows: list[WebhookDelivery] | None = s.info.get(_PENDING)
    if rows is None:
        rows = s.info[_PENDING] = []

        def wake(session: Session) -> None:
            done = session.info.pop(_PENDING, [])
            ids = [sa_inspect(r).identity for r in done]
            try:
                box = outbox(fleet)
                for key in ids:
                    box.wake(int(key[0]) if key else None)
            except Exception as exc:  # the rows are committed: the next sender sends them
                background.report(log, background.WEBHOOK_OUTBOX, "cannot wake the sender", exc)

        def drop(session: Session) -> None:
            session.info.pop(_PENDING, None)

        sa_event.listen(s, "after_commit", wake, once=True)
        sa_event.listen(s, "after_rollback", drop, once=True)
    rows.append(row)
    return row


def notify(fleet: Fleet, kind: str, host: str | None, data: dict[str, Any]) -> str | None:
    """Queue a notification in a transaction of its own, for callers without one; never
    raises: a failure is logged and counted, and returned in words (None: queued, or no
    webhook configured)."""
    try:
        with fleet.db.session() as s:
            enqueue(s, fleet, kind, host, data)
    except Exception as exc:
        background.report(log, background.WEBHOOK_OUTBOX, f"cannot queue webhook {kind}", exc)
        return f"webhook {kind}: {type(exc).__name__}: {exc}"
    return None


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
    now = _schedule_now()
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


def _send(fleet: Fleet, rid: int, payload: dict[str, Any]) -> tuple[bool, int | None, str | None]:
    """One POST (no transaction open): (delivered, HTTP status, error)."""
    settings = fleet.settings
    url = settings.webhook_url
    if not url:
        return False, None, "no webhook URL configured (GPUFLEET_WEBHOOK_URL)"
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
    except urllib.error.HTTPError as exc:
        return False, exc.code, f"HTTP {exc.code}"
    except (OSError, ValueError) as exc:  # refused, timeout, bad URL
        return False, None, f"{type(exc).__name__}: {exc}"
    return status < 300, status, None if status < 300 else f"HTTP {status}"


def _attempt(fleet: Fleet, rid: int, token: str) -> bool:
    """One POST of a claimed row and its record; True when the row is finished (delivered,
    or dead-lettered: older than ``GPUFLEET_WEBHOOK_MAX_AGE_H`` after a failed attempt)."""
    with fleet.db.session() as s:
        row = s.get(WebhookDelivery, rid)
        if row is None or row.claim != token or row.delivered:
            return True
        payload, attempts, born, kind = row.payload, row.attempts, row.at, row.kind
    delivered, status, error = _send(fleet, rid, payload)
    attempts += 1
    now = _schedule_now()
    max_age = timedelta(hours=fleet.settings.webhook_max_age_h)
    dead = not delivered and (fleet.now() - born >= max_age or not fleet.settings.webhook_url)
    if not delivered:
        what = "dead-lettered" if dead else f"retried in {backoff_s(attempts):g} s"
        background.report(
            log,
            background.WEBHOOK_OUTBOX,
            f"webhook delivery {rid} ({kind}) failed, attempt {attempts}: {error}; {what}",
            delivery=rid,
        )
    values: dict[str, Any] = {
        "attempts": attempts,
        "delivered": delivered,
        "status": status,
        "error": error,
        "claim": None,
        "claimed_until": None,
        "next_at": None if delivered or dead else now + timedelta(seconds=backoff_s(attempts)),
        "delivered_at": fleet.now() if delivered else None,
    }
    with fleet.db.session() as s:
        s.execute(
            update(WebhookDelivery)
            .where(WebhookDelivery.id == rid, WebhookDelivery.claim == token)
            .values(**values)
            .execution_options(synchronize_session=False)
        )
    return delivered or dead


def _owed(fleet: Fleet, token: str | None) -> Any:
    """What a process still owes a row before it exits: its first ``GPUFLEET_WEBHOOK_RETRIES``
    retries, or one attempt now when it is due (an older row), or the attempt in flight."""
    return or_(
        WebhookDelivery.attempts <= fleet.settings.webhook_retries,
        WebhookDelivery.next_at <= _schedule_now(),
        WebhookDelivery.claim == (token or ""),
    )


def pending(
    fleet: Fleet, ids: set[int] | None = None, *, owed_by: str | None = None, quick: bool = False
) -> int:
    """Rows not finished yet (due or waiting for a retry), of ``ids`` or all; ``quick``: only
    those the sender ``owed_by`` still owes an attempt before its process exits (:func:`_owed`)."""
    with fleet.db.session() as s:
        q = select(WebhookDelivery.id).where(
            WebhookDelivery.delivered.is_(False), WebhookDelivery.next_at.is_not(None)
        )
        if ids is not None:
            q = q.where(WebhookDelivery.id.in_(ids))
        if quick:
            q = q.where(_owed(fleet, owed_by))
        return len(list(s.scalars(q)))


class Outbox:
    """This process's sender for one fleet: a daemon thread that claims due rows and POSTs
    them, sleeping until the next retry is due or it is woken by :meth:`wake`."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.token = secrets.token_hex(8)
        self.mine: set[int] = set()  # rows this process waits for at exit
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
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
        return min(60.0, max(0.05, (nxt - _schedule_now()).total_seconds()))

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
                background.report(log, background.WEBHOOK_OUTBOX, "webhook sender failed", exc)
            self._wake.wait(wait)

    def flush(self, timeout_s: float) -> bool:
        """Wait until every row this process waits for is delivered, dead-lettered, or past
        its first ``GPUFLEET_WEBHOOK_RETRIES`` retries and not due; False on timeout."""
        end = time.monotonic() + timeout_s
        while True:
            with self._lock:
                mine = set(self.mine)
            if not mine or not pending(self.fleet, mine, owed_by=self.token, quick=True):
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


def resume(fleet: Fleet, *, always: bool = False) -> int:
    """Start this process's sender when rows wait in the outbox (a process that died between
    its commit and the delivery left them, or due for a later retry), or ``always``
    (long-running processes: serve, worker); at exit it waits for their quick retries, or one
    attempt of a due older row. Returns how many rows wait; never raises (a failure is logged
    and counted)."""
    if not fleet.settings.webhook_url:
        return 0
    try:
        with fleet.db.session() as s:
            ids = list(
                s.scalars(
                    select(WebhookDelivery.id).where(
                        WebhookDelivery.delivered.is_(False),
                        WebhookDelivery.next_at.is_not(None),
                        _owed(fleet, None),
                    )
                )
            )
        if ids or always:
            box = outbox(fleet)
            for rid in ids:
                box.wake(rid)
            box.wake()
    except Exception as exc:
        background.report(log, background.WEBHOOK_OUTBOX, "cannot resume the outbox", exc)
        return 0
    return len(ids)


def stop(fleet: Fleet) -> None:
    """Stop this process's sender for ``fleet`` (what it has not sent stays in the outbox)."""
    with _OUTBOX_LOCK:
        box = _OUTBOXES.pop(id(fleet), None)
    if box is not None:
        box.stop()


def _retry_budget_s(fleet: Fleet) -> float:
    st = fleet.settings
    n = st.webhook_retries + 1
    waits = sum(backoff_s(i) for i in range(1, n))
    return float(n * st.webhook_timeout_s + waits + 1.0)


def _at_exit() -> None:
    """At exit, wait for this process's own notifications (bounded by their quick retries)."""
    for key, box in list(_OUTBOXES.items()):
        try:
            box.flush(_retry_budget_s(box.fleet))
        except Exception as exc:  # the store may be gone at exit: the rows stay in the outbox
            background.report(log, background.WEBHOOK_OUTBOX, "cannot wait at exit", exc)
        box.stop(1.0)
        _OUTBOXES.pop(key, None)


# --- dead letters: notifications given up after GPUFLEET_WEBHOOK_MAX_AGE_H -----------------


@dataclass(frozen=True)
class DeadLetter:
    """A notification never delivered and no longer retried (``gpufleet alarms dead-letters``)."""

    id: int
    kind: str
    host: str | None
    at: datetime
    attempts: int
    status: int | None
    error: str | None


def _dead() -> Any:
    return and_(WebhookDelivery.delivered.is_(False), WebhookDelivery.next_at.is_(None))


def dead_letters(fleet: Fleet, limit: int = 100) -> list[DeadLetter]:
    """Dead-lettered notifications, newest first (at most ``limit``)."""
    with fleet.db.session() as s:
        rows = s.scalars(
            select(WebhookDelivery).where(_dead()).order_by(WebhookDelivery.id.desc()).limit(limit)
        )
        return [
            DeadLetter(r.id, r.kind, r.host_name, r.at, r.attempts, r.status, r.error)
            for r in rows
        ]


def dead_letter_count(fleet: Fleet) -> int:
    """How many notifications were dead-lettered."""
    with fleet.db.session() as s:
        return int(s.scalar(select(func.count(WebhookDelivery.id)).where(_dead())) or 0)
