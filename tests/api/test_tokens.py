"""Database API tokens through the real ASGI app and the CLI, on SQLite and PostgreSQL:
created once and stored hashed, expiring, revocable, roles (viewer reads, operator acts,
admin manages tokens), every mutating call in the event log under the token's name, and
the one error shape for each refusal."""

from __future__ import annotations

import json
import re
from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy import select
from typer.testing import CliRunner

from gpufleet.api.app import create_app
from gpufleet.api.auth import TokenStore
from gpufleet.cli.main import app as cli_app
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.core.tokens import Role, create_token, token_digest
from gpufleet.service.views.hosts import list_events
from gpufleet.store.tables import ApiToken
from gpufleet.testing import FakeClock
from tests.api.test_api import error

V1 = "/api/v1"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_roles_expiry_revocation_and_audit_with_database_tokens(lab_fleet: Fleet) -> None:
    clock = lab_fleet.clock
    assert isinstance(clock, FakeClock)
    _, viewer = create_token(lab_fleet, "dash", Role.VIEWER)
    _, operator = create_token(lab_fleet, "ci", Role.OPERATOR)
    _, admin = create_token(lab_fleet, "root", Role.ADMIN)
    _, brief = create_token(lab_fleet, "brief", Role.OPERATOR, expires=clock.now - clock.now)
    with TestClient(create_app(lab_fleet, TokenStore(None))) as c:
        # no token / wrong scheme / unknown token: 401, one shape, WWW-Authenticate
        r = c.get(f"{V1}/hosts")
        assert "Bearer" in error(r, 401, "unauthorized")
        assert r.headers["www-authenticate"] == "Bearer"
        error(c.get(f"{V1}/hosts", headers=bearer("gft_" + "x" * 43)), 401, "unauthorized")
        # a token that expired: 401 (its lifetime was zero, so it is already past)
        assert "expired" in error(c.get(f"{V1}/hosts", headers=bearer(brief)), 401, "unauthorized")
        # viewer reads, may not mutate
        assert c.get(f"{V1}/hosts", headers=bearer(viewer)).status_code == 200
        msg = error(c.post(f"{V1}/alarms/1/ack", json={}, headers=bearer(viewer)), 403, "forbidden")
        assert "dash (viewer)" in msg
        # operator acts on hosts, may not manage tokens (list, create, revoke)
        got = c.post(
            f"{V1}/failures",
            json={"job": "j1", "host": "gpu-02", "time": "2026-12-01T11:00:00Z", "message": "NCCL"},
            headers=bearer(operator),
        )
        assert got.status_code == 200 and got.json()["host"] == "gpu-02", got.text
        for call in (
            c.get(f"{V1}/tokens", headers=bearer(operator)),
            c.post(f"{V1}/tokens", json={"name": "x", "role": "admin"}, headers=bearer(operator)),
            c.delete(f"{V1}/tokens/dash", headers=bearer(operator)),
        ):
            assert "ci (operator)" in error(call, 403, "forbidden")
        # admin creates a token through the API: shown once, works, listed without secret
        made = c.post(
            f"{V1}/tokens",
            json={"name": "pipeline", "role": "operator", "expires": "30d"},
            headers=bearer(admin),
        )
        assert made.status_code == 200, made.text
        new = made.json()["token"]
        assert new.startswith("gft_") and made.json()["info"]["state"] == "active"
        assert made.json()["info"]["expires_at"].startswith("2026-12-31")
        assert c.get(f"{V1}/hosts", headers=bearer(new)).status_code == 200
        listed = c.get(f"{V1}/tokens", headers=bearer(admin))
        assert [t["name"] for t in listed.json()] == ["brief", "ci", "dash", "pipeline", "root"]
        assert {t["state"] for t in listed.json()} == {"active", "expired"}
        assert "gft_" not in listed.text and token_digest(new) not in listed.text
        # bad requests name the field; an active name is a conflict; unknown is 404
        assert "role" in error(
            c.post(f"{V1}/tokens", json={"name": "y", "role": "root"}, headers=bearer(admin)),
            422,
            "config",
        )
        error(
            c.post(f"{V1}/tokens", json={"name": "ci", "role": "viewer"}, headers=bearer(admin)),
            409,
            "conflict",
        )
        error(c.delete(f"{V1}/tokens/nobody", headers=bearer(admin)), 404, "not_found")
        # revoking: the very next call is refused; a second revoke is a conflict
        gone = c.delete(f"{V1}/tokens/pipeline", headers=bearer(admin))
        assert gone.status_code == 200 and gone.json()["state"] == "revoked"
        assert "revoked" in error(c.get(f"{V1}/hosts", headers=bearer(new)), 401, "unauthorized")
        error(c.delete(f"{V1}/tokens/pipeline", headers=bearer(admin)), 409, "conflict")
        # the name of a revoked token can be taken again, by a new secret
        again = c.post(
            f"{V1}/tokens", json={"name": "pipeline", "role": "viewer"}, headers=bearer(admin)
        ).json()["token"]
        assert again != new and c.get(f"{V1}/hosts", headers=bearer(again)).status_code == 200
        error(c.get(f"{V1}/hosts", headers=bearer(new)), 401, "unauthorized")
    # every mutating call is in the event log under the token's name, refused ones too
    calls = [
        (e["actor"], e["message"])
        for e in reversed(list_events(lab_fleet, kind="api-call", limit=100))
    ]
    assert ("api:dash", "POST /api/v1/alarms/1/ack -> 403") in calls
    assert ("api:ci", "POST /api/v1/failures -> 200") in calls
    assert ("api:ci", "DELETE /api/v1/tokens/dash -> 403") in calls
    assert ("api:root", "POST /api/v1/tokens -> 200") in calls
    assert ("api:root", "DELETE /api/v1/tokens/pipeline -> 409") in calls
    assert not [a for a, m in calls if m.startswith("GET")]
    made_ev = [e for e in list_events(lab_fleet, kind="token", limit=100)]
    assert {e["actor"] for e in made_ev} >= {"api:root", "pytest"}
    # never a secret or its digest, in the store's readable columns or in any event
    everything = json.dumps(list_events(lab_fleet, limit=1000), default=str)
    for secret in (viewer, operator, admin, new, again):
        assert secret not in everything and token_digest(secret) not in everything
    with lab_fleet.db.session() as s:
        rows = s.scalars(select(ApiToken)).all()
        assert {r.digest for r in rows} >= {token_digest(viewer), token_digest(again)}
        for r in rows:
            assert "gft_" not in f"{r.name}{r.role}{r.digest}{r.created_by}"


