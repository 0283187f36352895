"""The API through the real ASGI app on SQLite and PostgreSQL: resources, pagination, roles,
the one error shape, the OpenAPI document, and the CLI's --json printing the same schemas."""

from __future__ import annotations

import ast
import json
from datetime import timedelta
from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy import select
from typer.testing import CliRunner

from gpufleet.api.app import create_app
from gpufleet.api.auth import TokenStore
from gpufleet.api.schemas import HostDetailOut, HostOut
from gpufleet.cli.main import app as cli_app
from gpufleet.domain.events import AlarmKind, AlarmSeverity
from gpufleet.service.core.alarms import raise_alarm
from gpufleet.service.core.fleet import Fleet
from gpufleet.store.tables import Host
from gpufleet.testing import FakeClock
from tests.api.conftest import TOKENS, auth, write_tokens

V1 = "/api/v1"


def error(r: object, status: int, code: str) -> str:
    """Assert the one error shape with ``status`` and ``code``; return the message."""
    assert r.status_code == status, r.text  # type: ignore[attr-defined]
    body = r.json()  # type: ignore[attr-defined]
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "retryable"}
    assert body["error"]["code"] == code, body
    assert isinstance(body["error"]["retryable"], bool)
    return str(body["error"]["message"])


def test_hosts_come_in_pages_with_the_cli_filters(client: TestClient) -> None:
    r = client.get(f"{V1}/hosts", params={"limit": 4}, headers=auth("viewer"))
    assert r.status_code == 200, r.text
    first = r.json()
    assert [h["name"] for h in first["items"]] == ["gpu-01", "gpu-02", "gpu-03", "gpu-04"]
    assert first["next_cursor"]
    second = client.get(
        f"{V1}/hosts", params={"limit": 4, "cursor": first["next_cursor"]}, headers=auth("viewer")
    ).json()
    assert [h["name"] for h in second["items"]] == ["gpu-05", "gpu-06"]
    assert second["next_cursor"] is None
    # an exact page has no next page either
    exact = client.get(f"{V1}/hosts", params={"limit": 6}, headers=auth("viewer")).json()
    assert len(exact["items"]) == 6 and exact["next_cursor"] is None
    # filters: the CLI's selectors and options
    q = {"model": "H100", "state": "available", "selector": "gpu-03,gpu-?5", "limit": 1}
    r = client.get(f"{V1}/hosts", params=q, headers=auth("viewer"))
    assert [h["name"] for h in r.json()["items"]] == ["gpu-03"]
    row = r.json()["items"][0]
    assert row["gpu_count"] == 8 and "H100" in row["gpu_model"] and row["state"] == "available"
    assert row["last_collected_at"].endswith("+00:00")
    q["cursor"] = r.json()["next_cursor"]
    r = client.get(f"{V1}/hosts", params=q, headers=auth("viewer")).json()
    assert [h["name"] for h in r["items"]] == ["gpu-05"] and r["next_cursor"] is None
    # no host matches: NotFound, as on the CLI (exit 4)
    error(
        client.get(f"{V1}/hosts", params={"model": "A100"}, headers=auth("viewer")),
        404,
        "not_found",
    )
    error(
        client.get(f"{V1}/hosts", params={"selector": "gpu-0[1]"}, headers=auth("viewer")),
        422,
        "config",
    )
    assert "cursor" in error(
        client.get(f"{V1}/hosts", params={"cursor": "%%%"}, headers=auth("viewer")), 422, "config"
    )
    assert "limit" in error(
        client.get(f"{V1}/hosts", params={"limit": 0}, headers=auth("viewer")), 422, "config"
    )


def test_host_page_has_gpus_nics_labels_validation_leases_events(client: TestClient) -> None:
    granted = client.post(
        f"{V1}/leases",
        json={"gpus": 8, "model": "H100", "owner": "team-a", "purpose": "llm", "for": "24h"},
        headers=auth("operator"),
    )
    assert granted.status_code == 200, granted.text
    lease = granted.json()["lease"]
    assert granted.json()["granted"] is True and lease["actor"] == "api:operator-bot"
    host = lease["hosts"][0]
    d = client.get(f"{V1}/hosts/{host}", headers=auth("viewer")).json()
    assert d["host"]["name"] == host and d["host"]["state"] == "allocated"
    assert len(d["gpus"]) == 8 and all(g["uuid"].startswith("GPU-") for g in d["gpus"])
    assert d["summary"]["driver_version"] and d["summary"]["pci_gpus"] == 8
    assert d["nics"] and {"ca", "port", "state", "rate_gbps"} <= set(d["nics"][0])
    assert d["labels"] and d["validation"]["decision"]
    assert [x["id"] for x in d["leases"]] == [lease["id"]]
    assert any(e["kind"] == "transition" for e in d["events"])
    assert d["facts"]["nvidia_smi"]["gpus"]
    assert "nope" in error(client.get(f"{V1}/hosts/nope", headers=auth("viewer")), 404, "not_found")


