"""Issue 25 item 2, "the schema is the read model": an API shape that publishes a read model
of the service field by field is a ``Mirror["ReadModel"]`` (``gpufleet.api.schemas``):
pydantic reads the read model's attributes, there is no hand-written copy, and mypy checks
that ``Shape.of`` is given that read model. Here: every mirror names a read model that
exists and has every field the shape publishes (a rename on either side fails here, not
in a customer's parser), the check fails on a wrong pair, and a mirror's ``of`` publishes
the read model's values (enums as their values)."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import pkgutil
import sys
from datetime import UTC, datetime
from typing import Any

from pydantic import AliasChoices, BaseModel, create_model

import gpufleet.api
from gpufleet.api.schemas import AlarmOut, HostOut, Mirror, Schema
from gpufleet.domain.events import AlarmKind, AlarmSeverity
from gpufleet.domain.states import HostState
from gpufleet.service.core.alarms import AlarmView
from gpufleet.service.views.hosts import HostView


def _mirrors() -> list[type[Mirror[object]]]:
    for info in pkgutil.iter_modules(gpufleet.api.__path__, "gpufleet.api."):
        if info.name.startswith("gpufleet.api.schemas"):
            importlib.import_module(info.name)
    out: list[type[Mirror[object]]] = []
    todo = list(Mirror.__subclasses__())
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if cls.__pydantic_generic_metadata__["origin"] is None:  # a shape, not Mirror[...]
            out.append(cls)
    return sorted(out, key=lambda c: c.__name__)


def read_model(shape: type[Mirror[object]]) -> type:
    """The read model ``shape`` names, imported where its module imports it for mypy."""
    name = next(
        b.__pydantic_generic_metadata__["args"][0]
        for b in shape.__mro__
        if getattr(b, "__pydantic_generic_metadata__", {}).get("origin") is Mirror
    )
    module = sys.modules[shape.__module__]
    for node in ast.walk(ast.parse(inspect.getsource(module))):
        if isinstance(node, ast.ImportFrom) and node.module and any(
            a.name == name for a in node.names
        ):
            return getattr(importlib.import_module(node.module), name)  # type: ignore[no-any-return]
    raise AssertionError(f"{shape.__name__}: {name} is not imported by {shape.__module__}")


def unmirrored(shape: type[Mirror[object]], model: type) -> list[str]:
    """The fields of ``shape`` that ``model`` does not have (by name or alias choice)."""
    if dataclasses.is_dataclass(model):
        has = {f.name for f in dataclasses.fields(model)}
    else:
        has = set(getattr(model, "model_fields", {}))
    has |= {n for n, _ in inspect.getmembers(model, lambda m: isinstance(m, property))}
    out = []
    for name, info in shape.model_fields.items():
        alias = info.validation_alias
        names = {name} | (
            {c for c in alias.choices if isinstance(c, str)}
            if isinstance(alias, AliasChoices)
            else {alias} if isinstance(alias, str) else set()
        )
        if not names & has:
            out.append(f"{shape.__name__}.{name}: {model.__name__} has no {name}")
    return out


def test_every_mirror_names_a_read_model_with_its_fields() -> None:
    mirrors = _mirrors()
    names = {m.__name__ for m in mirrors}
    assert {"HostOut", "LeaseOut", "AlarmOut", "AlarmRecordOut", "TokenOut", "SummaryOut",
            "DriftOut", "CapacityCheckOut", "LabelsOut", "RunOut", "DeadLetterOut",
            "SweepOut", "RemediationOut", "PartHistoryOut", "BmcStatusOut", "HostOutcomeOut",
            "InspectReportOut"} <= names
    problems = [p for m in mirrors for p in unmirrored(m, read_model(m))]
    assert problems == []
    assert read_model(HostOut) is HostView


def test_the_check_fails_on_a_wrong_pair() -> None:
    class Wrong(Mirror["HostView"]):
        name: str
        gpus: int

    assert unmirrored(Wrong, HostView) == ["Wrong.gpus: HostView has no gpus"]
    assert unmirrored(AlarmOut, HostView) == [
        f"AlarmOut.{f}: HostView has no {f}" for f in AlarmOut.model_fields
    ]


def test_of_publishes_the_read_models_values() -> None:
    at = datetime(2026, 1, 5, 10, 0, tzinfo=UTC)
    v = HostView(
        name="gpu-01", address="10.0.0.1", state=HostState.QUARANTINED, health="bad",
        fault=None, pool="p", groups=["g"], gpu_count=8, gpu_model="H100", driver="550",
        cuda="12.4", profiles=["training"], last_collected_at=at, last_outcome=None,
        last_reason=None, status_reason="xid", eta=None,
    )
    out = HostOut.of(v).json_dict()
    assert out == {f.name: getattr(v, f.name) for f in dataclasses.fields(v)} | {
        "state": "quarantined", "last_collected_at": "2026-01-05T10:00:00+00:00"}
    assert type(HostOut.of(v).state) is str  # the enum's value, not the enum
    a = AlarmView(host="gpu-01", kind=AlarmKind.DUPLICATE_HOST,
                  severity=AlarmSeverity.CRITICAL, opened_at=at.replace(tzinfo=None),
                  message="m")
    assert AlarmOut.of(a).json_dict() == {
        "host": "gpu-01", "kind": "duplicate-host", "severity": "critical",
        "opened_at": "2026-01-05T10:00:00+00:00", "message": "m", "acknowledged_by": None,
        "closed_at": None, "reason": None}


def _as_plain_schema(shape: type[Mirror[object]]) -> type[BaseModel]:
    """The same fields on the plain API base (``Schema``), without ``Mirror``."""
    fields: Any = {n: (f.annotation, f) for n, f in shape.model_fields.items()}
    return create_model(shape.__name__, __base__=Schema, __doc__=shape.__doc__, **fields)


def test_a_mirror_publishes_the_shape_its_fields_say() -> None:
    """Being a Mirror (generic, from_attributes) changes nothing the OpenAPI document says of
    the shape: its JSON schema is the one of the same fields on ``Schema``."""
    for shape in _mirrors():
        got = shape.model_json_schema(mode="serialization")
        assert got == _as_plain_schema(shape).model_json_schema(mode="serialization"), shape
    # and the comparison sees a difference a base class could add (a description)
    class Described(Mirror["HostView"]):
        """A description."""

        name: str

    plain = create_model("Described", __base__=Schema, name=(str, ...))
    assert Described.model_json_schema() != plain.model_json_schema()
