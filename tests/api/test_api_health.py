"""The health routes through the real ASGI app on SQLite and PostgreSQL: one inspection sweep,
remediation (admin; a run, refused before it is queued when it cannot run), GPU parts, BMC
status/power, bulk failure import; each for the right role, 403 for the wrong one, 404/422 in
the one error shape."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from httpx import Response
from sqlalchemy import func, select

from gpufleet.api.app import create_app
from gpufleet.api.auth import TokenStore
from gpufleet.service.background.job_queue import JobQueue
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.views.hosts import list_events
from gpufleet.store.tables import JobRun
from tests.api.conftest import auth
from tests.api.test_api import V1, error
from tests.service.test_jobs_api import empty_queue, wait_finished


@pytest.fixture
def worked(lab_fleet: Fleet, tokens_file: Path) -> Iterator[TestClient]:
    """The API with its job queue worked in the process (``serve --with-worker``)."""
    empty_queue(lab_fleet)
    lab_fleet.settings.schedule_sweep = ""  # only the runs of the test
    q = JobQueue(lab_fleet)
    q.start_in_process()
    try:
        with TestClient(create_app(lab_fleet, TokenStore(tokens_file), jobs=q)) as c:
            yield c
    finally:
        q.stop_in_process()


def finished(c: TestClient, started: Response) -> list[dict[str, Any]]:
    """Each host's result of the run a 202 answer started, once the run has ended."""
    assert started.status_code == 202, started.text
    run = wait_finished(c, started.json()["id"])
    assert run["state"] == "succeeded", run
    hosts: list[dict[str, Any]] = c.get(
        f"{V1}/runs/{run['id']}/hosts", headers=auth("viewer")).json()
    return hosts


def test_inspect_is_a_run_queued_by_operators(worked: TestClient) -> None:
    """Issue 25 item 2: long work is job-only; POST /inspect answers 202 with the run."""
    client = worked
    error(client.post(f"{V1}/inspect", json={}, headers=auth("viewer")), 403, "forbidden")
    r = client.post(f"{V1}/inspect", json={"selector": "gpu-01,gpu-02"}, headers=auth("operator"))
    assert r.json()["kind"] == "inspect" and r.json()["hosts"] == 2
    hosts = finished(client, r)
    assert sorted(h["host"] for h in hosts) == ["gpu-01", "gpu-02"]
    assert all(h["outcome"] for h in hosts)
    msg = error(
        client.post(f"{V1}/inspect", json={"forks": 2}, headers=auth("admin")), 422, "config"
    )
    assert "forks" in msg
    error(
        client.post(f"{V1}/inspect", json={"selector": "nope-9"}, headers=auth("operator")),
        404,
        "not_found",
    )


def _runs(fleet: Fleet) -> int:
    with fleet.db.session() as s:
        return int(s.scalar(select(func.count(JobRun.id))) or 0)


def test_remediation_is_a_run_queued_by_admins_refused_before_queueing(
    worked: TestClient, lab_fleet: Fleet
) -> None:
    """Issue 25 item 2: ``POST hosts/{name}/remediate`` answers 202 with a ``remediate`` run
    that a worker runs; a request that cannot run is refused at once in the one error shape
    (403, 404, 422, 400, 409) and queues nothing."""
    client = worked
    body = {"action": "service-request", "ticket": "RMA-1", "reason": "fan"}
    before = _runs(lab_fleet)
    error(client.post(f"{V1}/hosts/gpu-01/remediate", json=body, headers=auth("operator")),
          403, "forbidden")
    error(client.post(f"{V1}/hosts/gpu-99/remediate", json=body, headers=auth("admin")),
          404, "not_found")
    msg = error(client.post(f"{V1}/hosts/gpu-01/remediate", json={"action": "pray"},
                            headers=auth("admin")), 422, "config")
    assert "action" in msg
    msg = error(client.post(f"{V1}/hosts/gpu-01/remediate", json={"action": "restart-service"},
                            headers=auth("admin")), 400, "usage")
    assert "--service" in msg
    msg = error(client.post(f"{V1}/hosts/gpu-01/remediate", json={"action": "power-cycle"},
                            headers=auth("admin")), 400, "usage")
    assert "gpu-01" in msg and "BMC" in msg
    msg = error(client.post(f"{V1}/hosts/gpu-01/remediate", json={"action": "reset-gpu",
                            "gpu": 9}, headers=auth("admin")), 400, "usage")
    assert "no GPU 9" in msg
    lease = client.post(f"{V1}/leases", headers=auth("operator"), json={
        "hosts": 1, "selector": "gpu-06", "owner": "team-a", "purpose": "t", "for": "2h"}).json()
    assert lease["granted"], lease
    msg = error(client.post(f"{V1}/hosts/gpu-06/remediate", json={"action": "reboot"},
                            headers=auth("admin")), 409, "invalid_transition")
    assert "gpu-06" in msg
    assert _runs(lab_fleet) == before  # nothing queued
    assert list_events(lab_fleet, "gpu-06", kind="remediation") == []

    r = client.post(f"{V1}/hosts/gpu-01/remediate", json=body, headers=auth("admin"))
    assert r.json()["kind"] == "remediate" and r.json()["hosts"] == 1, r.text
    assert r.json()["params"]["action"] == "service-request"
    [host] = finished(client, r)
    assert host["host"] == "gpu-01" and host["outcome"] == "ok", host
    assert "service-request ok" in host["detail"]
    run = client.get(f"{V1}/runs/{r.json()['id']}", headers=auth("viewer")).json()
    rep = run["remediation"]
    assert (rep["host"], rep["action"], rep["ok"], rep["state"]) == (
        "gpu-01", "service-request", True, "maintenance")
    assert rep["steps"][0]["outcome"] == "ok" and rep["record_ids"], rep
    got = client.get(f"{V1}/hosts/gpu-01", headers=auth("viewer")).json()
    assert got["host"]["state"] == "maintenance"
    [ev] = list_events(lab_fleet, "gpu-01", kind="remediation")
    assert ev["actor"] == "api:admin-bot" and "RMA-1" in ev["message"]
    assert _runs(lab_fleet) == before + 1