def test_leases_renew_release_capacity_and_errors(client: TestClient, lab_fleet: Fleet) -> None:
    op = auth("operator")
    got = client.post(
        f"{V1}/leases",
        json={"hosts": 2, "owner": "team-b", "purpose": "eval", "for": "8h"},
        headers=op,
    ).json()
    lid = got["lease"]["id"]
    assert client.get(f"{V1}/leases/{lid}", headers=auth("viewer")).json()["gpus"] == 16
    listed = client.get(f"{V1}/leases", params={"owner": "team-b"}, headers=auth("viewer"))
    assert [x["id"] for x in listed.json()] == [lid]
    cap = client.get(f"{V1}/capacity", headers=auth("viewer")).json()
    assert cap["totals"]["allocated"] == 16 and cap["totals"]["free"] == 32
    ok = client.get(f"{V1}/capacity/check", params={"gpus": 32}, headers=auth("viewer")).json()
    assert ok["ok"] is True and ok["allocatable"] == 32
    short = client.get(f"{V1}/capacity/check", params={"gpus": 40}, headers=auth("viewer"))
    assert short.json()["ok"] is False and short.json()["missing"] == 8
    # issue 26: the CUDA gate through the API (the lab's 590 driver serves up to 13.0)
    cu = client.get(f"{V1}/capacity/check", params={"gpus": 32, "cuda": "12.4"},
                    headers=auth("viewer")).json()
    assert cu["ok"] is True and cu["cuda"] == "12.4"
    cu = client.get(f"{V1}/capacity/check", params={"gpus": 8, "cuda": "14.0"},
                    headers=auth("viewer")).json()
    assert cu["ok"] is False and "newer than gpufleet's driver table" in cu["message"]
    error(client.get(f"{V1}/capacity/check", params={"gpus": 8, "cuda": "x"},
                     headers=auth("viewer")), 422, "config")
    assert isinstance(lab_fleet.clock, FakeClock)
    renewed = client.post(f"{V1}/leases/{lid}/renew", json={"for": "12h"}, headers=op).json()
    assert renewed["ends_at"] > got["lease"]["ends_at"]
    # refusal is not an error: granted false with counts
    refused = client.post(
        f"{V1}/leases", json={"gpus": 512, "owner": "x", "purpose": "y", "for": "1h"}, headers=op
    ).json()
    assert refused["granted"] is False and refused["refusal"]["reason"]
    out = client.post(f"{V1}/leases/{lid}/release", json={"reason": "done"}, headers=op)
    assert out.status_code == 200 and out.json()["lease"]["state"] == "released"
    # the error shape, per class
    again = client.post(f"{V1}/leases/{lid}/release", json={}, headers=op)
    assert "release" in error(again, 409, "invalid_transition")
    error(client.get(f"{V1}/leases/9999", headers=auth("viewer")), 404, "not_found")
    msg = error(client.post(f"{V1}/leases", json={"gpus": 8}, headers=op), 422, "config")
    assert "owner" in msg and "purpose" in msg
    msg = error(
        client.post(
            f"{V1}/leases",
            json={"gpus": 8, "owner": "a", "purpose": "b", "for": "soon"},
            headers=op,
        ),
        422,
        "config",
    )
    assert "for" in msg
    error(
        client.get(f"{V1}/hosts", params={"state": "bogus"}, headers=auth("viewer")), 422, "config"
    )
    error(client.get(f"{V1}/no/such/path", headers=auth("viewer")), 404, "not_found")
    error(client.get(f"{V1}/hosts/gpu-99", headers=auth("viewer")), 404, "not_found")


