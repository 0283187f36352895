"""Lifecycle through the services: deadlines, expiry, operator actions, the event log."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select
from tests.conftest import FakeClock

from gpufleet.domain.changes import DeclaredChangeKind
from gpufleet.errors import InvalidTransition
from gpufleet.lab.demo import enroll_lab
from gpufleet.service.background.sweeper import sweep
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts import operations
from gpufleet.service.hosts.collect import collect
from gpufleet.service.hosts.validate import validate
from gpufleet.service.views.hosts import show_host
from gpufleet.store.tables import Event, Host


def lab(
    fleet: Fleet, tmp_path: Path, n: int = 3, faults: dict[str, list[str]] | None = None
) -> None:
    enroll_lab(fleet, tmp_path / "lab", n, models=["h100-8x"], faults=faults or {})


def state(fleet: Fleet, name: str) -> str:
    return show_host(fleet, name).view.state


def test_stuck_validating_times_out_to_quarantine(
    fleet: Fleet, clock: FakeClock, tmp_path: Path
) -> None:
    lab(fleet, tmp_path)
    collect(fleet)
    operations.record_change(fleet, "gpu-01", DeclaredChangeKind.REIMAGE, "T-1")
    assert state(fleet, "gpu-01") == "enrolled"  # recorded; first validation sees it anyway
    operations.maintenance_on(fleet, "gpu-02", "swap PSU")
    operations.maintenance_off(fleet, "gpu-02")
    assert state(fleet, "gpu-02") == "validating"
    clock.advance(minutes=119)
    assert sweep(fleet) == []
    clock.advance(minutes=2)
    assert sweep(fleet) == ["gpu-02"]
    view = show_host(fleet, "gpu-02").view
    assert view.state == "quarantined" and view.fault == "timed_out"
    assert "timed out" in (view.status_reason or "")


def test_validation_expires_back_to_validating(
    fleet: Fleet, clock: FakeClock, tmp_path: Path
) -> None:
    lab(fleet, tmp_path, n=1)
    fleet.settings.validation_ttl = timedelta(hours=1)
    validate(fleet)
    assert state(fleet, "gpu-01") == "available"
    clock.advance(minutes=61)
    assert sweep(fleet) == ["gpu-01"]
    assert state(fleet, "gpu-01") == "validating"
    assert validate(fleet).verdicts[0].state == "available"


def test_illegal_transitions_refused_and_every_transition_logged(
    fleet: Fleet, tmp_path: Path
) -> None:
    lab(fleet, tmp_path, n=2)
    validate(fleet)
    with pytest.raises(InvalidTransition) as exc:
        operations.maintenance_off(fleet, "gpu-01")
    msg = str(exc.value)
    assert "gpu-01" in msg and "available" in msg and "maintenance_off" in msg
    assert state(fleet, "gpu-01") == "available"
    operations.maintenance_on(fleet, "gpu-01", "BMC firmware")
    operations.maintenance_off(fleet, "gpu-01", "done")
    assert state(fleet, "gpu-01") == "validating"  # never straight back to available
    operations.retire(fleet, "gpu-02", "end of life")
    with pytest.raises(InvalidTransition):
        operations.maintenance_on(fleet, "gpu-02", "x")
    with fleet.db.session() as s:
        rows = list(
            s.scalars(
                select(Event)
                .where(Event.kind == "transition", Event.host_name == "gpu-01")
                .order_by(Event.id)
            )
        )
        assert [(r.data["from"], r.data["to"]) for r in rows] == [
            ("enrolled", "validating"),
            ("validating", "available"),
            ("available", "maintenance"),
            ("maintenance", "validating"),
        ]
        assert all(r.actor == "pytest" for r in rows)
        assert rows[2].data["reason"] == "BMC firmware"
        gpu2 = s.scalar(select(Host).where(Host.name == "gpu-02"))
        assert gpu2 is not None and gpu2.state == "retired"


def test_retired_hosts_are_not_collected(fleet: Fleet, tmp_path: Path) -> None:
    lab(fleet, tmp_path, n=2)
    operations.retire(fleet, "gpu-02", "decommissioned")
    assert [r.host for r in collect(fleet).results] == ["gpu-01"]
