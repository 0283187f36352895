"""Lessee users and owner checks through the API, SQLite and PostgreSQL: ``users`` stored on
the lease and returned; renew/release with another ``owner`` is 409 ``conflict``; an ended
lease 409 ``invalid_transition``; a bad user name 422 ``config``."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.api.conftest import auth
from tests.api.test_api import V1, error


def test_users_on_the_lease_and_owner_refusals(client: TestClient) -> None:
    op = auth("operator")
    body = {"hosts": 1, "owner": "team-a", "purpose": "ft", "for": "8h", "users": ["alice"]}
    got = client.post(f"{V1}/leases", json=body, headers=op).json()
    lid = got["lease"]["id"]
    assert got["lease"]["users"] == ["alice"]
    assert client.get(f"{V1}/leases/{lid}", headers=auth("viewer")).json()["users"] == ["alice"]
    r = client.post(f"{V1}/leases/{lid}/renew", json={"for": "9h", "owner": "team-b"}, headers=op)
    assert "owned by 'team-a', not 'team-b'" in error(r, 409, "conflict")
    r = client.post(f"{V1}/leases/{lid}/release", json={"owner": "team-b"}, headers=op)
    assert "owned by 'team-a'" in error(r, 409, "conflict")
    r = client.post(f"{V1}/leases/{lid}/release", json={"owner": "team-a"}, headers=op)
    assert r.status_code == 200 and r.json()["lease"]["state"] == "released"
    r = client.post(f"{V1}/leases/{lid}/renew", json={"for": "9h"}, headers=op)
    error(r, 409, "invalid_transition")
    bad = {**body, "users": ["no spaces"]}
    assert "--user 'no spaces'" in error(
        client.post(f"{V1}/leases", json=bad, headers=op), 422, "config"
    )
