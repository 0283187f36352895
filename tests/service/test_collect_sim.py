"""Collection through the simulated lab (real captures), on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import func, select

from gpufleet.collect.transport import Outcome
from gpufleet.inventory import load_inventory
from gpufleet.lab.fleet import LabFleet, apply_change, create_fleet, write_inventory
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.collect import collect
from gpufleet.service.hosts.enroll import enroll
from gpufleet.service.views.hosts import show_host, snapshot_count
from gpufleet.store.tables import Event, FactSnapshot

FAULTS = {
    "gpu-02": ["unreachable"],
    "gpu-03": ["hang"],
    "gpu-04": ["wrong-key"],
    "gpu-05": ["garbage"],
    "gpu-06": ["truncated"],
    "gpu-07": ["nvidia-smi-missing"],
}


def make_lab(tmp_path: Path, n: int = 10, faults: dict[str, list[str]] | None = None) -> Path:
    d = tmp_path / "lab"
    d.mkdir()
    fl = create_fleet(n, models=["a100-8x"], faults=faults if faults is not None else FAULTS)
    fl.save(d)
    write_inventory(fl, d / "inventory.ini", transport="sim", lab_dir=d)
    return d


def test_collect_reports_each_host_with_its_reason(fleet: Fleet, tmp_path: Path) -> None:
    d = make_lab(tmp_path)
    enroll(fleet, load_inventory(d / "inventory.ini"))
    rep = collect(fleet)
    by = {r.host: r for r in rep.results}
    assert by["gpu-01"].outcome is Outcome.OK and by["gpu-01"].gpus == 8
    assert by["gpu-02"].outcome is Outcome.UNREACHABLE
    assert by["gpu-03"].outcome is Outcome.TIMEOUT
    assert by["gpu-04"].outcome is Outcome.AUTH_FAILED
    assert by["gpu-05"].outcome is Outcome.BAD_OUTPUT
    assert "nvidia-smi" in by["gpu-05"].reason
    assert by["gpu-06"].outcome is Outcome.BAD_OUTPUT
    # nvidia-smi missing is a fact, not a failure
    assert by["gpu-07"].outcome is Outcome.OK and by["gpu-07"].gpus == 0
    detail = show_host(fleet, "gpu-07")
    assert detail.facts is not None
    assert detail.facts.nvidia_smi_error and "not found" in detail.facts.nvidia_smi_error
    assert len(detail.facts.pci_gpus) == 8
    assert rep.counts == {
        "ok": 5,
        "unreachable": 1,
        "timeout": 1,
        "auth failed": 1,
        "bad output": 2,
    }


def test_bad_output_never_overwrites_good_facts(fleet: Fleet, tmp_path: Path) -> None:
    d = make_lab(tmp_path, n=3, faults={})
    enroll(fleet, load_inventory(d / "inventory.ini"))
    collect(fleet)
    good = show_host(fleet, "gpu-01").facts
    assert good is not None and len(good.gpus) == 8
    fl = apply_change(LabFleet.load(d), "gpu-01", add_faults=["truncated"])
    fl.save(d)
    rep = collect(fleet)
    assert {r.host: r.outcome for r in rep.results}["gpu-01"] is Outcome.BAD_OUTPUT
    after = show_host(fleet, "gpu-01")
    assert after.facts == good
    assert after.view.last_outcome == "bad output"
    assert snapshot_count(fleet, "gpu-01") == 1
    # gpu-02 answered the same facts twice: seen unchanged, no second snapshot (issue 8)
    assert snapshot_count(fleet, "gpu-02") == 1
    assert after.view.last_collected_at is not None


def test_host_key_pinned_then_change_refused_as_alarm(fleet: Fleet, tmp_path: Path) -> None:
    d = make_lab(tmp_path, n=2, faults={})
    enroll(fleet, load_inventory(d / "inventory.ini"))
    collect(fleet)
    pinned = show_host(fleet, "gpu-01").host_key
    assert pinned and pinned.startswith("ssh-ed25519 ")
    apply_change(LabFleet.load(d), "gpu-01", add_faults=["host-key-changed"]).save(d)
    rep = collect(fleet)
    r = {x.host: x for x in rep.results}["gpu-01"]
    assert r.outcome is Outcome.HOST_KEY_CHANGED
    assert "SHA256:" in r.reason
    assert show_host(fleet, "gpu-01").host_key == pinned
    with fleet.db.session() as s:
        alarms = s.scalar(
            select(func.count(Event.id)).where(Event.kind == "alarm", Event.host_name == "gpu-01")
        )
        snaps = s.scalar(select(func.count(FactSnapshot.id)))
    assert alarms == 1
    assert snaps == 2  # the first collection's; gpu-02 was unchanged the second time


def test_driver_change_is_detected_and_logged(fleet: Fleet, tmp_path: Path) -> None:
    d = make_lab(tmp_path, n=2, faults={})
    enroll(fleet, load_inventory(d / "inventory.ini"))
    collect(fleet)
    apply_change(LabFleet.load(d), "gpu-02", driver="550.90.07").save(d)
    rep = collect(fleet)
    r = {x.host: x for x in rep.results}["gpu-02"]
    assert any("driver" in c for c in r.changes)
    events = show_host(fleet, "gpu-02").events
    assert any(e["kind"] == "change-detected" and "550.90.07" in e["message"] for e in events)


def test_hosts_claimed_by_another_worker_are_skipped(fleet: Fleet, tmp_path: Path) -> None:
    """Two collectors sharing one database never collect the same host at once."""
    from datetime import timedelta

    from gpufleet.service.hosts.collect import claim

    d = make_lab(tmp_path, n=3, faults={})
    enroll(fleet, load_inventory(d / "inventory.ini"))
    _run, held, _busy = claim(fleet, "gpu-01,gpu-02", None, timedelta(minutes=5))
    assert sorted(c.target.name for c in held) == ["gpu-01", "gpu-02"]
    rep = collect(fleet)
    assert [r.host for r in rep.results] == ["gpu-03"]
    assert rep.skipped_locked == ["gpu-01", "gpu-02"]
    # The lease expires: a crashed worker does not hold hosts for ever.
    fleet.clock.advance(minutes=6)  # type: ignore[attr-defined]
    assert sorted(r.host for r in collect(fleet).results) == ["gpu-01", "gpu-02", "gpu-03"]


def test_row_locks_of_a_concurrent_transaction_are_skipped(
    pg_database_url: str, tmp_path: Path
) -> None:
    """On PostgreSQL a claim skips rows another transaction holds (SELECT ... SKIP LOCKED).
    (SQLite serialises writers; the lease test above covers it there.)"""
    from datetime import timedelta

    from sqlalchemy import select
    from tests.conftest import _truncate

    from gpufleet.service.hosts.collect import claim
    from gpufleet.store.tables import Host

    fleet = Fleet.open(home=tmp_path / "home", url=pg_database_url, actor="pytest")
    _truncate(fleet.db)
    d = make_lab(tmp_path, n=3, faults={})
    enroll(fleet, load_inventory(d / "inventory.ini"))
    with fleet.db.session() as other:  # another worker, mid-claim
        other.scalars(select(Host).where(Host.name == "gpu-02").with_for_update()).all()
        _run, got, busy = claim(fleet, None, None, timedelta(minutes=5))
    assert sorted(c.target.name for c in got) == ["gpu-01", "gpu-03"]
    assert busy == ["gpu-02"]
    fleet.db.dispose()


def test_stale_result_after_lease_expiry_is_discarded(fleet: Fleet, tmp_path: Path) -> None:
    """Worker A's lease runs out, B re-claims and stores; A's late result must not win."""
    from datetime import timedelta

    from gpufleet.collect.transport import RawResult
    from gpufleet.service.hosts.collect import apply_result, claim

    d = make_lab(tmp_path, n=1, faults={})
    enroll(fleet, load_inventory(d / "inventory.ini"))
    run_a, held_a, _ = claim(fleet, "gpu-01", None, timedelta(minutes=1))
    fleet.clock.advance(minutes=2)  # type: ignore[attr-defined]
    rep_b = collect(fleet, "gpu-01")
    assert rep_b.results[0].outcome is Outcome.OK
    late = apply_result(fleet, run_a, held_a[0].host_id,
                        RawResult("gpu-01", Outcome.BAD_OUTPUT, "garbage"), held_a[0].token)
    assert late.outcome is Outcome.ERROR and "discarded" in late.reason
    assert show_host(fleet, "gpu-01").view.last_outcome == "ok"
