"""Canary campaigns end to end on real sshd lab hosts, both databases: a playbook run by
ansible-runner (the gpufleet inventory, ``--limit`` of each wave) switches each host's
simulated driver (the lab's ``gpufleet-lab-switch`` rewrites what the fake nvidia-smi and
fabric manager answer); gpufleet re-collects over SSH and validates against the target
baseline.

Lab variants per host: ``old`` (the capture's driver), ``new`` (driver NEW, fabric manager
NEW); for a broken canary, ``new`` also loses a GPU (the lab's ``gpu-missing`` fault)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select
from tests.sshlab import SshLab
from tests.sshlab_fixtures import SshLabFactory

from gpufleet.domain.campaign import ActionKind, CampaignStatus, HostStep
from gpufleet.domain.spec import BaselineStatus
from gpufleet.inventory import load_inventory
from gpufleet.lab.fleet import LabFleet, apply_change, create_fleet, write_inventory
from gpufleet.lab.renderers import render_sections
from gpufleet.service.campaigns.campaign import (
    CampaignSpec,
    approve_campaign,
    create_campaign,
    run_campaign,
    show_campaign,
)
from gpufleet.service.core.fleet import Fleet, utcnow
from gpufleet.service.health.failures import failure_report, record_failure
from gpufleet.service.hosts.baselines import baseline_from_host, save_baseline, set_pool_baseline
from gpufleet.service.hosts.enroll import enroll
from gpufleet.service.hosts.validate import validate
from gpufleet.service.views.hosts import show_host
from gpufleet.store.tables import CampaignHost, Host

pytestmark = pytest.mark.sshlab

NEW = "570.86.15"
SWITCH = "gpufleet-lab-switch"

UPGRADE = """\
- name: Upgrade the GPU driver (lab - switch the simulated driver)
  hosts: all
  gather_facts: false
  tasks:
    - name: Install the target driver
      ansible.builtin.command: "gpufleet-lab-switch {{ lab_variant | default('new') }}"
      changed_when: true
