"""Failures of background work (issue 24, item 10): one home for what used to be swallowed.

A thread or task that must keep going after a failure (the claim renewer of a run, the
webhook outbox's sender, the worker's periodic look for stalled jobs, a scheduled task)
calls :func:`report`: the failure goes to the caller's module logger (``logging.getLogger
(__name__)``) and to a per-process counter that ``/metrics`` exposes as
``gpufleet_background_errors_total{component}`` (``api/metrics.py``). Nothing is raised: the
caller decides whether to go on."""

from __future__ import annotations

import logging
import threading

from gpufleet.logs import ids as log_ids

#: The components that report (every one is on /metrics, at 0 until it fails).
CLAIM_RENEWAL = "claim-renewal"
WEBHOOK_OUTBOX = "webhook-outbox"
WORKER = "worker"
SCHEDULER = "scheduler"
COMPONENTS = (CLAIM_RENEWAL, WEBHOOK_OUTBOX, WORKER, SCHEDULER)

_lock = threading.Lock()
_counts: dict[str, int] = dict.fromkeys(COMPONENTS, 0)


def report(
    logger: logging.Logger,
    component: str,
    message: str,
    exc: BaseException | None = None,
    **ids: object,
) -> None:
    """Log ``message`` (and the exception's type and text) as a warning on ``logger``, with
    the ``component`` and the ``ids`` the caller has (``host=``, ``run=``, ``job=``: fields
    of the JSON log lines, :mod:`gpufleet.logs`), and count one failure of ``component``.
    Never raises."""
    with _lock:
        _counts[component] = _counts.get(component, 0) + 1
    detail = f": {_words(exc)}" if exc is not None else ""
    if exc is not None and exc.__cause__ is not None:  # "Database error." says little alone
        detail += f" (from {_words(exc.__cause__)})"
    try:
        extra = log_ids(component=component, **ids)
        logger.warning("%s: %s%s", component, message, detail, extra=extra)
    except Exception:  # a broken log handler must not stop the background work
        return


def _words(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}".rstrip(": ")


def counts() -> dict[str, int]:
    """Failures per component since this process started (every known component present)."""
    with _lock:
        return dict(_counts)
