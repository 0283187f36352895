"""``/api/v1/campaigns`` through the real ASGI app on both databases: the same shape as
``campaign status --json`` (one schema), roles (viewer reads, operator drives, admin
approves), unknown campaigns answer 404 with the one error shape."""

from __future__ import annotations

from fastapi.testclient import TestClient

from gpufleet.api.schemas_runs import CampaignOut
from gpufleet.domain.campaign import ActionKind
from gpufleet.domain.spec import BaselineStatus
from gpufleet.service.campaigns.campaign import CampaignSpec, create_campaign, show_campaign
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.baselines import baseline_from_host, save_baseline
from tests.api.conftest import auth

V1 = "/api/v1"


def _campaign(fleet: Fleet, name: str, *, approval: bool = True) -> None:
    old = baseline_from_host(fleet, "gpu-01", "b-old")
    save_baseline(fleet, old.model_copy(update={"status": BaselineStatus.VALIDATED}))
    save_baseline(fleet, old.model_copy(update={
        "name": "b-new", "driver": "570.86.15", "status": BaselineStatus.VALIDATED}))
    create_campaign(fleet, CampaignSpec(
        name=name, target_baseline="b-new", selector="gpu-*", action_kind=ActionKind.COMMAND,
        action="true", ticket="BUILD-9", require_approval=approval, waves="50%,100%"))


def test_campaigns_read_by_viewers_in_the_cli_json_shape(
    client: TestClient, lab_fleet: Fleet
) -> None:
    assert client.get(f"{V1}/campaigns", headers=auth("viewer")).json() == []
    _campaign(lab_fleet, "c1")
    listed = client.get(f"{V1}/campaigns", headers=auth("viewer"))
    assert listed.status_code == 200 and [c["name"] for c in listed.json()] == ["c1"]
    one = client.get(f"{V1}/campaigns/c1", headers=auth("viewer"))
    assert one.status_code == 200
    cli_json = show_campaign(lab_fleet, "c1").as_json()  # what `campaign status --json` prints
    assert one.json() == cli_json == CampaignOut.of(show_campaign(lab_fleet, "c1")).json_dict()
    body = one.json()
    assert body["status"] == "planned" and body["ticket"] == "BUILD-9"
    assert body["waves"][0]["canary"] and len(body["waves"][0]["hosts"]) == 1
    assert sum(len(w["hosts"]) for w in body["waves"]) == 6

    missing = client.get(f"{V1}/campaigns/nope", headers=auth("viewer"))
    assert missing.status_code == 404
    err = missing.json()["error"]
    assert err["code"] == "not_found" and "nope" in err["message"]
    assert set(err) == {"code", "message", "retryable"}
    for verb in ("approve", "pause", "abort", "run", "resume"):
        r = client.post(f"{V1}/campaigns/nope/{verb}", headers=auth("admin"))
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found", verb
    assert client.get(f"{V1}/campaigns").status_code == 401


def test_roles_approve_pause_abort(client: TestClient, lab_fleet: Fleet) -> None:
    _campaign(lab_fleet, "c2")
    for verb in ("approve", "pause", "abort", "run", "resume"):
        r = client.post(f"{V1}/campaigns/c2/{verb}", headers=auth("viewer"))
        assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden", verb
    r = client.post(f"{V1}/campaigns/c2/approve", headers=auth("operator"))
    assert r.status_code == 403  # the production go-ahead is an admin's
    assert show_campaign(lab_fleet, "c2").approved_by is None

    r = client.post(f"{V1}/campaigns/c2/approve", headers=auth("admin"))
    assert r.status_code == 200, r.text
    assert r.json()["approved_by"] == "api:admin-bot"
    assert show_campaign(lab_fleet, "c2").approved_by == "api:admin-bot"

    r = client.post(f"{V1}/campaigns/c2/pause", headers=auth("operator"))
    assert r.status_code == 200 and r.json()["status"] == "paused"
    r = client.post(f"{V1}/campaigns/c2/abort", headers=auth("operator"))
    assert r.status_code == 200 and r.json()["status"] == "aborted"
    r = client.post(f"{V1}/campaigns/c2/run", headers=auth("operator"))
    assert r.status_code == 409 and r.json()["error"]["code"] == "invalid_transition"
    r = client.post(f"{V1}/campaigns/c2/abort", headers=auth("admin"))
    assert r.status_code == 409
    # every mutating call is audited under the token's name
    events = client.get(f"{V1}/events", params={"kind": "campaign"}, headers=auth("viewer"))
    assert events.status_code == 200, events.text
    msgs = [e["message"] for e in events.json()]
    assert any("approved by api:admin-bot" in m for m in msgs), msgs
