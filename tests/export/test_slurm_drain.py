"""Issue 26, item 3 (Slurm): drain before you touch. Maintenance drains the host's node in a
real Slurm (tests/slurmlab.py) and waits for the job running on it; a job that outlasts the
timeout refuses the maintenance with the job named, and the node is resumed; ``--no-drain``
goes ahead at once and says so on the event. SQLite and PostgreSQL."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select
from tests.export.conftest import slurm_lab_fleet
from tests.export.test_slurm_reservations import job, real_time, sbatch
from tests.slurmlab import SlurmLab

from gpufleet.collect.slurm import SlurmClient
from gpufleet.domain.campaign import ActionKind, HostStep
from gpufleet.domain.events import EventKind
from gpufleet.domain.states import HostState
from gpufleet.errors import Conflict
from gpufleet.service.campaigns.campaign import CampaignSpec, create_campaign, run_campaign
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.exports.slurm import slurm_sync
from gpufleet.service.exports.slurm_drain import maintenance_drained
from gpufleet.service.hosts.baselines import baseline_from_host, save_baseline
from gpufleet.store.repo import host_by_name
from gpufleet.store.tables import CampaignHost
from gpufleet.store.tables import Event as EventRow

pytestmark = pytest.mark.xdist_group("slurm")


@pytest.fixture
def lab_fleet(fleet: Fleet, tmp_path: Path, slurm: SlurmLab) -> Fleet:
    slurm_lab_fleet(fleet, tmp_path / "lab")
    real_time(fleet)
    return fleet


def events(fleet: Fleet, kind: EventKind, host: str) -> list[dict[str, object]]:
    with fleet.db.session() as s:
        h = host_by_name(s, host)
        return [dict(e.data) for e in s.scalars(select(EventRow).where(
            EventRow.kind == kind, EventRow.host_id == h.id).order_by(EventRow.id))]


def state(fleet: Fleet, host: str) -> HostState:
    with fleet.db.session() as s:
        return HostState(host_by_name(s, host).state)


def test_maintenance_drains_and_waits_for_the_running_job(
    lab_fleet: Fleet, slurm: SlurmLab
) -> None:
    fleet, client = lab_fleet, SlurmClient(conf=slurm.conf)
    running = sbatch(slurm, "-w", "gpu-01", "-t", "1", "--gres=gpu:h100:2", "--wrap", "sleep 4")
    job(slurm, running, ("RUNNING",))
    t0 = time.monotonic()
    outcomes, rep = maintenance_drained(fleet, "gpu-01", "swap a PSU", client=client,
                                        timeout=timedelta(seconds=60))
    took = time.monotonic() - t0
    assert [(o.host, o.state, o.error) for o in outcomes] == [("gpu-01", "maintenance", None)]
    d = rep.hosts[0]
    assert d.outcome == "drained" and d.waited_s >= 1.5 and took >= 1.5, (d, took)
    assert job(slurm, running, ("GONE",))  # it ended by itself: nothing was killed
    # the node stays drained with gpufleet's maintenance reason, which the sync keeps
    node = next(n for n in client.nodes() if n.name == "gpu-01")
    assert node.drained and (node.reason or "").startswith("gpufleet:maintenance ")
    assert [x.action.value for x in slurm_sync(fleet, client).decisions
            if x.node == "gpu-01"] == ["none"]
    drained = events(fleet, EventKind.SLURM_DRAIN, "gpu-01")
    assert [(e["outcome"], e["no_drain"]) for e in drained] == [("drained", False)]
    maint = events(fleet, EventKind.TRANSITION, "gpu-01")[-1]
    assert maint["drain"]["outcome"] == "drained"  # type: ignore[index]
    assert maint["drain"]["no_drain"] is False  # type: ignore[index]


def test_a_job_outlasting_the_timeout_refuses_maintenance_and_says_which(
    lab_fleet: Fleet, slurm: SlurmLab
) -> None:
    fleet, client = lab_fleet, SlurmClient(conf=slurm.conf)
    long = sbatch(slurm, "-w", "gpu-02", "-t", "5", "--wrap", "sleep 300")
    job(slurm, long, ("RUNNING",))
    outcomes, rep = maintenance_drained(fleet, "gpu-02", "reseat GPU", client=client,
                                        timeout=timedelta(seconds=2))
    assert not rep.ok and rep.hosts[0].outcome == "timed-out"
    assert rep.hosts[0].blocking and rep.hosts[0].blocking[0].startswith(f"job {long} (root")
    (o,) = outcomes
    assert isinstance(o.error, Conflict) and f"job {long}" in str(o.error)
    assert state(fleet, "gpu-02") is HostState.AVAILABLE  # the action did not happen
    assert not next(n for n in client.nodes() if n.name == "gpu-02").drained  # resumed
    assert job(slurm, long, ("RUNNING",))  # and the job was left alone
    (e,) = events(fleet, EventKind.SLURM_DRAIN, "gpu-02")
    assert e["outcome"] == "timed-out" and f"job {long}" in str(e["blocking"])


def test_no_drain_goes_ahead_at_once_and_is_recorded(lab_fleet: Fleet, slurm: SlurmLab) -> None:
    fleet, client = lab_fleet, SlurmClient(conf=slurm.conf)
    long = sbatch(slurm, "-w", "gpu-03", "-t", "5", "--wrap", "sleep 300")
    job(slurm, long, ("RUNNING",))
    outcomes, rep = maintenance_drained(fleet, "gpu-03", "urgent firmware", client=client,
                                        no_drain=True)
    assert [(o.host, o.state) for o in outcomes] == [("gpu-03", "maintenance")]
    assert rep.hosts[0].outcome == "skipped"
    assert not next(n for n in client.nodes() if n.name == "gpu-03").drained
    (e,) = events(fleet, EventKind.SLURM_DRAIN, "gpu-03")
    assert e["no_drain"] is True and e["outcome"] == "skipped"
    maint = events(fleet, EventKind.TRANSITION, "gpu-03")[-1]
    assert maint["drain"]["no_drain"] is True  # type: ignore[index]


def test_campaign_action_waits_for_the_drain_and_a_blocked_host_fails_unacted(
    lab_fleet: Fleet, slurm: SlurmLab, monkeypatch: pytest.MonkeyPatch
) -> None:
    fleet = lab_fleet
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))  # Slurm's own configuration variable
    fleet.settings = fleet.settings.model_copy(update={"sync_targets": "slurm"})
    save_baseline(fleet, baseline_from_host(fleet, "gpu-01", "b-new"))
    long = sbatch(slurm, "-w", "gpu-01", "-t", "5", "--wrap", "sleep 300")
    job(slurm, long, ("RUNNING",))
    create_campaign(fleet, CampaignSpec(
        name="fw1", target_baseline="b-new", selector="gpu-01", action_kind=ActionKind.COMMAND,
        action="true", ticket="T-26", canary=0, waves="100%"))
    done = run_campaign(fleet, "fw1", drain_timeout=timedelta(seconds=2))
    (h,) = [h for w in done.waves for h in w if h.host == "gpu-01"]
    assert h.step == HostStep.FAILED and h.reason is not None
    assert h.reason.startswith("not drained: gpu-01: still running after ")
    assert f"job {long} (root, running" in h.reason
    with fleet.db.session() as s:
        row = s.scalar(select(CampaignHost).where(CampaignHost.host_name == "gpu-01"))
        assert row is not None and row.action_runs == 0  # the action never ran
    assert not next(n for n in SlurmClient(conf=slurm.conf).nodes()
                    if n.name == "gpu-01").drained  # resumed
    (e,) = events(fleet, EventKind.SLURM_DRAIN, "gpu-01")
    assert e["purpose"] == "campaign" and e["outcome"] == "timed-out"


@pytest.mark.filterwarnings("ignore:read_binary is deprecated:DeprecationWarning")  # kmock
def test_retire_waits_for_the_job_auto_remediation_refused_while_one_runs(
    lab_fleet: Fleet, slurm: SlurmLab, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Drain before you touch beyond maintenance: ``retire`` drains the node and waits for
    its job; the remediation a health rule runs by itself waits as long as for pods
    (GPUFLEET_KUBE_DRAIN_TIMEOUT), then is refused naming the job, the node resumed; a node
    drained for an action the pods' budget then refuses (kmock) is resumed too."""
    from gpufleet.errors import DrainBlocked
    from gpufleet.service.health import remediation
    from gpufleet.service.hosts import gpu_health, operations

    fleet = lab_fleet
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))  # Slurm's own configuration variable
    fleet.settings = fleet.settings.model_copy(
        update={"sync_targets": "slurm", "k8s_drain_timeout_s": 2.0})
    short = sbatch(slurm, "-w", "gpu-01", "-t", "1", "--wrap", "sleep 3")
    job(slurm, short, ("RUNNING",))
    assert operations.retire(fleet, "gpu-01", "end of life",
                             drain_timeout=timedelta(seconds=60)) == "retired"
    assert job(slurm, short, ("GONE",))  # it ended by itself before the retire
    (d,) = events(fleet, EventKind.SLURM_DRAIN, "gpu-01")
    assert d["purpose"] == "retire" and d["outcome"] == "drained"
    retired = events(fleet, EventKind.TRANSITION, "gpu-01")[-1]
    assert retired["to"] == "retired"
    assert retired["drain"]["slurm"]["outcome"] == "drained"  # type: ignore[index]

    with fleet.db.session() as s:
        pool = host_by_name(s, "gpu-02").pool
    gpu_health.set_pool_health_policy(fleet, pool, auto_remediate=["xid-79"])
    long = sbatch(slurm, "-w", "gpu-02", "-t", "5", "--wrap", "sleep 300")
    job(slurm, long, ("RUNNING",))
    with pytest.raises(DrainBlocked, match=f"job {long} \\(root, running"):
        remediation.auto_remediate(fleet, "gpu-02", "xid-79")
    assert events(fleet, EventKind.REMEDIATION, "gpu-02") == []  # the reset never ran
    (e,) = events(fleet, EventKind.SLURM_DRAIN, "gpu-02")
    assert e["purpose"] == "remediation" and e["outcome"] == "timed-out"
    assert not next(n for n in SlurmClient(conf=slurm.conf).nodes()
                    if n.name == "gpu-02").drained  # resumed
    assert job(slurm, long, ("RUNNING",))  # and the job was left alone

    # Slurm drained, then the pods' budget blocks: the node is resumed, nothing retired
    from tests.export.kmock_eviction import serve_evictions
    from tests.export.test_k8s_drain import _node, train_under_budget
    from tests.export.test_k8s_sync import Kmock

    from gpufleet.service.hosts.drain import KubeDrain

    km = Kmock([_node("gpu-03")], setup=serve_evictions)
    try:
        kubeconfig = km.kubeconfig(tmp_path / "kubeconfig")
        train_under_budget(KubeDrain(kubeconfig), "gpu-03")
        fleet.settings = fleet.settings.model_copy(
            update={"k8s_kubeconfig": kubeconfig, "k8s_drain_timeout_s": 0.5})
        with pytest.raises(DrainBlocked, match="train-pdb"):
            operations.retire(fleet, "gpu-03", "end of life")
    finally:
        km.close()
    assert state(fleet, "gpu-03") is HostState.AVAILABLE
    assert not next(n for n in SlurmClient(conf=slurm.conf).nodes()
                    if n.name == "gpu-03").drained  # resumed: the retire did not happen
    (e,) = events(fleet, EventKind.SLURM_DRAIN, "gpu-03")
    assert e["purpose"] == "retire" and e["outcome"] == "drained"
