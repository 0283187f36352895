"""Property-based run of the whole OpenAPI document (schemathesis) through the real ASGI app
over a small validated lab fleet: every operation, generated requests (valid and not), as an
admin (so that mutating calls reach their services) and without a token. No response may be
a 5xx, and every response must match the schema the document gives for its status.

Bounded: a few examples per operation, no shrinking or example database, no deadline (the
machine is shared); SQLite only (the API tests cover both backends).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Ok
from schemathesis.specs.openapi.checks import response_schema_conformance

from gpufleet.api.app import create_app
from gpufleet.api.auth import TokenStore
from gpufleet.service.background.job_queue import JobQueue
from gpufleet.service.core.fleet import Fleet
from tests.api.conftest import auth

EXAMPLES = 6
CHECKS = [not_a_server_error, response_schema_conformance]


@pytest.mark.parametrize("fleet", ["sqlite"], indirect=True)
def test_every_operation_answers_within_its_schema(lab_fleet: Fleet, tokens_file: Path) -> None:
    # as `gpufleet serve --with-worker` runs it: runs started through the API run in-process
    jobs = JobQueue(lab_fleet)
    app = create_app(lab_fleet, TokenStore(tokens_file), jobs=jobs)
    jobs.start_in_process()
    with TestClient(app) as c:  # the app's lifespan, as a server runs it
        assert c.get("/api/v1/health").status_code == 200
        schema = schemathesis.openapi.from_asgi("/api/v1/openapi.json", app)
        found = list(schema.get_all_operations())
        operations = [r.ok() for r in found if isinstance(r, Ok)]
        assert len(operations) == len(found) >= 25
        failures: list[str] = []
        for op in operations:
            for headers in (auth("admin"), {}):
                try:
                    failures += _run(op, headers)
                except Exception as exc:  # schemathesis' own report of what it found
                    failures.append(f"{op.method.upper()} {op.path}: {exc}"[:1500])
    jobs.stop_in_process()
    assert not failures, "\n".join(failures[:20])


@pytest.mark.parametrize("fleet", ["sqlite", "postgres"], indirect=True)
def test_what_schemathesis_found_is_refused_as_the_callers_mistake(client: TestClient) -> None:
    """Regression: an unknown event kind and a row id past 32 bits were 500s."""
    r = client.get("/api/v1/events", params={"kind": "problem_mark"}, headers=auth("viewer"))
    assert r.status_code == 422 and "kind" in r.json()["error"]["message"]
    for path in ("/api/v1/leases/24040505163257844072448", "/api/v1/alarms/2147483648"):
        r = client.get(path, headers=auth("viewer"))
        assert r.status_code == 422 and r.json()["error"]["code"] == "config", r.text
    r = client.post(
        "/api/v1/alarms/5406547906338007350771712/resolve",
        json={"reason": "x"},
        headers=auth("admin"),
    )
    assert r.status_code == 422


def _run(op: Any, headers: dict[str, str]) -> list[str]:
    found: list[str] = []

    @given(case=op.as_strategy())
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    def run(case: Any) -> None:
        try:
            response = case.call(headers=headers)
            case.validate_response(response, checks=CHECKS, headers=headers)
        except Exception as exc:  # collect every operation's failures, then fail once
            found.append(f"{case.method} {case.formatted_path}: {type(exc).__name__}: {exc}"[:600])

    run()
    return found
