"""``sacct --json`` -> failed jobs, one record per job and node (pure: text in, records out).

Both shapes of Slurm's JSON are read: 22.05 (data parser v0.0.38: ``time.start`` an integer,
``state.current`` a string, ``exit_code`` ``{"status", "return_code": int}``) and 23.02+
(numbers as ``{"set", "infinite", "number"}``, ``state.current`` a list, ``exit_code.status``
a list). Slurm 22.05's JSON reports every exit code as ``SUCCESS 0`` (see the captures'
PROVENANCE), so a job is failed by its **state** (:data:`FAILED_STATES`); the exit code is
added to the message when Slurm reports one. A job that never ran on a node (``None
assigned``) cannot be put on a host and is left out, named in ``problems``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from gpufleet.errors import ParseError

#: Job states that are a failure of the job (CANCELLED is someone's decision, not a failure).
FAILED_STATES = frozenset(
    {"FAILED", "NODE_FAIL", "TIMEOUT", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}
)
_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


@dataclass(frozen=True)
class SlurmFailure:
    """One failed job on one of its nodes."""

    job: str
    host: str
    time: datetime  # the job's end (its start when it has no end)
    message: str
    state: str
    exit_code: int | None
    reason: str | None
    start: datetime | None
    end: datetime | None
    nodes: str

    def as_row(self) -> dict[str, Any]:
        """The fields a failure record takes: job, host, gpu, time, message."""
        return {"job": self.job, "host": self.host, "gpu": None, "time": self.time,
                "message": self.message}


@dataclass
class SacctResult:
    """The failures found and the jobs that could not be read (``job N: why``)."""

    failures: list[SlurmFailure] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    jobs: int = 0


def expand_hostlist(text: str) -> list[str]:
    """Slurm's hostlist syntax: ``gpu-[01-03,07],login1`` -> ``gpu-01 gpu-02 gpu-03 gpu-07
    login1`` (zero padding kept; one bracket group per name). ValueError when malformed."""
    out: list[str] = []
    depth, start = 0, 0
    items: list[str] = []
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ']' in {text!r}")
        elif ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError(f"unbalanced '[' in {text!r}")
    items.append(text[start:])
    for item in (i.strip() for i in items):
        if not item:
            continue
        m = re.fullmatch(r"([^\[\]]*)\[([^\[\]]+)\]([^\[\]]*)", item)
        if not m:
            if "[" in item or "]" in item:
                raise ValueError(f"cannot expand {item!r}")
            out.append(item)
            continue
        head, ranges, tail = m.groups()
        for part in ranges.split(","):
            r = _RANGE.match(part.strip())
            if not r:
                raise ValueError(f"bad range {part!r} in {item!r}")
            lo, hi = r.group(1), r.group(2) or r.group(1)
            if int(hi) < int(lo) or int(hi) - int(lo) > 100_000:
                raise ValueError(f"bad range {part!r} in {item!r}")
            width = len(lo) if lo.startswith("0") else 0
            out.extend(f"{head}{n:0{width}d}{tail}" for n in range(int(lo), int(hi) + 1))
    return out


def _number(value: Any) -> int | None:
    """An integer from 22.05 (``5``) or 23.02+ (``{"set": true, "number": 5}``); None unset."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    raise ValueError(f"not a number: {value!r}")


def _time(value: Any) -> datetime | None:
    n = _number(value)
    if not n:
        return None  # 0: not started / not ended
    try:
        return datetime.fromtimestamp(n, UTC)
    except (OverflowError, OSError, ValueError):
        raise ValueError(f"time {str(n)[:24]} is out of range") from None


def _state(job: dict[str, Any]) -> tuple[str, str | None]:
    state = job.get("state")
    if not isinstance(state, dict):
        raise ValueError("no state")
    current = state.get("current")
    if isinstance(current, list):
        current = current[0] if current else None
    if not isinstance(current, str) or not current:
        raise ValueError("no state.current")
    reason = state.get("reason")
    reason = reason if isinstance(reason, str) and reason not in ("", "None") else None
    return current.upper(), reason


def _exit_code(job: dict[str, Any]) -> int | None:
    ec = job.get("exit_code")
    if not isinstance(ec, dict):
        return None
    code = _number(ec.get("return_code"))
    return code if code else None  # 0 is what 22.05 reports for every job


def _nodes(job: dict[str, Any]) -> str:
    nodes = job.get("nodes")
    if isinstance(nodes, str):
        return nodes.strip()
    raise ValueError("no nodes")


def _failure_lines(job_id: str, job: dict[str, Any]) -> list[SlurmFailure]:
    state, reason = _state(job)
    if state not in FAILED_STATES:
        return []
    nodes = _nodes(job)
    if not nodes or nodes.lower() == "none assigned":
        raise ValueError(f"{state} but ran on no node")
    hosts = expand_hostlist(nodes)
    times: dict[str, Any] = job["time"] if isinstance(job.get("time"), dict) else {}
    start, end = _time(times.get("start")), _time(times.get("end"))
    at = end or start
    if at is None:
        raise ValueError(f"{state} with neither a start nor an end time")
    code = _exit_code(job)
    name = job.get("name")
    message = f"slurm job {job_id}" + (f" ({name})" if isinstance(name, str) and name else "")
    message += f" {state}"
    if code is not None:
        message += f", exit code {code}"
    if reason:
        message += f", reason {reason}"
    message += f" on {nodes}"
    return [
        SlurmFailure(job_id, host, at, message, state, code, reason, start, end, nodes)
        for host in hosts
    ]


#: sacct's answer to a window without jobs (``slurmdb_jobs_get``: "Nothing found with query").
NOTHING_FOUND = 9003


def _nothing_found(error: Any) -> bool:
    """The one "error" that is an answer: no job in the window (error 9003)."""
    return isinstance(error, dict) and (
        error.get("error_number") == NOTHING_FOUND or error.get("description") == "Nothing found"
    )


def parse_sacct_json(text: str, source: str = "sacct --json") -> SacctResult:
    """Failed jobs in ``sacct --json`` output; ParseError when it is not sacct's JSON at all
    or sacct reports an error, a job that cannot be read is named in ``problems`` and spoils
    no other job. "Nothing found" (error 9003, an empty ``jobs`` list: a window without jobs)
    is zero jobs, not an error."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        msg = f"not JSON: {exc.msg}"
        raise ParseError(source, msg, line=exc.lineno, column=exc.colno) from None
    except (ValueError, RecursionError) as exc:  # a 5000-digit number, nesting past the stack
        raise ParseError(source, f"not JSON that can be read: {str(exc)[:80]}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list):
        raise ParseError(source, "no 'jobs' list: not sacct --json output")
    errors = doc.get("errors")
    if not isinstance(errors, list | None):
        raise ParseError(source, f"'errors' is not a list: {errors!r}")
    real = [e for e in errors or [] if not _nothing_found(e)]
    if real:
        raise ParseError(source, f"sacct reported errors: {real}")
    result = SacctResult()
    for n, job in enumerate(doc["jobs"]):
        result.jobs += 1
        if not isinstance(job, dict):
            result.problems.append(f"job #{n}: not an object")
            continue
        job_id = str(job.get("job_id", "")).strip()
        if not job_id:
            result.problems.append(f"job #{n}: no job_id")
            continue
        try:
            result.failures.extend(_failure_lines(job_id, job))
        except ValueError as exc:
            result.problems.append(f"job {job_id}: {exc}")
    return result
