"""The gpufleet error tree, sorted by what the caller should do.

Every error carries, as class attributes, what a caller needs to react without reading the
message: ``exit_code`` (CLI), ``http_status`` (API), ``code`` (a stable machine name) and
``retryable`` (True: the same call may succeed later unchanged; False: something must be fixed
first). Its message comes from the class's ``template``, filled from the error's fields
(``NotFound(what="host", name="gpu-01")`` -> ``unknown host 'gpu-01'``); a class whose
template is ``{detail}`` takes a free-text message (``ConfigError("profiles.yaml: ...")``).
:meth:`GpufleetError.as_json` is the one JSON shape every interface prints:
``{"error": {"code", "message", "retryable"}}``.

==============================  ====  ====  =====  =====================================
class                           exit  HTTP  retry  caller should
==============================  ====  ====  =====  =====================================
GpufleetError                   1     500   no     (base; not raised itself)
ParseError                      3     422   no     fix the tool / report the output
InventoryError                  2     422   no     fix the inventory file at file:line
ConfigError                     2     422   no     fix the setting / configuration file
StoreError                      2     503   no     fix the database (URL, schema, disk)
StoreUnavailable(StoreError)    2     503   yes    wait for the database, retry
ServerUnavailable               2     503   yes    wait for the GPUFLEET_URL server, retry
LocalIOError                    2     500   no     fix the local file / directory / disk
Unauthorized                    2     401   no     authenticate (API)
Forbidden                       2     403   no     ask for the permission (API)
NotFound                        4     404   no     check the name / selector
InvalidTransition               5     409   no     bring the host to a state that allows it
IdentityMismatch(InvalidTr.)    5     409   no     fix the BMC's identity, or override
Conflict                        6     409   yes    retry (someone else changed / holds it)
==============================  ====  ====  =====  =====================================
"""

from __future__ import annotations

from typing import Any, ClassVar

from gpufleet.i18n import N_

_RESERVED = frozenset({"exit_code", "http_status", "code", "retryable", "template", "detail"})


class _Fields(dict[str, Any]):
    """Template lookup: the error's attributes and properties, by name."""

    def __init__(self, exc: GpufleetError) -> None:
        super().__init__()
        self.exc = exc

    def __missing__(self, key: str) -> Any:
        value = getattr(self.exc, key)
        return "" if value is None else value


class GpufleetError(Exception):
    """Base class; carries the CLI exit code and HTTP status for the one error boundary."""

    exit_code: ClassVar[int] = 1
    http_status: ClassVar[int] = 500
    #: Stable machine-readable name of the error class (the ``code`` of the JSON error shape).
    code: ClassVar[str] = "error"
    #: True when the same call may succeed later unchanged (a lock, a busy database).
    retryable: ClassVar[bool] = False
    #: The message, ``str.format``-ed with the error's fields and properties.
    template: ClassVar[str] = "{detail}"

    def __init__(self, detail: str | None = None, /, **fields: Any) -> None:
        bad = _RESERVED & fields.keys()
        if bad:
            raise TypeError(f"{type(self).__name__}: reserved field name(s) {sorted(bad)}")
        self.detail = detail
        for key, value in fields.items():
            setattr(self, key, value)
        super().__init__(str(self))

    def __str__(self) -> str:
        """The message: ``detail`` as given, else the class template filled in."""
        if self.detail is not None and "{detail}" not in self.template:
            return self.detail
        return self.template.format_map(_Fields(self))

    def formatted(self, template: str) -> str:
        """The message with ``template`` (a translation of :attr:`template`) filled in, or
        ``detail`` as given: what the CLI prints; JSON and logs keep :meth:`__str__`."""
        if self.detail is not None and "{detail}" not in self.template:
            return self.detail
        return template.format_map(_Fields(self))

    def as_json(self) -> dict[str, dict[str, Any]]:
        """The one JSON shape of an error: ``{"error": {"code", "message", "retryable"}}``."""
        return {"error": {"code": self.code, "message": str(self), "retryable": self.retryable}}


class ParseError(GpufleetError):
    """Output of a tool could not be parsed; never yields a half-filled record."""

    exit_code = 3
    http_status = 422
    code = "parse"
    template = "{prefix}{where}: {message}"
    source: str
    message: str
    line: int | None
    column: int | None
    host: str | None

    def __init__(
        self,
        source: str,
        message: str,
        *,
        line: int | None = None,
        column: int | None = None,
        host: str | None = None,
    ) -> None:
        super().__init__(source=source, message=message, line=line, column=column, host=host)

    # the host can be set after construction (collect adds it); the message follows
    @property
    def prefix(self) -> str:
        return f"{self.host}: " if self.host else ""

    @property
    def where(self) -> str:
        where: str = self.source
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        return where


class InventoryError(GpufleetError):
    """A malformed inventory file; the message names file and line."""

    exit_code = 2
    http_status = 422
    code = "inventory"
    template = "{where}: {message}"
    path: str
    line: int | None
    message: str

    def __init__(self, path: str, line: int | None, message: str) -> None:
        super().__init__(path=path, line=line, message=message)

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}" if self.line else str(self.path)