def test_parts_list_and_show_for_viewers(client: TestClient) -> None:
    error(client.get(f"{V1}/parts", headers={}), 401, "unauthorized")
    rows = client.get(f"{V1}/parts", headers=auth("viewer")).json()
    assert len(rows) == 6 * 8 and all(r["host"] and r["hosts"] == 1 for r in rows)
    serial = rows[0]["serial"]
    one = client.get(f"{V1}/parts/{serial}", headers=auth("viewer")).json()
    assert one["serial"] == serial and one["hosts"] == [rows[0]["host"]]
    assert one["locations"] and isinstance(one["locations"][0], dict)
    error(client.get(f"{V1}/parts/NOPE", headers=auth("viewer")), 404, "not_found")


def test_bmc_status_viewer_and_power_admin(client: TestClient) -> None:
    r = client.get(f"{V1}/bmc", params={"selector": "gpu-01"}, headers=auth("viewer"))
    assert r.status_code == 200, r.text
    rows = r.json()
    assert [x["host"] for x in rows] in ([], ["gpu-01"])  # lab hosts have no BMC address
    error(
        client.post(f"{V1}/hosts/gpu-01/power", json={"action": "off"}, headers=auth("operator")),
        403,
        "forbidden",
    )
    error(
        client.post(f"{V1}/hosts/gpu-01/power", json={"action": "explode"}, headers=auth("admin")),
        422,
        "config",
    )
    error(
        client.post(f"{V1}/hosts/gpu-99/power", json={"action": "off"}, headers=auth("admin")),
        404,
        "not_found",
    )
    r = client.post(f"{V1}/hosts/gpu-01/power", json={"action": "off"}, headers=auth("admin"))
    assert r.status_code in (409, 422), r.text  # no BMC configured: refused, in the one shape
    assert set(r.json()["error"]) == {"code", "message", "retryable"}
    assert "gpu-01" in r.json()["error"]["message"]


def test_failures_import_jsonl_and_csv(client: TestClient, lab_fleet: Fleet) -> None:
    at = lab_fleet.now().isoformat()
    good = {
        "job": "j1",
        "host": "gpu-02",
        "gpu": "1",
        "time": at,
        "message": "Xid 79: GPU has fallen off the bus",
    }
    text = "\n".join([json.dumps(good), "{broken", json.dumps({**good, "host": "gpu-99"})])
    error(
        client.post(f"{V1}/failures/import", json={"text": text}, headers=auth("viewer")),
        403,
        "forbidden",
    )
    r = client.post(f"{V1}/failures/import", json={"text": text}, headers=auth("operator"))
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["recorded"] == 1 and len(out["errors"]) == 2
    assert out["errors"][0].startswith("line 2:") and "gpu-99" in out["errors"][1]
    csv_text = f"job,host,gpu,time,message\nj2,gpu-03,0,{at},NCCL timeout\n"
    r = client.post(
        f"{V1}/failures/import", json={"text": csv_text, "format": "csv"}, headers=auth("operator")
    )
    assert r.json() == {"recorded": 1, "errors": []}
    jobs = {f["job"] for f in client.get(f"{V1}/failures", headers=auth("viewer")).json()}
    assert {"j1", "j2"} <= jobs
    error(
        client.post(f"{V1}/failures/import", json={"text": 3}, headers=auth("operator")),
        422,
        "config",
    )


def test_two_sweeps_in_one_clock_tick_keep_the_first_sample(worked: TestClient) -> None:
    """Regression (schemathesis): a second sweep at the same instant (frozen clock) was a
    unique-key 500; now the second run succeeds and keeps the first sample."""
    client, body = worked, {"selector": "gpu-04"}
    finished(client, client.post(f"{V1}/inspect", json=body, headers=auth("operator")))
    (h,) = finished(client, client.post(f"{V1}/inspect", json=body, headers=auth("operator")))
    assert h["outcome"] == "ok" and "earlier" in (h["detail"] or ""), h


