"""Issue 30: results stored a group at a time, one transaction with a savepoint per host.

A host whose store fails half-way (after its snapshot was written) is rolled back alone: its
exception is its entry, it keeps its claim and no snapshot, collection result nor event of
it stays; the other hosts of the group are stored. Within one group a host sees what an
earlier host of the group stored: the same machine under a second name is flagged on the
very first collection, as one transaction per host flagged it. On both databases.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import cast

from sqlalchemy import func, select

from gpufleet.collect.bundle import render_bundle
from gpufleet.collect.transport import Outcome, RawResult
from gpufleet.domain.events import AlarmKind
from gpufleet.domain.states import HostState
from gpufleet.lab.demo import enroll_lab
from gpufleet.lab.renderers import render_sections
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.core.policies import Policies
from gpufleet.service.hosts.collect import HostResult, apply_results, claim
from gpufleet.store.tables import Alarm, CollectionResult, FactSnapshot, Host


class _BrokenPolicies:
    """Policies whose profiles cannot be read: judging an ``available`` host fails, after
    its facts were stored (an injected dependency, not a patch)."""

    @property
    def profiles(self) -> object:
        raise RuntimeError("profiles unreadable")


def _bundles(fleet: Fleet, tmp_path: Path, n: int) -> list[str]:
    lab = enroll_lab(fleet, tmp_path / "lab", n, models=["a100-8x"] * n, faults={})
    return [render_bundle(list(render_sections(h).values())) for h in lab.hosts]


def _claim_all(fleet: Fleet) -> tuple[int, dict[str, tuple[int, str]]]:
    run_id, held, busy = claim(fleet, None, None, timedelta(minutes=5))
    assert not busy
    return run_id, {c.target.name: (c.host_id, c.token) for c in held}


def test_a_failing_host_spoils_nothing_of_its_group(fleet: Fleet, tmp_path: Path) -> None:
    bundles = _bundles(fleet, tmp_path, 3)
    run_id, held = _claim_all(fleet)
    with fleet.db.session() as s:  # only an available host is judged (and fails)
        s.get_one(Host, held["gpu-02"][0]).state = HostState.AVAILABLE
    group = [
        (held[name][0], RawResult(name, Outcome.OK, "", output=bundle), held[name][1])
        for name, bundle in zip(("gpu-01", "gpu-02", "gpu-03"), bundles, strict=True)
    ]
    out = apply_results(fleet, run_id, group, policies=cast(Policies, _BrokenPolicies()))
    assert isinstance(out[1], RuntimeError) and "profiles unreadable" in str(out[1])
    for res in (out[0], out[2]):
        assert isinstance(res, HostResult) and res.outcome is Outcome.OK and res.gpus == 8
        assert res.snapshot_id is not None
    with fleet.db.session() as s:
        hosts = {h.name: h for h in s.scalars(select(Host))}
        assert hosts["gpu-02"].latest_snapshot_id is None
        assert hosts["gpu-02"].claim_token == held["gpu-02"][1]  # released by the run
        assert hosts["gpu-02"].last_outcome is None
        for name in ("gpu-01", "gpu-03"):
            assert hosts[name].latest_snapshot_id is not None
            assert hosts[name].claim_token is None
        snaps = s.scalars(select(FactSnapshot.host_id)).all()
        assert sorted(snaps) == sorted([hosts["gpu-01"].id, hosts["gpu-03"].id])
        results = s.scalar(select(func.count()).select_from(CollectionResult))
        assert results == 2


def test_a_host_sees_what_an_earlier_host_of_its_group_stored(
    fleet: Fleet, tmp_path: Path
) -> None:
    bundles = _bundles(fleet, tmp_path, 3)
    run_id, held = _claim_all(fleet)
    # gpu-03 answers with gpu-01's machine (same GPU and DMI UUIDs): one machine, two names
    answers = {"gpu-01": bundles[0], "gpu-02": bundles[1], "gpu-03": bundles[0]}
    group = [
        (held[name][0], RawResult(name, Outcome.OK, "", output=answers[name]), held[name][1])
        for name in ("gpu-01", "gpu-02", "gpu-03")
    ]
    out = apply_results(fleet, run_id, group)
    assert all(isinstance(r, HostResult) and r.outcome is Outcome.OK for r in out)
    dup = out[2]
    assert isinstance(dup, HostResult)
    assert any("same machine as host gpu-01" in p for p in dup.problems), dup.problems
    assert not any("same machine" in p for r in out[:2] for p in cast(HostResult, r).problems)
    with fleet.db.session() as s:
        alarms = s.execute(
            select(Host.name, Alarm.data)
            .join(Host, Host.id == Alarm.host_id)
            .where(Alarm.kind == AlarmKind.DUPLICATE_HOST, Alarm.closed_at.is_(None))
        ).all()
    assert [(n, d["duplicate_of"]) for n, d in alarms] == [("gpu-03", "gpu-01")]

    # gpu-03 comes back as itself, in a group after gpu-01: the alarm closes
    run_id, held = _claim_all(fleet)
    group = [
        (held[name][0], RawResult(name, Outcome.OK, "", output=bundle), held[name][1])
        for name, bundle in zip(("gpu-01", "gpu-02", "gpu-03"), bundles, strict=True)
    ]
    out = apply_results(fleet, run_id, group)
    assert not any("same machine" in p for r in out for p in cast(HostResult, r).problems)
    with fleet.db.session() as s:
        still = s.scalar(
            select(func.count())
            .select_from(Alarm)
            .where(Alarm.kind == AlarmKind.DUPLICATE_HOST, Alarm.closed_at.is_(None))
        )
    assert still == 0