class NotFound(GpufleetError):
    """An unknown host, baseline, pool or other named object.

    ``NotFound(what="host", name="gpu-01")``, or a free-text message."""

    exit_code = 4
    http_status = 404
    code = "not_found"
    template = N_("unknown {what} '{name}'")


class ConfigError(GpufleetError):
    """Bad user configuration (settings, profiles, Xid policy, baselines).

    ``ConfigError(setting="GPUFLEET_FORKS", cause="must be >= 1")``, or a free-text message."""

    exit_code = 2
    http_status = 422
    code = "config"
    template = "{setting}: {cause}"


class KubeApiError(ConfigError):
    """An HTTP error answer of the Kubernetes API (``status``: its code, ``body``: its text).
    ``KubeApiError(setting="k8s", cause=..., status=429, body=...)``, or free text."""

    code = "kube_api"
    status: int = 0
    body: str = ""


class UsageError(GpufleetError):
    """A command line that does not parse: unknown option, bad value for a flag, missing
    argument. ``UsageError(command="gpufleet collect", cause="...")``."""

    exit_code = 2
    http_status = 400
    code = "usage"
    template = N_("{command}: {cause} (see '{command} --help')")


class InvalidTransition(GpufleetError):
    """A lifecycle event that the host's current state does not allow."""

    exit_code = 5
    http_status = 409
    code = "invalid_transition"
    template = N_("host {host}: event '{event}' is not allowed in state '{state}'{hint}")
    host: str
    state: str
    event: str
    allowed: list[str]

    def __init__(self, host: str, state: str, event: str, allowed: list[str] | None = None) -> None:
        super().__init__(host=host, state=state, event=event, allowed=allowed or [])

    @property
    def hint(self) -> str:
        return f" (allowed: {', '.join(self.allowed)})" if self.allowed else ""


class IdentityMismatch(InvalidTransition):
    """An action through a host's BMC (power, boot override, reimage, remediation) refused
    while the host has an open ``bmc-identity`` alarm: the BMC at that address may drive
    another machine. ``--override-identity --reason TEXT`` (operator, recorded) lets it."""

    code = "bmc_identity"
    template = N_(
        "host {host}: {action} through its BMC refused: open bmc-identity alarm ({alarm}); "
        "the BMC may be another machine's: fix the cabling or inventory, or pass "
        "--override-identity --reason TEXT"
    )
    action: str
    alarm: str

    def __init__(self, host: str, action: str, alarm: str) -> None:
        GpufleetError.__init__(
            self, host=host, action=action, alarm=alarm, state="", event=action, allowed=[]
        )


class StoreError(GpufleetError):
    """The database cannot be used: wrong URL, corrupt, foreign or newer schema, read-only,
    disk full, a half-done migration. Infrastructure, not input: the operator fixes the setup.

    ``StoreError(url="sqlite:///x.db", cause="file is not a database")``, or free text."""

    exit_code = 2
    http_status = 503
    code = "store"
    template = N_("database {url}: {cause}")


class StoreUnavailable(StoreError):
    """The database is unreachable or busy right now (connection refused, locked); the same
    call may succeed later unchanged."""

    code = "store_unavailable"
    retryable = True


class ServerUnavailable(GpufleetError):
    """Remote mode: the gpufleet server at ``GPUFLEET_URL`` cannot be reached right now
    (connection refused, timeout, a proxy's 502/503/504); the same call may succeed later.

    ``ServerUnavailable(url="https://fleet:8080", cause="connection refused")``."""

    exit_code = 2
    http_status = 503
    code = "server_unavailable"
    retryable = True
    template = N_("gpufleet server {url}: {cause}")


class LocalIOError(GpufleetError):
    """A local file or directory cannot be read or written (permissions, disk full).

    ``LocalIOError(path="/var/lib/gpufleet", cause="Permission denied")``."""

    exit_code = 2
    http_status = 500
    code = "io"
    template = "{path}: {cause}"


class Unauthorized(GpufleetError):
    """The caller is not authenticated (no or an invalid credential)."""

    exit_code = 2
    http_status = 401
    code = "unauthorized"
    template = N_("not authenticated: {reason}")


class Forbidden(GpufleetError):
    """The caller is authenticated but may not do this."""

    exit_code = 2
    http_status = 403
    code = "forbidden"
    template = N_("{actor} may not {action}")


class Conflict(GpufleetError):
    """Someone else changed the object between our read and our write (compare-and-set lost)
    or holds it; the same call may succeed when retried.

    ``Conflict(what="host gpu-01")``, or free text."""

    exit_code = 6
    http_status = 409
    code = "conflict"
    retryable = True
    template = N_("{what} was changed or is held by someone else; retry")



class DrainBlocked(Conflict):
    """Issue 26: a host's pods could not all be evicted in time (a PodDisruptionBudget held
    them), so the action on the host did not run; a later try may find the budget allows it.
    ``DrainBlocked(text, report=DrainReport)``, or free text."""

    code = "drain_blocked"
    #: what was evicted and what blocked (:class:`gpufleet.service.hosts.drain.DrainReport`)
    report: Any = None