def test_file_and_database_tokens_both_work(lab_fleet: Fleet, tokens_file: Path) -> None:
    _, db_token = create_token(lab_fleet, "dbtok", Role.VIEWER)
    with TestClient(create_app(lab_fleet, TokenStore(tokens_file))) as c:
        assert c.get(f"{V1}/hosts", headers=bearer(db_token)).status_code == 200
        assert c.get(f"{V1}/hosts", headers=bearer("tok-viewer-1")).status_code == 200
        error(c.get(f"{V1}/tokens", headers=bearer("tok-operator-1")), 403, "forbidden")
        assert c.get(f"{V1}/tokens", headers=bearer("tok-admin-1")).status_code == 200


def test_cli_token_create_list_revoke(fleet: Fleet, tmp_path: Path) -> None:
    runner = CliRunner()
    env = {
        "GPUFLEET_DATABASE_URL": None,
        "GPUFLEET_HOME": str(tmp_path / "h"),
        "GPUFLEET_ACTOR": "alice",
    }
    base = ["--db", fleet.db.url]
    r = runner.invoke(
        cli_app,
        [*base, "token", "create", "--role", "operator", "--name", "ci", "--expires", "7d"],
        env=env,
    )
    assert r.exit_code == 0, r.output
    secret = r.stdout.strip()
    assert secret.startswith("gft_") and len(secret) == 47
    assert "shown only this once" in " ".join(r.stderr.split())
    listed = runner.invoke(cli_app, [*base, "token", "list", "--json"], env=env)
    assert listed.exit_code == 0, listed.output
    (row,) = json.loads(listed.stdout)
    assert row["name"] == "ci" and row["role"] == "operator" and row["state"] == "active"
    assert row["created_by"] == "alice" and row["expires_at"] is not None
    assert secret not in listed.stdout and token_digest(secret) not in listed.stdout
    bad = runner.invoke(
        cli_app, [*base, "token", "create", "--role", "root", "--name", "x", "--json"], env=env
    )
    assert bad.exit_code == 2 and json.loads(bad.stdout)["error"]["code"] == "config"
    assert "--role 'root'" in json.loads(bad.stdout)["error"]["message"]
    # the token works against the API until revoked from the CLI
    with TestClient(create_app(fleet, TokenStore(None))) as c:
        assert c.get(f"{V1}/pools", headers=bearer(secret)).status_code == 200
        r = runner.invoke(cli_app, [*base, "token", "revoke", "ci"], env=env)
        assert r.exit_code == 0 and "revoked" in r.stdout
        error(c.get(f"{V1}/pools", headers=bearer(secret)), 401, "unauthorized")
    r = runner.invoke(cli_app, [*base, "token", "revoke", "nobody"], env=env)
    assert r.exit_code == 4, r.output


#: Routes only an admin may call (everything else that mutates is for operators).
ADMIN_ONLY = {
    ("post", "/api/v1/maintenance/on"),
    ("post", "/api/v1/maintenance/off"),
    ("post", "/api/v1/alarms/{alarm_id}/resolve"),
    ("get", "/api/v1/tokens"),
    ("post", "/api/v1/tokens"),
    ("delete", "/api/v1/tokens/{name}"),
}


def test_every_route_refuses_no_token_and_too_low_a_role(lab_fleet: Fleet) -> None:
    """From the OpenAPI document, so a new route cannot forget its role: no token 401 (but
    health), a viewer mutating 403, an operator on an admin route 403, each in the one shape."""
    _, viewer = create_token(lab_fleet, "v", Role.VIEWER)
    _, operator = create_token(lab_fleet, "o", Role.OPERATOR)
    with TestClient(create_app(lab_fleet, TokenStore(None))) as c:
        doc = c.get(f"{V1}/openapi.json").json()
        ops = [(m, p) for p, item in doc["paths"].items() for m in item]
        assert len(ops) >= 25 and set(ops) >= ADMIN_ONLY
        for method, path in ops:
            url = re.sub(r"\{[^}]+\}", "1", path)
            if path == f"{V1}/health":
                assert c.request(method, url).status_code == 200
                continue
            error(c.request(method, url, json={}), 401, "unauthorized")
            if (method, path) in ADMIN_ONLY:
                r = c.request(method, url, json={}, headers=bearer(operator))
                assert "o (operator)" in error(r, 403, "forbidden"), (method, path)
            elif method != "get":
                r = c.request(method, url, json={}, headers=bearer(viewer))
                assert "v (viewer)" in error(r, 403, "forbidden"), (method, path)