def test_roles_and_tokens(client: TestClient, tokens_file: Path) -> None:
    r = client.get(f"{V1}/hosts")
    assert "Bearer" in error(r, 401, "unauthorized") and r.headers["www-authenticate"] == "Bearer"
    error(client.get(f"{V1}/hosts", headers={"Authorization": "Bearer wrong"}), 401, "unauthorized")
    error(
        client.get(f"{V1}/hosts", headers={"Authorization": f"Basic {TOKENS['admin']}"}),
        401,
        "unauthorized",
    )
    body = {"gpus": 8, "owner": "a", "purpose": "b"}
    msg = error(client.post(f"{V1}/leases", json=body, headers=auth("viewer")), 403, "forbidden")
    assert "viewer-bot (viewer)" in msg
    maint = {"selector": "gpu-06", "reason": "fan swap"}
    error(
        client.post(f"{V1}/maintenance/on", json=maint, headers=auth("operator")), 403, "forbidden"
    )
    r = client.post(f"{V1}/maintenance/on", json=maint, headers=auth("admin"))
    assert r.status_code == 200 and r.json() == [
        {"host": "gpu-06", "state": "maintenance", "error": None}
    ]
    events = client.get(
        f"{V1}/events",
        params={"host": "gpu-06", "kind": "transition", "limit": 1},
        headers=auth("viewer"),
    ).json()
    assert events[0]["actor"] == "api:admin-bot" and "fan swap" in events[0]["message"]
    # a refused host carries its error in the one shape; the others still run
    r = client.post(
        f"{V1}/maintenance/on",
        json={"selector": "gpu-06", "reason": "again"},
        headers=auth("admin"),
    )
    off = client.post(f"{V1}/maintenance/off", json={"selector": "gpu-05"}, headers=auth("admin"))
    assert off.json()[0]["error"]["code"] == "invalid_transition"
    # revoking: the file is re-read when it changes
    write_tokens(tokens_file, {"viewer": TOKENS["viewer"]})
    error(client.get(f"{V1}/hosts", headers=auth("admin")), 401, "unauthorized")
    assert client.get(f"{V1}/hosts", headers=auth("viewer")).status_code == 200


def test_without_a_tokens_file_every_call_is_refused(lab_fleet: Fleet) -> None:
    with TestClient(create_app(lab_fleet, TokenStore(None))) as c:
        msg = error(c.get(f"{V1}/hosts", headers=auth("admin")), 401, "unauthorized")
        assert "GPUFLEET_API_TOKENS_FILE" in msg
        assert c.get(f"{V1}/health").json()["status"] == "ok"


def test_a_tokens_file_with_a_clear_token_is_refused(tmp_path: Path) -> None:
    from gpufleet.errors import ConfigError

    p = tmp_path / "t.yaml"
    p.write_text("my-secret-token: admin\n")
    try:
        TokenStore(p)
    except ConfigError as exc:
        assert "SHA-256" in str(exc) and "my-secret-token" not in str(exc)
    else:
        raise AssertionError("a token in clear was accepted")


def test_baselines_pools_drift_alarms_events_failures(client: TestClient, lab_fleet: Fleet) -> None:
    v = auth("viewer")
    assert client.get(f"{V1}/baselines", headers=v).json() == []
    error(client.get(f"{V1}/baselines/none", headers=v), 404, "not_found")
    pools = client.get(f"{V1}/pools", headers=v)
    assert pools.status_code == 200
    drift = client.get(f"{V1}/drift", headers=v).json()
    assert set(drift) == {"by_host", "summary", "baselines", "no_baseline", "no_facts",
                          "pools"}  # issue 26
    assert client.get(f"{V1}/alarms", headers=v).json() == []
    rec = client.post(
        f"{V1}/failures",
        json={
            "job": "j1",
            "host": "gpu-03",
            "gpu": "2",
            "message": "Xid 79: GPU has fallen off the bus",
            "time": lab_fleet.now().isoformat(),
        },
        headers=auth("operator"),
    )
    assert rec.status_code == 200, rec.text
    assert rec.json()["category"] == "gpu"
    error(
        client.post(
            f"{V1}/failures",
            json={
                "job": "j",
                "host": "gpu-99",
                "message": "m",
                "time": lab_fleet.now().isoformat(),
            },
            headers=auth("operator"),
        ),
        404,
        "not_found",
    )
    listed = client.get(f"{V1}/failures", params={"host": "gpu-03"}, headers=v).json()
    assert [(f["job"], f["actor"]) for f in listed] == [("j1", "api:operator-bot")]
    rep = client.get(f"{V1}/failures/report", params={"since": "1d"}, headers=v).json()
    assert rep["hosts"][0]["host"] == "gpu-03" and rep["fleet_hosts"] == 6
    since = (lab_fleet.now() + timedelta(hours=1)).isoformat()
    assert client.get(f"{V1}/events", params={"since": since}, headers=v).json() == []
    kinds = {e["kind"] for e in client.get(f"{V1}/events", params={"limit": 500}, headers=v).json()}
    assert "transition" in kinds


