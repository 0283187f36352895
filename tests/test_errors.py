"""The error taxonomy: every GpufleetError subclass says what the caller should do (exit code,
HTTP status, stable code, retryable), renders its message from its template, and has the one
JSON shape ``{"error": {"code", "message", "retryable"}}`` (datasette's error-shape habit:
parametrized over every class, so a new class without an example fails here)."""

from __future__ import annotations

import json

import pytest

from gpufleet import errors
from gpufleet.errors import (
    ConfigError,
    Conflict,
    DrainBlocked,
    Forbidden,
    GpufleetError,
    IdentityMismatch,
    InvalidTransition,
    InventoryError,
    KubeApiError,
    LocalIOError,
    NotFound,
    ParseError,
    ServerUnavailable,
    StoreError,
    StoreUnavailable,
    Unauthorized,
    UsageError,
)


def every_error_class() -> list[type[GpufleetError]]:
    """GpufleetError and all its subclasses (recursively)."""
    out: list[type[GpufleetError]] = []
    todo: list[type[GpufleetError]] = [GpufleetError]
    while todo:
        cls = todo.pop()
        out.append(cls)
        todo.extend(cls.__subclasses__())
    return sorted(out, key=lambda c: c.__name__)


#: One instance of every class, built from its template's fields, with the message expected.
EXAMPLES: dict[type[GpufleetError], tuple[GpufleetError, str]] = {
    GpufleetError: (GpufleetError("something went wrong"), "something went wrong"),
    ParseError: (
        ParseError("nvidia-smi -q -x", "unexpected tag", line=12, column=3, host="gpu-01"),
        "gpu-01: nvidia-smi -q -x:12:3: unexpected tag",
    ),
    InventoryError: (
        InventoryError("inv.ini", 7, "unknown variable gpufleet_gpu_cuont"),
        "inv.ini:7: unknown variable gpufleet_gpu_cuont",
    ),
    NotFound: (NotFound(what="host", name="gpu-99"), "unknown host 'gpu-99'"),
    ConfigError: (
        ConfigError(setting="GPUFLEET_FORKS", cause="must be at least 1"),
        "GPUFLEET_FORKS: must be at least 1",
    ),
    InvalidTransition: (
        InvalidTransition("gpu-01", "allocated", "maintenance_on", ["release"]),
        "host gpu-01: event 'maintenance_on' is not allowed in state 'allocated' "
        "(allowed: release)",
    ),
    IdentityMismatch: (
        IdentityMismatch("gpu-01", "power cycle", "inventory says gpu-01, the BMC ..."),
        "host gpu-01: power cycle through its BMC refused: open bmc-identity alarm "
        "(inventory says gpu-01, the BMC ...); the BMC may be another machine's: fix the "
        "cabling or inventory, or pass --override-identity --reason TEXT",
    ),
    StoreError: (
        StoreError(url="sqlite:///x.db", cause="file is not a database"),
        "database sqlite:///x.db: file is not a database",
    ),
    StoreUnavailable: (
        StoreUnavailable(url="postgresql+psycopg://db/gf", cause="connection refused"),
        "database postgresql+psycopg://db/gf: connection refused",
    ),
    ServerUnavailable: (
        ServerUnavailable(url="http://fleet:8080", cause="connection refused"),
        "gpufleet server http://fleet:8080: connection refused",
    ),
    LocalIOError: (
        LocalIOError(path="/var/lib/gpufleet", cause="No space left on device"),
        "/var/lib/gpufleet: No space left on device",
    ),
    Unauthorized: (Unauthorized(reason="no token"), "not authenticated: no token"),
    Forbidden: (
        Forbidden(actor="ci-bot", action="retire hosts"),
        "ci-bot may not retire hosts",
    ),
    UsageError: (
        UsageError(command="gpufleet collect", cause="invalid value for '--forks': 'nan'"),
        "gpufleet collect: invalid value for '--forks': 'nan' (see 'gpufleet collect --help')",
    ),
    Conflict: (
        Conflict(what="host gpu-01"),
        "host gpu-01 was changed or is held by someone else; retry",
    ),
    DrainBlocked: (
        DrainBlocked(what="host gpu-01"),
        "host gpu-01 was changed or is held by someone else; retry",
    ),
    KubeApiError: (
        KubeApiError(setting="k8s", cause="evict ml/train-0: HTTP 429", status=429, body="{}"),
        "k8s: evict ml/train-0: HTTP 429",
    ),
}

