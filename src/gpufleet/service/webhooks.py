"""Notifications: a JSON POST to ``GPUFLEET_WEBHOOK_URL`` for alarms opening and closing,
remediation and lease events, beside the audit log.

Each body is signed with ``GPUFLEET_WEBHOOK_SECRET``: header ``X-Gpufleet-Signature:
sha256=<hex HMAC-SHA256 of the body>`` (:func:`sign`; a receiver checks it with
:func:`verify`). A failed delivery (connection error, timeout, HTTP status >= 300) is retried
with exponential backoff (``GPUFLEET_WEBHOOK_RETRIES``), and every delivery is recorded in
``webhook_deliveries`` with its attempts and last error. Callers call :func:`notify` after their
transaction committed; it never raises (a notification must not undo or break the change) and
never prints or stores the secret.

:func:`install` registers :func:`notify` as the lease hook (``service/leases.py``), so lease
expiry and the other lease events are delivered here too.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlalchemy import event as sa_event
from sqlalchemy.orm import Session

from gpufleet.domain.events import EventKind
from gpufleet.service.fleet import Fleet
from gpufleet.store.tables import WebhookDelivery

SIGNATURE_HEADER = "X-Gpufleet-Signature"
_BACKOFF_S = 0.5


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


def deliver(
    fleet: Fleet,
    kind: str,
    host: str | None,
    data: dict[str, Any],
    *,
    sleep: Callable[[float], None] = time.sleep,
) -> WebhookDelivery | None:
    """Send one notification now (retrying) and record it; None when no webhook is set."""
    settings = fleet.settings
    url = settings.webhook_url
    if not url:
        return None
    payload = {"kind": kind, "host": host, "at": fleet.now().isoformat(), "data": data}
    body = json.dumps(payload, default=_json, sort_keys=True).encode()
    headers = {"Content-Type": "application/json", "User-Agent": "gpufleet"}
    if settings.webhook_secret is not None:
        headers[SIGNATURE_HEADER] = sign(settings.webhook_secret.get_secret_value().encode(), body)
    attempts = 0
    status: int | None = None
    error: str | None = None
    delivered = False
    for attempt in range(settings.webhook_retries + 1):
        attempts += 1
        try:
            status = _post(url, body, headers, settings.webhook_timeout_s)
            delivered = status < 300
            error = None if delivered else f"HTTP {status}"
        except urllib.error.HTTPError as exc:
            status, error = exc.code, f"HTTP {exc.code}"
        except (OSError, ValueError) as exc:  # refused, timeout, bad URL
            status, error = None, f"{type(exc).__name__}: {exc}"
        if delivered:
            break
        if attempt < settings.webhook_retries:
            sleep(_BACKOFF_S * 2**attempt)
    row = WebhookDelivery(
        at=fleet.now(),
        kind=kind,
        host_name=host,
        payload=json.loads(body),
        attempts=attempts,
        delivered=delivered,
        status=status,
        error=error,
    )
    with fleet.db.session() as s:
        s.add(row)
        s.flush()
        s.expunge(row)
    return row


def notify(fleet: Fleet, kind: str, host: str | None, data: dict[str, Any]) -> str | None:
    """Deliver, never raising: returns a problem in words (also recorded), or None."""
    try:
        row = deliver(fleet, kind, host, data)
    except Exception as exc:  # a broken store or webhook must never break the caller
        return f"webhook {kind}: {type(exc).__name__}: {exc}"
    if row is not None and not row.delivered:
        return f"webhook {kind} not delivered after {row.attempts} attempt(s): {row.error}"
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