def test_openapi_document_types_every_route(client: TestClient) -> None:
    doc = client.get(f"{V1}/openapi.json").json()
    assert doc["openapi"].startswith("3.")
    schemas = doc["components"]["schemas"]
    assert {"HostOut", "HostDetailOut", "HostPage", "LeaseOut", "ErrorOut"} <= set(schemas)
    ops = [(p, m, op) for p, item in doc["paths"].items() for m, op in item.items()]
    assert len(ops) >= 20 and all(p.startswith(V1) for p, _, _ in ops)
    for path, method, op in ops:
        success = next(c for c in ("200", "201", "202") if c in op["responses"])
        ok = op["responses"][success]["content"]["application/json"]["schema"]
        assert ok != {} and ("$ref" in ok or "items" in ok or "type" in ok), (path, method)
        if path != f"{V1}/health":
            err = op["responses"]["401"]["content"]["application/json"]["schema"]
            assert err == {"$ref": "#/components/schemas/ErrorOut"}, (path, method)
    assert "HTTPBearer" in doc["components"]["securitySchemes"]


def test_the_api_package_imports_no_database_library() -> None:
    root = Path(__file__).resolve().parents[2] / "src" / "gpufleet" / "api"
    found = []
    for f in root.rglob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            found += [
                (f.name, n)
                for n in names
                if n.split(".")[0] in ("sqlalchemy", "psycopg", "alembic")
                or n.startswith("gpufleet.store")
            ]
    assert len(list(root.rglob("*.py"))) >= 8
    assert found == []


def test_cli_json_prints_the_api_schemas(
    lab_fleet: Fleet, tmp_path: Path, client: TestClient
) -> None:
    runner = CliRunner()
    env = {"GPUFLEET_DATABASE_URL": None, "GPUFLEET_HOME": str(tmp_path / "home")}
    base = ["--db", lab_fleet.db.url]
    listed = runner.invoke(cli_app, [*base, "hosts", "list", "--json"], env=env)
    assert listed.exit_code == 0, listed.output
    rows = json.loads(listed.stdout)
    assert [set(r) for r in rows] == [set(HostOut.model_fields)] * 6
    api = client.get(f"{V1}/hosts", headers=auth("viewer")).json()["items"]
    assert rows == api
    shown = runner.invoke(cli_app, [*base, "hosts", "show", "gpu-01", "--json"], env=env)
    assert shown.exit_code == 0, shown.output
    d = json.loads(shown.stdout)
    assert set(d) == set(HostDetailOut.model_fields)
    assert d == client.get(f"{V1}/hosts/gpu-01", headers=auth("viewer")).json()


def test_alarms_list_ack_resolve(client: TestClient, lab_fleet: Fleet) -> None:
    with lab_fleet.db.session() as s:
        host = s.scalar(select(Host).where(Host.name == "gpu-02"))
        assert host is not None
        raise_alarm(
            s,
            lab_fleet,
            host,
            AlarmKind.DUPLICATE_HOST,
            AlarmSeverity.CRITICAL,
            "same GPU UUIDs as gpu-01",
        )
    (a,) = client.get(f"{V1}/alarms", headers=auth("viewer")).json()
    assert a["host"] == "gpu-02" and a["severity"] == "critical" and a["acknowledged_by"] is None
    path = f"{V1}/alarms/{a['id']}"
    error(client.post(f"{path}/ack", json={}, headers=auth("viewer")), 403, "forbidden")
    acked = client.post(f"{path}/ack", json={"reason": "on it"}, headers=auth("operator"))
    assert acked.status_code == 200 and acked.json()["acknowledged_by"] == "api:operator-bot"
    assert "already acknowledged" in error(
        client.post(f"{path}/ack", json={}, headers=auth("operator")), 400, "usage"
    )
    error(
        client.post(f"{path}/resolve", json={"reason": "x"}, headers=auth("operator")),
        403,
        "forbidden",
    )
    assert "reason" in error(
        client.post(f"{path}/resolve", json={}, headers=auth("admin")), 422, "config"
    )
    done = client.post(f"{path}/resolve", json={"reason": "RMA"}, headers=auth("admin")).json()
    assert done["closed_at"] and "RMA" in done["reason"]
    assert client.get(f"{V1}/alarms", headers=auth("viewer")).json() == []
    assert len(client.get(f"{V1}/alarms", params={"all": True}, headers=auth("viewer")).json()) == 1
    error(client.get(f"{V1}/alarms/999", headers=auth("viewer")), 404, "not_found")
