"""Reclaim cannot be bypassed (issue 24, item 6), on real sshd lab hosts, both databases.

A lessee (alice) leaves a crontab and an NFS mount under /data behind; the reclaim that runs
at release quarantines the host (``reclaim_failed``). On 84be469 ``unquarantine`` +
``validate`` then put the host back to ``available`` with both leftovers still on it. Now the
host returns only through a reclaim that passes (``gpufleet reclaim HOST`` re-runs the checks
from quarantined or validating), or with ``unquarantine --force --reason``, recorded as a
``reclaim-waived`` event; every other way out (a declared change, maintenance) ends in
``validating``, held with the reason, never ``available``.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from tests.api.conftest import TOKENS, auth, write_tokens
from tests.sshlab_fixtures import SshLabFactory

from gpufleet.api.app import create_app
from gpufleet.api.auth import TokenStore
from gpufleet.domain.changes import DeclaredChangeKind
from gpufleet.domain.events import EventKind
from gpufleet.domain.health import Fault
from gpufleet.domain.placement import Request
from gpufleet.domain.states import Event
from gpufleet.errors import InvalidTransition
from gpufleet.inventory import load_inventory
from gpufleet.lab.fleet import LabHost, create_fleet
from gpufleet.lab.hostfiles import render_reclaim_sections
from gpufleet.lab.renderers import render_sections
from gpufleet.service.allocation.allocation import allocate
from gpufleet.service.allocation.leases import release
from gpufleet.service.allocation.reclaim import reclaim_selected
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.core.lifecycle import transition
from gpufleet.service.hosts import operations
from gpufleet.service.hosts.enroll import enroll
from gpufleet.service.hosts.validate import validate
from gpufleet.service.views.hosts import list_events
from gpufleet.store.repo import host_by_name
from gpufleet.store.tables import Event as EventRow
from gpufleet.store.tables import Host
from gpufleet.web.app import attach

pytestmark = pytest.mark.sshlab

LEFTOVERS = ["lessee-crontab", "stale-mount"]


def _answers(h: LabHost, faults: list[str] | None = None) -> dict[str, object]:
    h = h.model_copy(update={"faults": faults or []})
    return {**render_sections(h), **render_reclaim_sections(h)}


def _host(fleet: Fleet, name: str) -> Host:
    with fleet.db.session() as s:
        h = host_by_name(s, name)
        s.expunge(h)
        return h


def _lease_and_release(fleet: Fleet, name: str) -> str:
    got = allocate(
        fleet,
        Request(hosts=1),
        owner="team-a",
        purpose="finetune",
        duration=timedelta(hours=24),
        selector=name,
        users=["alice"],
    )
    assert got.lease is not None
    out = release(fleet, got.lease.id)
    (r,) = out.reclaim.hosts  # type: ignore[attr-defined]
    return str(r.state)


def test_a_host_that_failed_reclaim_returns_only_through_a_passing_reclaim_or_force(
    fleet: Fleet, sshlab_factory: SshLabFactory, tmp_path: Path
) -> None:
    lf = create_fleet(4, models=["a100-8x"], faults={})
    lab = sshlab_factory()
    targets = {h.name: lab.add_host(h.name, _answers(h)) for h in lf.hosts}  # type: ignore[arg-type]
    lab.start()
    lines = ["[gpu]"] + [
        f"{n} ansible_host={t.address} ansible_port={t.port} ansible_user={t.user}"
        for n, t in targets.items()
    ]
    lines += ["", "[gpu:vars]", f"ansible_ssh_private_key_file={lab.client_key}"]
    lines += ["gpufleet_gpu_count=8"]
    (tmp_path / "hosts.ini").write_text("\n".join(lines) + "\n")
    enroll(fleet, load_inventory(tmp_path / "hosts.ini"))
    assert {v.state for v in validate(fleet).verdicts} == {"available"}
    rerun, forced, maint, _spare = lf.hosts

    # While leased, alice left a crontab and an NFS mount on the first three hosts.
    for h in (rerun, forced):
        lab.set_sections(h.name, _answers(h, LEFTOVERS))  # type: ignore[arg-type]
        assert _lease_and_release(fleet, h.name) == "quarantined"
        got = _host(fleet, h.name)
        assert got.fault is Fault.RECLAIM_FAILED
        assert got.reclaim_due is not None and "crontabs left: alice" in got.reclaim_due
        assert "/data/team-a" in got.reclaim_due

    # 1. The bypass of 84be469: unquarantine is refused (exit 5), the way back named.
    with pytest.raises(InvalidTransition) as exc:
        operations.unquarantine(fleet, rerun.name, "looked fine to me")
    msg = str(exc.value)
    assert exc.value.exit_code == 5
    assert f"host {rerun.name} owes a passing reclaim" in msg
    assert "crontabs left: alice" in msg
    assert f"gpufleet reclaim {rerun.name}" in msg and "--force --reason" in msg
    assert _host(fleet, rerun.name).state.value == "quarantined"

    # ... nor does a declared change + validate reach available: held in validating.
    operations.record_change(fleet, rerun.name, DeclaredChangeKind.REIMAGE, "T-1")
    (v,) = validate(fleet, rerun.name).verdicts
    assert v.state == "validating" and v.profiles == []
    assert any("owes a passing reclaim" in r for r in v.reasons), v.reasons
    assert _host(fleet, rerun.name).state.value == "validating"

    # The host page (dashboard and API) says what it owes and how it comes back.
    app = create_app(fleet, TokenStore(write_tokens(tmp_path / "tokens.yaml")))
    attach(app, fleet, app.state.ctx.tokens)
    with TestClient(app) as web:
        got_api = web.get(f"/api/v1/hosts/{rerun.name}", headers=auth("viewer")).json()
        assert "crontabs left: alice" in got_api["reclaim_due"]
        web.post("/login", data={"token": TOKENS["viewer"]}, follow_redirects=False)
        page = web.get(f"/hosts/{rerun.name}").text
        assert "Owes a passing reclaim: reclaim failed: " in page
        assert f"gpufleet reclaim {rerun.name}" in page

    # 2. `gpufleet reclaim HOST` re-runs the checks from validating: leftovers still there.
    (r,) = reclaim_selected(fleet, rerun.name).hosts
    assert r.state == "quarantined" and not r.ok
    assert "lessee_crontabs: crontabs left: alice" in r.issues
    assert any("left under /data" in i for i in r.issues)
    assert _host(fleet, rerun.name).reclaim_due is not None
    # Alice's crontab and mount are gone: the re-run from quarantined passes.
    lab.set_sections(rerun.name, _answers(rerun))  # type: ignore[arg-type]
    (r,) = reclaim_selected(fleet, rerun.name).hosts
    assert r.state == "available" and r.ok, r.summary
    got = _host(fleet, rerun.name)
    assert got.reclaim_due is None and got.fault is None and got.profiles

    # 3. The operator's override: recorded, with the actor, the reason and the findings.
    before = _host(fleet, forced.name).reclaim_due
    assert (
        operations.unquarantine(
            fleet, forced.name, "leftovers removed by hand, ticket OPS-7", force=True
        )
        == "validating"
    )
    assert _host(fleet, forced.name).reclaim_due is None
    with fleet.db.session() as s:
        hid = host_by_name(s, forced.name).id
        waived = s.scalars(
            select(EventRow).where(
                EventRow.host_id == hid, EventRow.kind == EventKind.RECLAIM_WAIVED
            )
        ).all()
    assert len(waived) == 1
    assert waived[0].actor == fleet.actor
    why = "leftovers removed by hand, ticket OPS-7"
    assert waived[0].data == {"reclaim_due": before, "reason": why}
    assert "leftovers removed by hand" in waived[0].message
    (v,) = validate(fleet, forced.name).verdicts
    assert v.state == "available", v.reasons
    (ev,) = list_events(fleet, forced.name, kind="reclaim-waived")  # `gpufleet events`
    assert ev["actor"] == fleet.actor and "reclaim waived by" in ev["message"]

    # 4. A release the reclaim never judged (a crash), then maintenance on/off: held too.
    with fleet.db.session() as s:
        h = host_by_name(s, maint.name, for_update=True)
        transition(s, fleet, h, Event.ALLOCATE, "test lease")
        transition(s, fleet, h, Event.RELEASE, "test lease released")
    assert _host(fleet, maint.name).reclaim_due == "released: test lease released"
    operations.maintenance_on(fleet, maint.name, "crash: the reclaim never ran")
    operations.maintenance_off(fleet, maint.name, "done")
    (v,) = validate(fleet, maint.name).verdicts
    assert v.state == "validating" and any("owes a passing reclaim" in r for r in v.reasons)
    (r,) = reclaim_selected(fleet, maint.name).hosts
    assert r.state == "available" and r.ok, r.summary

    # Every refusal and override is in the host's history; nothing else moved.
    with fleet.db.session() as s:
        states = {h.name: h.state.value for h in s.scalars(select(Host))}
    assert states == dict.fromkeys(targets, "available")
