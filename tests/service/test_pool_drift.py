"""Issue 26, drift at pool level, on SQLite and PostgreSQL: a campaign moved 5 of 6 hosts of
a pool to a new driver (simulated: a campaign cannot run on the lab, so the lab's
``driver-drift`` fault and the hosts' ``gpufleet_baseline`` stand for what it leaves behind,
tests/migrated.py); ``drift`` compares each host with its own baseline *and* its pool's, and
shows the half-migrated pool; completing the campaign proposes or (``--advance-baseline``)
makes the target the pool's baseline, decided in ``campaign_run.Runner.finish_pools``."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select
from tests.labproof import prove_lab
from tests.migrated import migrate

from gpufleet.cli.drift import print_drift
from gpufleet.domain.campaign import ActionKind, CampaignStatus, HostStep
from gpufleet.lab.demo import enroll_lab
from gpufleet.service.campaigns.campaign import CampaignSpec, create_campaign, run_campaign
from gpufleet.service.campaigns.campaign_run import Runner
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.baselines import drift, list_pools
from gpufleet.service.hosts.validate import validate
from gpufleet.store.repo import host_by_name
from gpufleet.store.tables import CampaignHost, CampaignRow

NEW = "580.95.05"
MOVED = [f"gpu-0{i}" for i in range(2, 7)]


def half_migrated(fleet: Fleet, tmp_path: Path) -> str:
    """Six validated H100 hosts of one pool on baseline ``<pool>-ref`` (driver 590.48.01);
    gpu-02..06 moved to driver ``NEW`` and the baseline ``b-new``. Returns the pool."""
    fl = enroll_lab(fleet, tmp_path / "lab", 6, models=["h100-8x"],
                    faults={h: [f"driver-drift:{NEW}"] for h in MOVED})
    prove_lab(fleet, fl, tmp_path)
    migrate(fleet, MOVED, "b-new", reference="gpu-02")
    report = validate(fleet)
    assert all(v.state == "available" for v in report.verdicts), report.verdicts
    (pool,) = {p.name for p in list_pools(fleet)}
    return pool


def test_a_half_migrated_pool_shows_in_drift(fleet: Fleet, tmp_path: Path) -> None:
    pool = half_migrated(fleet, tmp_path)
    rep = drift(fleet)
    assert rep.by_host == {}  # each host matches the baseline it follows: main said "no drift"
    (p,) = rep.pools
    assert p.pool == pool and p.baseline == f"{pool}-ref" and p.drifts
    assert p.matching == ["gpu-01"] and p.on_other == {"b-new": MOVED}
    driver = next(f for f in p.fields if f.field == "driver")
    assert driver.expected == "590.48.01" and driver.matching == 1
    assert driver.others == {NEW: MOVED}
    assert "1 of 6 hosts match it; 5 follow b-new" in p.describe()
    assert f"driver 590.48.01 (baseline) on 1 host, {NEW} on 5" in p.describe()
    assert print_drift(rep, as_json=True) == 1  # exit 1: the pool drifts
    # one host: compared with its own baseline and the pool's
    one = drift(fleet, "gpu-03")
    assert one.pools[0].hosts == ["gpu-03"] and one.pools[0].on_other == {"b-new": ["gpu-03"]}


def _completed_campaign(fleet: Fleet, pool: str, *, advance: bool) -> list[str]:
    """A campaign to ``b-new`` over the pool whose run ended with gpu-02..06 ``done`` and
    gpu-01 rolled back: the rows a run leaves (the lab cannot run the action); the lines
    its completion printed."""
    create_campaign(fleet, CampaignSpec(
        name="c1", target_baseline="b-new", selector=f"pool:{pool}",
        action_kind=ActionKind.COMMAND, action="true", ticket="CHG-26", canary=1,
        waves="100%", advance_baseline=advance, pool_floor="0%", max_rack_share="100%",
    ))
    with fleet.db.session() as s:
        camp = s.scalar(select(CampaignRow).where(CampaignRow.name == "c1"))
        assert camp is not None
        camp.status = CampaignStatus.COMPLETED
        for row in s.scalars(select(CampaignHost).where(CampaignHost.campaign_id == camp.id)):
            row.step = HostStep.ROLLED_BACK if row.host_name == "gpu-01" else HostStep.DONE
    lines: list[str] = []
    Runner(fleet, "c1", lines.append).finish_pools()
    return lines


def test_completion_proposes_the_pool_baseline(fleet: Fleet, tmp_path: Path) -> None:
    pool = half_migrated(fleet, tmp_path)
    assert _completed_campaign(fleet, pool, advance=False) == [
        f"pool {pool} is still on baseline {pool}-ref: to make b-new its baseline: "
        f"gpufleet pool baseline {pool} b-new"
    ]
    assert {p.name: p.baseline for p in list_pools(fleet)} == {pool: f"{pool}-ref"}


def test_advance_baseline_moves_the_pool_and_keeps_the_unmoved_host(
    fleet: Fleet, tmp_path: Path
) -> None:
    pool = half_migrated(fleet, tmp_path)
    assert _completed_campaign(fleet, pool, advance=True) == [
        f"pool {pool}: baseline {pool}-ref -> b-new (--advance-baseline); kept on "
        f"{pool}-ref: gpu-01"
    ]
    assert {p.name: p.baseline for p in list_pools(fleet)} == {pool: "b-new"}
    with fleet.db.session() as s:
        assert host_by_name(s, "gpu-01").vars["gpufleet_baseline"] == f"{pool}-ref"
    rep = drift(fleet)
    (p,) = rep.pools
    assert rep.by_host == {} and p.baseline == "b-new"
    assert p.matching == MOVED and p.on_other == {f"{pool}-ref": ["gpu-01"]}
    # validation still passes on every host: none is judged on a driver it never got
    assert all(v.state == "available" for v in validate(fleet).verdicts)


def test_run_records_advance_baseline_on_the_campaign(fleet: Fleet, tmp_path: Path) -> None:
    """``campaign run --advance-baseline`` is kept on the campaign (a later resume, or the
    worker job, advances the pool too) even when the run itself halts, as on the lab."""
    pool = half_migrated(fleet, tmp_path)
    create_campaign(fleet, CampaignSpec(
        name="c2", target_baseline="b-new", selector="gpu-01", action_kind=ActionKind.COMMAND,
        action="true", ticket="CHG-27", pool_floor="0%", max_rack_share="100%",
    ))
    with fleet.db.session() as s:
        camp = s.scalar(select(CampaignRow).where(CampaignRow.name == "c2"))
        assert camp is not None and camp.options["advance_baseline"] is False
    run_campaign(fleet, "c2", advance_baseline=True)
    with fleet.db.session() as s:
        camp = s.scalar(select(CampaignRow).where(CampaignRow.name == "c2"))
        assert camp is not None and camp.options["advance_baseline"] is True
    assert {p.name: p.baseline for p in list_pools(fleet)} == {pool: f"{pool}-ref"}