def test_evidence_run_is_operator_and_stores_the_result(worked: TestClient) -> None:
    client = worked
    body = {"selector": "gpu-05", "kind": "dcgm"}
    error(client.post(f"{V1}/evidence", json=body, headers=auth("viewer")), 403, "forbidden")
    msg = error(
        client.post(f"{V1}/evidence", json={**body, "kind": "x"}, headers=auth("operator")),
        422,
        "config",
    )
    assert "kind" in msg
    error(
        client.post(f"{V1}/evidence", json={**body, "selector": "nope"}, headers=auth("operator")),
        404,
        "not_found",
    )
    r = client.post(f"{V1}/evidence", json=body, headers=auth("operator"))
    assert r.json()["params"]["test"] == "dcgm"
    (run,) = finished(client, r)
    assert run["host"] == "gpu-05" and run["outcome"] == "passed", run
    page = client.get(f"{V1}/hosts/gpu-05", headers=auth("viewer")).json()
    assert any(e["kind"] == "dcgm" for e in page["evidence"]), page["evidence"]


def test_admin_manages_baselines_pools_retirement_and_quarantine(client: TestClient) -> None:
    body = {"name": "h100-gold", "host": "gpu-01", "pools": ["train-h100"]}
    error(client.post(f"{V1}/baselines", json=body, headers=auth("operator")), 403, "forbidden")
    error(
        client.post(f"{V1}/baselines", json={**body, "host": "gpu-99"}, headers=auth("admin")),
        404,
        "not_found",
    )
    r = client.post(f"{V1}/baselines", json=body, headers=auth("admin"))
    assert r.status_code == 200, r.text
    assert r.json()["name"] == "h100-gold"
    got = client.get(f"{V1}/baselines/h100-gold", headers=auth("viewer")).json()
    assert got["pools"] == ["train-h100"]
    pool = client.put(f"{V1}/pools/train-h100", json={"baseline": None}, headers=auth("admin"))
    assert pool.status_code == 200 and pool.json()["baseline"] is None, pool.text
    error(
        client.put(f"{V1}/pools/train-h100", json={"baseline": "x"}, headers=auth("operator")),
        403,
        "forbidden",
    )
    error(
        client.put(f"{V1}/pools/nope", json={"baseline": "h100-gold"}, headers=auth("admin")),
        404,
        "not_found",
    )
    ret = {"selector": "gpu-06", "reason": "end of life"}
    error(client.post(f"{V1}/retire", json=ret, headers=auth("operator")), 403, "forbidden")
    r = client.post(f"{V1}/retire", json=ret, headers=auth("admin"))
    assert r.json() == [{"host": "gpu-06", "state": "retired", "error": None}], r.text
    r = client.post(f"{V1}/unquarantine", json=ret, headers=auth("admin"))
    (out,) = r.json()
    assert out["host"] == "gpu-06" and out["state"] is None and out["error"]["code"]
    error(
        client.post(f"{V1}/retire", json={"selector": "gpu-01"}, headers=auth("admin")),
        422,
        "config",
    )


def test_bmc_sel_ack_is_operator(client: TestClient) -> None:
    body = {"reason": "DIMM replaced"}
    error(
        client.post(f"{V1}/hosts/gpu-01/bmc/sel-ack", json=body, headers=auth("viewer")),
        403,
        "forbidden",
    )
    error(
        client.post(f"{V1}/hosts/gpu-99/bmc/sel-ack", json=body, headers=auth("operator")),
        404,
        "not_found",
    )
    r = client.post(f"{V1}/hosts/gpu-01/bmc/sel-ack", json=body, headers=auth("operator"))
    assert r.json() == {"host": "gpu-01", "closed": 0}, r.text


def test_inspect_report_for_viewers(worked: TestClient, lab_fleet: Fleet) -> None:
    client = worked
    r = client.post(f"{V1}/inspect", json={"selector": "gpu-01,gpu-02"}, headers=auth("operator"))
    finished(client, r)
    rep = client.get(f"{V1}/inspect/report", params={"since": "1h"}, headers=auth("viewer")).json()
    sampled = {h["host"]: h for h in rep["hosts"] if h["samples"]}
    assert set(sampled) == {"gpu-01", "gpu-02"}
    assert sampled["gpu-01"]["gpus"] == 8 and sampled["gpu-01"]["temperature_max"] > 0
    assert rep["models"] and rep["models"][0]["samples"] >= 16
    msg = error(
        client.get(f"{V1}/inspect/report", params={"since": "soon"}, headers=auth("viewer")),
        422,
        "config",
    )
    assert "since" in msg
    error(
        client.get(f"{V1}/inspect/report", params={"selector": "nope"}, headers=auth("viewer")),
        404,
        "not_found",
    )
