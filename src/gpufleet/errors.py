"""The gpufleet error tree, sorted by what the caller should do.

GpufleetError                 base; ``exit_code`` for the CLI, ``http_status`` for the API
├── ParseError                tool output we cannot read (names source and position)
├── InventoryError            a malformed inventory file (names file and line)
├── NotFound                  an unknown host, baseline, pool ...
├── InvalidTransition         a lifecycle event refused in the host's current state
└── ConfigError               bad user configuration (profiles, Xid policy ...)
"""

from __future__ import annotations


class GpufleetError(Exception):
    """Base class; carries the CLI exit code and HTTP status for the one error boundary."""

    exit_code = 1
    http_status = 500
    #: Stable machine-readable name of the error class (the ``code`` of the JSON error shape).
    code = "error"
    #: True when the same call may succeed later unchanged (a lock, a busy database).
    retryable = False


class ParseError(GpufleetError):
    """Output of a tool could not be parsed; never yields a half-filled record."""

    exit_code = 3
    http_status = 422

    def __init__(
        self,
        source: str,
        message: str,
        *,
        line: int | None = None,
        column: int | None = None,
        host: str | None = None,
    ) -> None:
        self.source = source
        self.message = message
        self.line = line
        self.column = column
        self.host = host
        super().__init__(str(self))

    def __str__(self) -> str:
        where = self.source
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        prefix = f"{self.host}: " if self.host else ""
        return f"{prefix}{where}: {self.message}"


class InventoryError(GpufleetError):
    """A malformed inventory file; the message names file and line."""

    exit_code = 2
    http_status = 422

    def __init__(self, path: str, line: int | None, message: str) -> None:
        self.path = path
        self.line = line
        self.message = message
        super().__init__(f"{path}:{line}: {message}" if line else f"{path}: {message}")


class NotFound(GpufleetError):
    """An unknown host, baseline, pool or other named object."""

    exit_code = 4
    http_status = 404


class ConfigError(GpufleetError):
    """Bad user configuration (profiles, Xid policy, baselines)."""

    exit_code = 2
    http_status = 422


class InvalidTransition(GpufleetError):
    """A lifecycle event that the host's current state does not allow."""

    exit_code = 5
    http_status = 409

    def __init__(self, host: str, state: str, event: str, allowed: list[str] | None = None) -> None:
        self.host = host
        self.state = state
        self.event = event
        self.allowed = allowed or []
        hint = f" (allowed: {', '.join(self.allowed)})" if self.allowed else ""
        super().__init__(f"host {host}: event '{event}' is not allowed in state '{state}'{hint}")


class StoreError(GpufleetError):
    """The database cannot be used: unreachable, wrong URL, corrupt, foreign or newer schema,
    read-only, disk full. Infrastructure, not input: the operator fixes the setup."""

    exit_code = 2
    http_status = 503
    code = "store"


class Conflict(GpufleetError):
    """Someone else changed the object between our read and our write (compare-and-set lost)
    or holds it; the same call may succeed when retried."""

    exit_code = 6
    http_status = 409
    code = "conflict"
    retryable = True
