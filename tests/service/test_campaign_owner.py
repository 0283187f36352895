"""Who may drive a campaign (both databases, simulated lab hosts): a runner on another
machine that went silent less than 15 minutes ago still holds it (Conflict), except against a
later attempt of the same worker job, which takes over at once (the queue runs an attempt
again only when the one before died or failed)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.service.test_allocation import lab

from gpufleet.domain.campaign import ActionKind, CampaignStatus
from gpufleet.errors import Conflict
from gpufleet.service.campaigns.campaign import CampaignSpec, create_campaign, run_campaign
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.baselines import baseline_from_host, save_baseline
from gpufleet.service.views.hosts import list_events
from gpufleet.store.tables import CampaignRow


def test_a_later_attempt_of_the_same_job_takes_over_a_silent_remote_runner(
    fleet: Fleet, tmp_path: Path
) -> None:
    lab(fleet, tmp_path, 3)
    save_baseline(fleet, baseline_from_host(fleet, "gpu-01", "b-new"))
    create_campaign(fleet, CampaignSpec(
        name="c1", target_baseline="b-new", selector="gpu-*", action_kind=ActionKind.COMMAND,
        action="false", ticket="T-1", waves="100%"))
    with fleet.db.session() as s:  # as a worker job on another machine left it, just now
        camp = s.query(CampaignRow).one()
        camp.status = CampaignStatus.RUNNING
        camp.owner = "job7@worker-b.example:4242"
        camp.updated_at = fleet.now()
    with pytest.raises(Conflict, match=r"job7@worker-b\.example:4242"):
        run_campaign(fleet, "c1")  # a person's `campaign resume`: still held
    with pytest.raises(Conflict):
        run_campaign(fleet, "c1", job=8)  # another job
    v = run_campaign(fleet, "c1", job=7)  # the same job, attempt 2
    # it drove the campaign (the command fails on the lab hosts: halted)
    assert v.status == CampaignStatus.HALTED and "canary failed" in (v.halt_reason or "")
    resumed = [e for e in list_events(fleet, kind="campaign") if "resumed" in e["message"]]
    assert len(resumed) == 1 and resumed[0]["data"]["from"] == "running"
    with fleet.db.session() as s:
        assert s.query(CampaignRow).one().owner.startswith("job7@")
