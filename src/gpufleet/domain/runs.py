"""Runs of background work (collect, validate, inspect, evidence, remediate) started from the
API or a schedule.

A run is split into chunks of hosts; each chunk is one job on the job queue (procrastinate on
PostgreSQL, in-process on SQLite), so several workers share one run and a killed worker's
chunk is retried by another. These are the persisted values of ``job_runs`` / ``job_chunks``.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TypeVar

T = TypeVar("T")


class RunKind(StrEnum):
    """What a run does to each of its hosts."""

    COLLECT = "collect"
    VALIDATE = "validate"
    INSPECT = "inspect"  # one inspection sweep (``gpufleet inspect``), chunk by chunk
    EVIDENCE = "evidence"  # an active test (``gpufleet evidence run``), chunk by chunk
    REMEDIATE = "remediate"  # one rung of the remediation ladder on one host (one chunk)

    @property
    def collects(self) -> bool:
        """Whether the run stores a collection result per host (``collection_runs``); the
        others record one ``job_run_hosts`` row per host."""
        return self in (RunKind.COLLECT, RunKind.VALIDATE)


class RunState(StrEnum):
    """Where a run (or one of its chunks) stands."""

    QUEUED = "queued"  # waiting for a worker
    RUNNING = "running"  # at least one chunk started, not all finished
    SUCCEEDED = "succeeded"  # every chunk finished (hosts may still have failed: see counts)
    FAILED = "failed"  # a chunk gave up (its error says why)

    @property
    def finished(self) -> bool:
        return self in (RunState.SUCCEEDED, RunState.FAILED)


def chunked(items: list[T], size: int) -> list[list[T]]:
    """``items`` in consecutive chunks of at most ``size`` (at least one per chunk)."""
    size = max(1, size)
    return [items[i : i + size] for i in range(0, len(items), size)]


def claim_prefix(run_id: int, chunk: int) -> str:
    """The claim-token prefix every attempt of one chunk uses: a retried attempt takes over
    the hosts an earlier (killed) attempt of the same chunk still holds, nobody else's."""
    return f"run{run_id}-{chunk}-"


def claim_token(run_id: int, chunk: int, attempt: int) -> str:
    """The claim token of one attempt (fits ``hosts.claim_token``, 36 characters)."""
    token = f"{claim_prefix(run_id, chunk)}{attempt}"
    if len(token) > 36:
        raise ValueError(f"claim token {token!r} is longer than 36 characters")
    return token
