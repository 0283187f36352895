"""Hosts whose node someone else cordoned are skipped by a campaign, not taken over (issue 14
Deliver 2): ``k8s sync`` (the official client against kmock, see tests/export/test_k8s_sync.py
for what kmock proves) records what it sees as ``external-hold`` events, on a change only;
``campaign create`` shows the skip and its reason; a cordon seen after the plan skips the
host when its wave comes; uncordoned by hand, the host takes part again. Both databases."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.export.conftest import slurm_lab_fleet
from tests.export.test_k8s_sync import Kmock, _lab, _node
from tests.export.test_slurm_lab import quarantine
from tests.slurmlab import SlurmLab

from gpufleet.collect.slurm import SlurmClient
from gpufleet.domain.campaign import ActionKind, HostStep
from gpufleet.inventory import load_inventory
from gpufleet.service.campaigns.campaign import CampaignSpec, create_campaign, run_campaign
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.exports.k8s import KubeNodes, k8s_sync
from gpufleet.service.exports.slurm import slurm_sync
from gpufleet.service.hosts.baselines import baseline_from_host, save_baseline
from gpufleet.service.hosts.enroll import enroll
from gpufleet.service.hosts.validate import validate
from gpufleet.service.views.hosts import list_events

pytestmark = pytest.mark.filterwarnings("ignore:read_binary is deprecated:DeprecationWarning")


@pytest.fixture
def cluster() -> Iterator[Kmock]:
    cordoned = _node("gpu-01", "8")
    cordoned["spec"] = {"unschedulable": True}  # kubectl cordon by a person
    km = Kmock([cordoned, _node("gpu-02", "8"), _node("gpu-03", "8")])
    yield km
    km.close()


def _spec(name: str, canary: int = 1) -> CampaignSpec:
    return CampaignSpec(name=name, target_baseline="b-new", selector="gpu-*",
                        action_kind=ActionKind.COMMAND, action="true", ticket="T-9",
                        canary=canary, waves="100%")


def _holds(fleet: Fleet) -> list[tuple[str, bool]]:
    return [(e["host"], e["data"]["held"])
            for e in reversed(list_events(fleet, kind="external-hold"))]


def test_hosts_cordoned_by_someone_else_are_skipped_not_taken_over(
    fleet: Fleet, cluster: Kmock, tmp_path: Path
) -> None:
    d = tmp_path / "lab"
    d.mkdir()
    _lab(fleet, d, {})
    enroll(fleet, load_inventory(d / "inventory.ini"))
    validate(fleet)
    save_baseline(fleet, baseline_from_host(fleet, "gpu-02", "b-new"))
    api = KubeNodes(cluster.kubeconfig(tmp_path / "kubeconfig"))

    k8s_sync(fleet, api=api)
    assert _holds(fleet) == [("gpu-01", True)]
    k8s_sync(fleet, api=api)
    assert _holds(fleet) == [("gpu-01", True)]  # recorded on a change only

    plan = create_campaign(fleet, _spec("p1"), dry_run=True)
    assert plan.skipped == [{"host": "gpu-01", "reason": "node gpu-01 cordoned in Kubernetes "
                             "by someone else: skipped, not taken over"}]
    assert sorted(h.host for w in plan.waves for h in w) == ["gpu-02", "gpu-03"]

    # a person's cordon after the plan skips the host when its wave comes (one wave, no
    # canary)
    v = create_campaign(fleet, _spec("c1", canary=0))
    later = v.waves[-1][-1].host
    api.patch_node(later, {"spec": {"unschedulable": True}})
    k8s_sync(fleet, api=api)
    assert _holds(fleet) == [("gpu-01", True), (later, True)]
    done = run_campaign(fleet, "c1")
    step = {h.host: (h.step, h.reason) for w in done.waves for h in w}
    assert step[later] == (HostStep.SKIPPED, f"node {later} cordoned in Kubernetes by "
                           "someone else when its wave came: skipped, not taken over")
    assert show_state(fleet, later) == "available"  # never put in maintenance

    # uncordoned by hand: seen at the next sync, the host takes part again
    api.patch_node("gpu-01", {"spec": {"unschedulable": False}})
    k8s_sync(fleet, api=api)
    assert _holds(fleet)[-1] == ("gpu-01", False)
    plan = create_campaign(fleet, _spec("p2"), dry_run=True)
    assert [k["host"] for k in plan.skipped] == [later]
    assert "gpu-01" in {h.host for w in plan.waves for h in w}


def show_state(fleet: Fleet, host: str) -> str:
    from gpufleet.service.views.hosts import show_host
    return str(show_host(fleet, host).view.state)


def test_hosts_drained_in_slurm_by_someone_else_are_skipped(
    fleet: Fleet, tmp_path: Path, slurm: SlurmLab
) -> None:
    """The same for a real Slurm (tests/slurmlab.py): an admin's drain is a hold, gpufleet's
    own drain (a quarantined host) is not; resumed by hand, the host takes part again."""
    slurm_lab_fleet(fleet, tmp_path / "lab")
    save_baseline(fleet, baseline_from_host(fleet, "gpu-01", "b-new"))
    client = SlurmClient(conf=slurm.conf)
    quarantine(fleet, "gpu-02", "Xid 79 on GPU 3")
    slurm.run("scontrol", "update", "nodename=gpu-03", "state=drain", "reason=admin: fan noise")

    slurm_sync(fleet, client, dry_run=True)
    assert _holds(fleet) == []  # a dry run records nothing
    assert slurm_sync(fleet, client).done == ["drain gpu-02"]
    slurm_sync(fleet, client)
    assert _holds(fleet) == [("gpu-03", True)]  # gpu-02's drain is gpufleet's own
    plan = create_campaign(fleet, _spec("s1"), dry_run=True)
    skipped = {k["host"]: k["reason"] for k in plan.skipped}
    assert skipped["gpu-03"] == ("node gpu-03 drained in Slurm by someone else (admin: fan "
                                 "noise): skipped, not taken over")
    assert skipped["gpu-02"].startswith("quarantined")
    assert [h.host for w in plan.waves for h in w] == ["gpu-01"]

    slurm.run("scontrol", "update", "nodename=gpu-03", "state=resume")
    slurm_sync(fleet, client)
    assert _holds(fleet) == [("gpu-03", True), ("gpu-03", False)]
    plan = create_campaign(fleet, _spec("s2"), dry_run=True)
    assert sorted(h.host for w in plan.waves for h in w) == ["gpu-01", "gpu-03"]
