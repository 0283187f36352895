"""Drain before you touch through the API (issue 26, item 3), on SQLite and PostgreSQL, with
kmock as the cluster (the API server's eviction response: tests/export/kmock_eviction.py):
``POST hosts/{name}/remediate`` (its run) and ``POST retire`` drain first (a budget that
blocks: ``drain_blocked`` naming the pod, nothing done) and take ``no_drain`` as the CLI's
``--no-drain``, recorded on the event; ``POST campaigns/{name}/run`` takes it too (kept on
the campaign for the worker job, recorded)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpufleet.service.campaigns.campaign_run import campaign_row
from gpufleet.service.core import background_errors as background
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.drain import KubeDrain
from gpufleet.service.views.hosts import list_events
from tests.api.conftest import auth
from tests.api.test_api_campaigns import _campaign
from tests.api.test_api_health import worked  # noqa: F401  (fixture)
from tests.export.kmock_eviction import serve_evictions
from tests.export.test_k8s_drain import _node, _pods, train_under_budget
from tests.export.test_k8s_sync import Kmock
from tests.service.test_jobs_api import empty_queue, wait_finished

pytestmark = pytest.mark.filterwarnings("ignore:read_binary is deprecated:DeprecationWarning")

V1 = "/api/v1"
SKIPPED = {"skipped": "--no-drain", "ok": None}


@pytest.fixture
def drained_fleet(lab_fleet: Fleet, tmp_path: Path) -> Iterator[KubeDrain]:
    """``lab_fleet`` drains on kmock; ``train-0`` runs on gpu-01 under a budget that allows
    no disruption."""
    km = Kmock([_node("gpu-01"), _node("gpu-02")], setup=serve_evictions)
    kubeconfig = km.kubeconfig(tmp_path / "kubeconfig")
    lab_fleet.settings = lab_fleet.settings.model_copy(
        update={"k8s_kubeconfig": kubeconfig, "k8s_drain_timeout_s": 0.5})
    api = KubeDrain(kubeconfig)
    train_under_budget(api)
    yield api
    km.close()


def test_remediate_and_retire_drain_first_no_drain_recorded(
    lab_fleet: Fleet, drained_fleet: KubeDrain, worked: TestClient  # noqa: F811
) -> None:
    """The remediation is a run (issue 25 item 2): the blocked drain fails it, fail closed,
    with the error ``gpufleet remediate`` raises (``drain_blocked``), logged and counted."""
    client = worked
    failures = background.counts()[background.WORKER]
    r = client.post(f"{V1}/hosts/gpu-01/remediate", json={"action": "reset-gpu"},
                    headers=auth("admin"))
    assert r.status_code == 202, r.text
    run = wait_finished(client, r.json()["id"])
    assert run["state"] == "failed" and "ml/train-0" in str(run["error"]), run
    err = run["remediation"]["error"]  # type: ignore[index]
    assert err["code"] == "drain_blocked" and "ml/train-0" in err["message"], err
    assert background.counts()[background.WORKER] == failures + 1
    [host] = client.get(f"{V1}/runs/{run['id']}/hosts", headers=auth("viewer")).json()
    assert host["outcome"] == "error" and "ml/train-0" in host["detail"], host
    assert list_events(lab_fleet, "gpu-01", kind="remediation") == []  # nothing ran

    r = client.post(f"{V1}/hosts/gpu-01/remediate",
                    json={"action": "reset-gpu", "no_drain": True}, headers=auth("admin"))
    assert r.status_code == 202, r.text
    run = wait_finished(client, r.json()["id"])
    assert run["remediation"]["host"] == "gpu-01", run  # type: ignore[index]
    [ev] = list_events(lab_fleet, "gpu-01", kind="remediation")
    assert ev["data"]["drain"] == SKIPPED and ev["actor"] == "api:admin-bot"
    assert _pods(drained_fleet, "gpu-01") == ["train-0"]

    body = {"selector": "gpu-01", "reason": "end of life"}
    r = client.post(f"{V1}/retire", json=body, headers=auth("admin"))
    assert r.status_code == 200, r.text
    [out] = r.json()
    assert out["error"]["code"] == "drain_blocked" and "train-pdb" in out["error"]["message"]
    r = client.post(f"{V1}/retire", json=body | {"no_drain": True}, headers=auth("admin"))
    assert r.status_code == 200 and r.json()[0]["state"] == "retired", r.text
    [ev] = [e for e in list_events(lab_fleet, "gpu-01", kind="transition")
            if e["data"].get("to") == "retired"]
    assert ev["data"]["drain"] == SKIPPED
    r = client.post(f"{V1}/retire", json={"selector": "gpu-02", "reason": "old"},
                    headers=auth("admin"))  # no pod there: drained at once
    assert r.json()[0]["state"] == "retired", r.text
    [ev] = [e for e in list_events(lab_fleet, "gpu-02", kind="transition")
            if e["data"].get("to") == "retired"]
    assert ev["data"]["drain"]["ok"] is True and ev["data"]["drain"]["node"] == "gpu-02"


@pytest.mark.parametrize("fleet", ["postgres"], indirect=True)
def test_campaign_run_takes_no_drain(client: TestClient, lab_fleet: Fleet) -> None:
    """PostgreSQL: the queue the worker jobs go to is shared there (SQLite needs the
    server's in-process worker)."""
    empty_queue(lab_fleet)
    _campaign(lab_fleet, "c-nd", approval=False)
    r = client.post(f"{V1}/campaigns/c-nd/run", json={"no_drain": True, "drain_timeout_s": 60},
                    headers=auth("operator"))
    assert r.status_code == 202, r.text
    with lab_fleet.db.session() as s:
        options = campaign_row(s, "c-nd").options
    assert (options["no_drain"], options["drain_timeout_s"]) == (True, 60.0)
    [ev] = [e for e in list_events(lab_fleet, None, kind="campaign")
            if "no_drain" in e["data"]]
    assert ev["data"]["no_drain"] is True and ev["actor"] == "api:operator-bot"
    assert "no drain before each action" in ev["message"]
    empty_queue(lab_fleet)


def test_the_slurm_wait_is_a_bounded_field_of_maintenance_and_retire(
    client: TestClient, lab_fleet: Fleet
) -> None:
    """``drain_timeout_s`` (the Slurm drain's wait for running jobs) on ``maintenance/on``
    and ``retire``: out of 1 s..24 h it is a 422 naming the field, before anything is done;
    within, the action runs (no cluster here: nothing to drain)."""
    before = list_events(lab_fleet, "gpu-03", kind="transition")
    for path in ("maintenance/on", "retire"):
        for bad in (0, -5, 86401, "soon"):
            r = client.post(f"{V1}/{path}", headers=auth("admin"), json={
                "selector": "gpu-03", "reason": "r", "drain_timeout_s": bad})
            assert r.status_code == 422, (path, bad, r.text)
            assert "drain_timeout_s" in r.json()["error"]["message"], r.text
    assert list_events(lab_fleet, "gpu-03", kind="transition") == before
    r = client.post(f"{V1}/maintenance/on", headers=auth("admin"), json={
        "selector": "gpu-03", "reason": "fan", "drain_timeout_s": 60})
    assert r.status_code == 200 and r.json()[0]["state"] == "maintenance", r.text
    r = client.post(f"{V1}/retire", headers=auth("admin"), json={
        "selector": "gpu-04", "reason": "old", "drain_timeout_s": 3600})
    assert r.status_code == 200 and r.json()[0]["state"] == "retired", r.text