#: What each class tells the caller to do: exit code, HTTP status, retryable.
CONTRACT: dict[type[GpufleetError], tuple[int, int, bool]] = {
    GpufleetError: (1, 500, False),
    ParseError: (3, 422, False),
    InventoryError: (2, 422, False),
    NotFound: (4, 404, False),
    ConfigError: (2, 422, False),
    KubeApiError: (2, 422, False),
    InvalidTransition: (5, 409, False),
    IdentityMismatch: (5, 409, False),
    StoreError: (2, 503, False),
    StoreUnavailable: (2, 503, True),
    ServerUnavailable: (2, 503, True),
    LocalIOError: (2, 500, False),
    Unauthorized: (2, 401, False),
    Forbidden: (2, 403, False),
    UsageError: (2, 400, False),
    Conflict: (6, 409, True),
    DrainBlocked: (6, 409, True),
}


def test_every_error_class_has_an_example_and_a_contract() -> None:
    classes = set(every_error_class())
    assert classes == set(EXAMPLES), "add an example for the new error class"
    assert classes == set(CONTRACT), "state what the caller of the new error class should do"


@pytest.mark.parametrize("cls", every_error_class(), ids=lambda c: c.__name__)
def test_error_shape(cls: type[GpufleetError]) -> None:
    exc, message = EXAMPLES[cls]
    assert type(exc) is cls
    assert str(exc) == message
    shape = exc.as_json()
    assert shape == {"error": {"code": cls.code, "message": message, "retryable": cls.retryable}}
    assert json.loads(json.dumps(shape)) == shape  # plain JSON, nothing else
    exit_code, http_status, retryable = CONTRACT[cls]
    assert (cls.exit_code, cls.http_status, cls.retryable) == (exit_code, http_status, retryable)
    assert 1 <= cls.exit_code <= 6


def test_codes_are_unique_and_stable_names() -> None:
    codes = [c.code for c in every_error_class()]
    assert len(codes) == len(set(codes))
    assert all(c.replace("_", "").isalpha() and c.islower() for c in codes)


#: Classes whose constructor takes structured arguments only (file:line, host/state/event).
STRUCTURED = {ParseError, InventoryError, InvalidTransition, IdentityMismatch}


@pytest.mark.parametrize(
    "cls", [c for c in every_error_class() if c not in STRUCTURED], ids=lambda c: c.__name__
)
def test_free_text_messages_still_work(cls: type[GpufleetError]) -> None:
    exc = cls("no host named 'gpu-01'")
    assert str(exc) == "no host named 'gpu-01'"
    assert exc.as_json()["error"]["message"] == "no host named 'gpu-01'"


def test_the_message_follows_fields_set_later() -> None:
    exc = ParseError("ibstat", "no CA", line=3)
    assert str(exc) == "ibstat:3: no CA"
    exc.host = "gpu-07"  # collect names the host after the parser raised
    assert str(exc) == "gpu-07: ibstat:3: no CA"
    assert exc.as_json()["error"]["message"] == "gpu-07: ibstat:3: no CA"


def test_template_fields_are_required_and_reserved_names_refused() -> None:
    with pytest.raises(AttributeError):
        str(NotFound(what="host"))  # a missing field is a bug, not a silent blank
    with pytest.raises(TypeError, match="reserved"):
        Conflict(code="x")


def test_retryable_tells_conflicts_and_outages_from_permanent_errors() -> None:
    retryable = {c for c in every_error_class() if c.retryable}
    assert retryable == {Conflict, DrainBlocked, StoreUnavailable, ServerUnavailable}
    assert issubclass(StoreUnavailable, StoreError)  # callers catching StoreError get both
    assert errors.Conflict.exit_code == 6