"""
ROLLBACK = UPGRADE.replace("default('new')", "default('old')").replace("Upgrade", "Roll back")


def _setup(
    fleet: Fleet, sshlab_factory: SshLabFactory, tmp_path: Path, n: int
) -> tuple[SshLab, LabFleet]:
    """n lab hosts (h100-8x), enrolled, validated available on baseline b-old (pool's);
    baseline b-new pins driver and fabric manager NEW; each host can switch to old/new."""
    lf = create_fleet(n, models=["h100-8x"], faults={})
    lab = sshlab_factory()
    targets = {h.name: lab.add_host(h.name, render_sections(h)) for h in lf.hosts}
    for h in lf.hosts:
        changed = apply_change(lf, h.name, driver=NEW)
        lab.add_variant(h.name, "new", render_sections(changed.host(h.name)))
        lab.add_variant(h.name, "old", render_sections(h))
    lab.start()
    inv = write_inventory(lf, tmp_path / "hosts.ini", transport="ssh")
    text = inv.read_text()
    for name, t in targets.items():
        text = re.sub(
            rf"^{name} ",
            f"{name} ansible_host={t.address} ansible_port={t.port} ansible_user={t.user} "
            f"ansible_ssh_private_key_file={lab.client_key} "
            "ansible_python_interpreter=/usr/bin/python3 ",
            text,
            flags=re.M,
        )
    inv.write_text(text)
    enroll(fleet, load_inventory(inv))
    assert validate(fleet).ok
    old = baseline_from_host(fleet, lf.hosts[0].name, "b-old")
    save_baseline(fleet, old.model_copy(update={"status": BaselineStatus.VALIDATED}))
    save_baseline(fleet, old.model_copy(update={
        "name": "b-new", "driver": NEW, "fabric_manager": NEW,
        "status": BaselineStatus.VALIDATED}))
    pool = lf.hosts[0].spec.pool
    set_pool_baseline(fleet, pool, "b-old")
    assert validate(fleet).ok
    return lab, lf


def _spec(tmp_path: Path, name: str, **kw: object) -> CampaignSpec:
    up, down = tmp_path / "upgrade.yml", tmp_path / "rollback.yml"
    up.write_text(UPGRADE)
    down.write_text(ROLLBACK)
    args: dict[str, object] = {
        "name": name, "target_baseline": "b-new", "selector": "gpu-*",
        "action_kind": ActionKind.PLAYBOOK, "action": str(up), "ticket": "BUILD-123",
        "rollback": str(down), "canary": 1, "waves": "10%,25%,100%", "max_failures": 1,
        "forks": 20, "timeout_s": 300.0,
    }
    return CampaignSpec(**(args | kw))  # type: ignore[arg-type]


def _states(fleet: Fleet) -> dict[str, str]:
    with fleet.db.session() as s:
        return {h.name: str(h.state) for h in s.scalars(select(Host))}


def _driver(fleet: Fleet, name: str) -> str | None:
    return show_host(fleet, name).view.driver


def _switches(lab: SshLab, name: str) -> list[str]:
    return [c for c in lab.calls(name) if c.startswith(SWITCH)]


# 20 real sshd hosts and three ansible-runner waves: 64 s on SQLite and 74 s on PostgreSQL on
# the 2-core machine at load average 8. To keep the suite's time, it runs on PostgreSQL
# (production's store) only; the smaller campaigns below, the ticket-on-every-event check of
# tests/bmc/test_campaign_reimage.py and the kill -9 test run on both.
@pytest.mark.parametrize("fleet", ["postgres"], indirect=True)
def test_campaign_upgrades_twenty_hosts_canary_then_waves(
    fleet: Fleet, sshlab_factory: SshLabFactory, tmp_path: Path
) -> None:
    lab, lf = _setup(fleet, sshlab_factory, tmp_path, 20)
    plan = create_campaign(
        fleet, _spec(tmp_path, "drv570", waves="50%,100%", require_approval=True)
    )
    waves = plan.waves
    assert len(waves[0]) == 1 and plan.status == CampaignStatus.PLANNED
    assert sorted(h.host for w in waves for h in w) == sorted(h.name for h in lf.hosts)
    # Spread: no wave takes more than half of a rack (racks of the lab hold 8 hosts).
    rack = {h.name: h.rack for h in lf.hosts}
    for w in waves:
        for r in set(rack.values()):
            size = sum(1 for x in rack.values() if x == r)
            assert sum(1 for h in w if rack[h.host] == r) <= max(1, size // 2)
    assert not any(_switches(lab, h.name) for h in lf.hosts)  # the plan ran nothing

    lines: list[str] = []
    v = run_campaign(fleet, "drv570", lines.append)
    assert v.status == CampaignStatus.AWAITING_APPROVAL
    canary = waves[0][0].host
    assert [h.step for h in v.waves[0]] == [HostStep.DONE]
    assert all(h.step == HostStep.PENDING for w in v.waves[1:] for h in w)
    assert _driver(fleet, canary) == NEW and _states(fleet)[canary] == "available"

    fleet.actor = "alice"
    assert approve_campaign(fleet, "drv570").approved_by == "alice"
    v = run_campaign(fleet, "drv570", lines.append)
    assert v.status == CampaignStatus.COMPLETED, lines
    assert set(_states(fleet).values()) == {"available"}
    for h in lf.hosts:
        assert _driver(fleet, h.name) == NEW
        assert len(_switches(lab, h.name)) == 1  # the action ran once per host
        detail = show_host(fleet, h.name)
        changes = [e for e in detail.events if e["kind"] == "change-declared"]
        assert changes and changes[0]["data"]["ticket"] == "BUILD-123"
        assert "driver-upgrade by BUILD-123" in changes[0]["message"]
        maint = [e for e in detail.events if e["kind"] == "transition"
                 and e["data"]["event"] == "maintenance_on"]
        assert maint and "campaign drv570 (BUILD-123)" in maint[0]["data"]["reason"]
        # every change of the host from the campaign's maintenance on carries the ticket
        since = detail.events.index(maint[0])  # newest first
        untagged = [(e["kind"], e["message"]) for e in detail.events[:since + 1]
                    if e["kind"] in ("transition", "change-declared", "updated")
                    and e["data"].get("ticket") != "BUILD-123"]
        assert not untagged, (h.name, untagged)
    with fleet.db.session() as s:
        assert {h.vars.get("gpufleet_baseline") for h in s.scalars(select(Host))} == {"b-new"}
    # A later failure report names the change and its ticket.
    one = lf.hosts[3].name
    record_failure(fleet, job="j1", host=one, gpu=None, time=fleet.now().isoformat(),
                   message="NCCL WARN unhandled cuda error")
    group = next(g for g in failure_report(fleet, timedelta(days=7)).groups if g.host == one)
    assert any(e.startswith("change-declared") and "driver-upgrade by BUILD-123 (campaign "
               "drv570)" in e for e in group.evidence), group.evidence


def test_failed_canary_halts_before_wave_one_and_auto_rollback_restores_it(
    fleet: Fleet, sshlab_factory: SshLabFactory, tmp_path: Path
) -> None:
    lab, lf = _setup(fleet, sshlab_factory, tmp_path, 4)
    canary = create_campaign(fleet, _spec(tmp_path, "probe"), dry_run=True).waves[0][0].host
    lab2_broken = apply_change(lf, canary, driver=NEW, add_faults=["gpu-missing"])
    lab.add_variant(canary, "new", render_sections(lab2_broken.host(canary)))

    v = run_campaign(fleet, create_campaign(fleet, _spec(tmp_path, "c1")).name)
    assert v.status == CampaignStatus.HALTED and "canary failed" in (v.halt_reason or "")
    states = _states(fleet)
    assert states[canary] == "quarantined"
    others = [h.name for h in lf.hosts if h.name != canary]
    assert all(states[n] == "available" for n in others)
    assert not any(_switches(lab, n) for n in others)  # nothing else touched
    assert all(h.step == HostStep.PENDING for w in v.waves[1:] for h in w)

    # The same with --auto-rollback: the canary is rolled back and validated on b-old.
    with fleet.db.session() as s:  # an operator sends the canary back to a clean start
        h = s.scalar(select(Host).where(Host.name == canary))
        assert h is not None
        h.vars = {k: x for k, x in h.vars.items() if k != "gpufleet_baseline"}
    lab.set_sections(canary, render_sections(lf.host(canary)))
    from gpufleet.service.hosts import operations
    operations.unquarantine(fleet, canary, "test: reset")
    assert validate(fleet, canary).ok
    v = run_campaign(fleet, create_campaign(fleet, _spec(tmp_path, "c2",
                                                         auto_rollback=True)).name)
    assert v.status == CampaignStatus.HALTED
    assert [h.step for h in v.waves[0]] == [HostStep.ROLLED_BACK]
    states = _states(fleet)
    assert states[canary] == "available" and _driver(fleet, canary) != NEW
    with fleet.db.session() as s:
        h = s.scalar(select(Host).where(Host.name == canary))
        assert h is not None and "gpufleet_baseline" not in h.vars  # back on the pool's b-old
    assert all(states[n] == "available" for n in others)
    assert not any(_switches(lab, n) for n in others)
    events = show_host(fleet, canary).events
    assert any("rolled back by BUILD-123" in e["message"] for e in events)


def test_kill_during_a_wave_then_resume_finishes_without_running_an_action_twice(
    fleet: Fleet, sshlab_factory: SshLabFactory, tmp_path: Path
) -> None:
    fleet.clock = utcnow  # a second process takes part: one clock for both
    lab, lf = _setup(fleet, sshlab_factory, tmp_path, 6)
    create_campaign(fleet, _spec(tmp_path, "k1", waves="50%,100%", max_failures=0))
    url = fleet.settings.db_url()
    env = {**os.environ, "GPUFLEET_ACTOR": "ci"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpufleet.cli.main", "--home", str(fleet.home), "--db", url,
         "campaign", "run", "k1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True,
    )
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:  # wait until wave 1's action has started
            with fleet.db.session() as s:
                started = s.scalars(select(CampaignHost).where(
                    CampaignHost.wave == 1,
                    CampaignHost.step == HostStep.ACTION_STARTED)).all()
            if started:
                break
            assert proc.poll() is None, "the campaign ended before wave 1 started"
            time.sleep(0.05)
        else:
            pytest.fail("wave 1 never started")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the process and its ansible children
        proc.wait()
    assert show_campaign(fleet, "k1").status == CampaignStatus.RUNNING

    v = run_campaign(fleet, "k1")
    assert v.status == CampaignStatus.COMPLETED, v.as_json()
    states = _states(fleet)
    assert "maintenance" not in states.values()
    assert set(states.values()) == {"available"}
    for h in lf.hosts:
        assert _driver(fleet, h.name) == NEW
        assert len(_switches(lab, h.name)) == 1, (h.name, lab.calls(h.name))


def test_command_campaign_over_the_ssh_transport(
    fleet: Fleet, sshlab_factory: SshLabFactory, tmp_path: Path
) -> None:
    """``--command`` runs over gpufleet's own SSH transport; a non-zero exit fails the host
    (the canary here: the campaign halts, nothing else is touched)."""
    lab, lf = _setup(fleet, sshlab_factory, tmp_path, 3)
    bad = _spec(tmp_path, "cmd-bad", action_kind=ActionKind.COMMAND,
                action="gpufleet-lab-switch nosuchvariant", rollback=None)
    v = run_campaign(fleet, create_campaign(fleet, bad).name)
    assert v.status == CampaignStatus.HALTED
    canary = v.waves[0][0]
    assert canary.step == HostStep.FAILED and "command exited 2" in (canary.reason or "")
    assert set(_states(fleet).values()) == {"available"}  # validated again on b-old
    assert _driver(fleet, canary.host) != NEW

    good = _spec(tmp_path, "cmd-ok", action_kind=ActionKind.COMMAND,
                 action="gpufleet-lab-switch new", rollback=None, waves="100%")
    v = run_campaign(fleet, create_campaign(fleet, good).name)
    assert v.status == CampaignStatus.COMPLETED, v.as_json()
    assert set(_states(fleet).values()) == {"available"}
    for h in lf.hosts:
        assert _driver(fleet, h.name) == NEW
        assert _switches(lab, h.name)[-1] == f"{SWITCH} new"
