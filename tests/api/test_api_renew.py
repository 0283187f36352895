"""``POST /leases/{id}/renew`` extends (issue 29 item 4), SQLite and PostgreSQL: ``for``
adds to the current end, an ``until`` before it is 422 ``config`` unless ``shorten``; a
typo'd host is 404 with "did you mean". Fails on 84be469/8608b99 (``for`` counted from now,
``shorten`` unknown)."""

from __future__ import annotations

from datetime import datetime, timedelta

from fastapi.testclient import TestClient

from tests.api.conftest import auth
from tests.api.test_api import V1, error


def test_renew_extends_and_shortening_needs_shorten(client: TestClient) -> None:
    op = auth("operator")
    body = {"hosts": 1, "owner": "team-a", "purpose": "ft", "for": "72h"}
    lease = client.post(f"{V1}/leases", json=body, headers=op).json()["lease"]
    lid, end = lease["id"], datetime.fromisoformat(lease["ends_at"])
    r = client.post(f"{V1}/leases/{lid}/renew", json={"for": "24h"}, headers=op)
    assert r.status_code == 200, r.text
    assert datetime.fromisoformat(r.json()["ends_at"]) == end + timedelta(hours=24)
    earlier = (end - timedelta(hours=48)).isoformat()
    msg = error(client.post(f"{V1}/leases/{lid}/renew", json={"until": earlier}, headers=op),
                422, "config")  # fmt: skip
    assert "would shorten lease" in msg and "--shorten" in msg
    r = client.post(f"{V1}/leases/{lid}/renew", json={"until": earlier, "shorten": True},
                    headers=op)  # fmt: skip
    assert r.status_code == 200 and r.json()["ends_at"] == earlier


def test_an_unknown_host_is_404_with_did_you_mean(client: TestClient) -> None:
    msg = error(client.get(f"{V1}/hosts/gpu01", headers=auth("viewer")), 404, "not_found")
    assert "did you mean gpu-01?" in msg
