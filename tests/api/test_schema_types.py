"""Issue 25 item 2, "the schema is the read model": every constructor of an API shape from
the service's answer (``of``, ``json_of`` in ``src/gpufleet/api``) names the service type it
reads, so mypy checks the service <-> API contract field by field; an untyped or ``Any``
parameter may not come back (an AST check, shown to fail on the old shape). And the
published JSON is the service's read model as it is: for hosts, leases, alarms and tokens
the answer is the read model's fields with their values, times as ISO 8601 in UTC."""

from __future__ import annotations

import ast
import dataclasses
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from gpufleet.domain.placement import Request
from gpufleet.domain.times import as_utc
from gpufleet.service.allocation.allocation import allocate
from gpufleet.service.allocation.leases import list_leases
from gpufleet.service.core.alarms import list_alarms
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.core.tokens import Role, create_token, list_tokens
from gpufleet.service.views.hosts import list_hosts
from tests.api.conftest import auth

API = Path(__file__).resolve().parents[2] / "src" / "gpufleet" / "api"
V1 = "/api/v1"


def _loose(annotation: ast.expr | None) -> bool:
    """True when a parameter says nothing mypy can check: no annotation, ``Any``, or a
    collection of ``Any`` (``Iterable[Any]``). A JSON object (``dict[str, Any]``) is data
    with keys and is allowed."""
    if annotation is None:
        return True
    if isinstance(annotation, ast.Name | ast.Attribute):
        return ast.unparse(annotation) in ("Any", "typing.Any")
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        return _loose(ast.parse(annotation.value, mode="eval").body)
    if isinstance(annotation, ast.Subscript) and not isinstance(annotation.slice, ast.Tuple):
        return _loose(annotation.slice)
    return False


def loose_constructors(source: str, filename: str) -> list[str]:
    """``file:line name(param)`` of each schema constructor with a parameter mypy cannot
    check."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        if node.name not in ("of", "json_of") and not node.name.endswith("_of"):
            continue
        args = node.args
        params = [*args.posonlyargs, *args.args, *args.kwonlyargs]
        params += [a for a in (args.vararg, args.kwarg) if a is not None]
        for p in params:
            if p.arg in ("self", "cls"):
                continue
            if _loose(p.annotation):
                found.append(f"{filename}:{node.lineno} {node.name}({p.arg})")
    return found


def test_no_schema_constructor_takes_an_untyped_or_any_parameter() -> None:
    files = sorted(API.rglob("*.py"))
    assert len(files) > 10
    loose = [x for f in files for x in loose_constructors(f.read_text(), f.name)]
    assert loose == [], "schema constructors mypy cannot check:\n" + "\n".join(loose)


def test_the_check_fails_on_the_old_shape() -> None:
    old = '''
class HostOut(Schema):
    @classmethod
    def of(cls, v: Any) -> HostOut:
        return cls(name=v.name)

    @classmethod
    def json_of(cls, rows: Iterable[Any]) -> bytes: ...

def labels_of(r) -> LabelsOut: ...

class Typed(Schema):
    @classmethod
    def of(cls, v: HostView, e: dict[str, Any], x: "HostView") -> Typed: ...
'''
    assert sorted(loose_constructors(old, "old.py")) == [
        "old.py:10 labels_of(r)",
        "old.py:4 of(v)",
        "old.py:8 json_of(rows)",
    ]


def _plain(value: Any) -> Any:
    """A read model's value as the API publishes it (no schema involved)."""
    if isinstance(value, datetime):
        return as_utc(value).isoformat()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _plain(dataclasses.asdict(value))
    return value


def test_the_answers_are_the_read_models_field_by_field(
    client: TestClient, lab_fleet: Fleet
) -> None:
    fleet = lab_fleet
    got = allocate(fleet, Request(gpus=8), owner="team-a", purpose="llm",
                   duration=timedelta(hours=8), users=["alice"])
    assert got.lease is not None
    create_token(fleet, "ci-bot", Role.parse("viewer", "--role"), timedelta(days=30))
    viewer, admin = auth("viewer"), auth("admin")

    hosts = client.get(f"{V1}/hosts", params={"limit": 1000}, headers=viewer).json()["items"]
    assert hosts == [_plain(v) for v in list_hosts(fleet)]
    assert len(hosts) == 6 and {h["state"] for h in hosts} >= {"allocated", "available"}

    leases = client.get(f"{V1}/leases", headers=viewer).json()
    assert leases == [_plain(v) for v in list_leases(fleet)]
    assert leases[0]["users"] == ["alice"] and leases[0]["gpus"] == 8
    assert "+00:00" in leases[0]["ends_at"]

    alarms = client.get(f"{V1}/alarms", params={"all": True}, headers=viewer).json()
    assert alarms == [_plain(a) for a in list_alarms(fleet, include_closed=True)]

    tokens = client.get(f"{V1}/tokens", headers=admin).json()
    assert tokens == [_plain(t) for t in list_tokens(fleet)]
    assert [t["name"] for t in tokens] == ["ci-bot"] and tokens[0]["expires_at"]
