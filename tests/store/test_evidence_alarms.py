"""Evidence and alarms in their own tables (issue 7 item 3), on SQLite and PostgreSQL:
written by the services alongside their audit event, read by validation / ``hosts show`` /
the summary, and migrated from the audit-log rows a 0001-era database holds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy import select
from sqlalchemy.dialects import postgresql

from gpufleet.collect.active import parse_dcgm_diag_json, parse_gpu_burn, parse_nccl_tests
from gpufleet.domain.changes import DeclaredChangeKind
from gpufleet.domain.events import AlarmKind, AlarmSeverity, EvidenceKind
from gpufleet.lab.demo import enroll_lab
from gpufleet.lab.fleet import create_fleet
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.collect import collect
from gpufleet.service.hosts.evidence import run_active
from gpufleet.service.hosts.operations import record_change, rekey
from gpufleet.service.hosts.validate import evidence_kinds
from gpufleet.service.views.hosts import list_events, show_host
from gpufleet.service.views.summary import fleet_summary
from gpufleet.store.db import MIGRATIONS, SCHEMA_REVISION, Database
from gpufleet.store.repo import host_by_name
from gpufleet.store.tables import Alarm, EvidenceRow

CAPTURED = Path(__file__).parents[1] / "fixtures" / "captured"
DCGM = CAPTURED / "dcgm" / "nvidia-dcgm_JsonResultTests_real-output_diag-3.1.0_8gpu.txt"
NCCL = CAPTURED / "active" / "superbench_nccl_allreduce.log"
BURN = CAPTURED / "active" / "superbench_gpu_burn.excerpt.log"


def _lab(fleet: Fleet, tmp_path: Path, faults: dict[str, list[str]] | None = None) -> None:
    enroll_lab(fleet, tmp_path / "lab", 2, models=["h100-8x"], faults=faults or {})


def _evidence_rows(fleet: Fleet) -> list[EvidenceRow]:
    with fleet.db.session() as s:
        return list(s.scalars(select(EvidenceRow).order_by(EvidenceRow.id)))


def _alarms(fleet: Fleet) -> list[Alarm]:
    with fleet.db.session() as s:
        return list(s.scalars(select(Alarm).order_by(Alarm.id)))


def test_evidence_is_a_row_with_its_audit_event_and_counts_after_the_last_change(
    fleet: Fleet, tmp_path: Path
) -> None:
    _lab(fleet, tmp_path)
    collect(fleet)
    run_active(fleet, "gpu-01", "dcgm", level=2)
    run_active(fleet, "gpu-01", "nccl")
    rows = _evidence_rows(fleet)
    assert [(r.kind, r.passed) for r in rows] == [
        (EvidenceKind.DCGM, True),
        (EvidenceKind.NCCL, None),  # NCCL is judged against the profile's floor
    ]
    assert rows[0].summary.startswith("passed: level 2, 8 GPUs")
    assert rows[0].source == "sim: dcgmi diag -r 2 -j" and rows[0].actor == "pytest"
    assert rows[0].data["level"] == 2 and rows[0].change_event_id is None
    assert rows[0].snapshot_id is not None  # the facts the host had when it was tested
    # The audit log still says what happened, as before.
    assert [e["data"]["kind"] for e in list_events(fleet, "gpu-01", kind="evidence")] == [
        "nccl", "dcgm_diag"
    ]
    with fleet.db.session() as s:
        got = evidence_kinds(s, host_by_name(s, "gpu-01"), None)
        assert sorted(got) == ["dcgm_diag", "nccl"]
        assert got["nccl"].avg_bus_bw_gbps > 60  # re-hydrated model
    detail = show_host(fleet, "gpu-01")
    assert [(e["kind"], e["passed"]) for e in detail.evidence] == [
        (EvidenceKind.NCCL, None), (EvidenceKind.DCGM, True)
    ]
    # A declared change makes older evidence stale; evidence recorded afterwards counts.
    record_change(fleet, "gpu-01", DeclaredChangeKind.DRIVER_UPGRADE, None)
    with fleet.db.session() as s:
        assert evidence_kinds(s, host_by_name(s, "gpu-01"), None) == {}
    fleet.clock.advance(seconds=1)  # type: ignore[attr-defined]
    run_active(fleet, "gpu-01", "gpu-burn")
    with fleet.db.session() as s:
        assert sorted(evidence_kinds(s, host_by_name(s, "gpu-01"), None)) == ["gpu_burn"]
    assert _evidence_rows(fleet)[-1].change_event_id is not None


def test_alarm_is_one_open_row_per_kind_and_closes_when_a_new_key_is_pinned(
    fleet: Fleet, tmp_path: Path
) -> None:
    _lab(fleet, tmp_path)
    collect(fleet)  # keys pinned on first use
    lab_dir = tmp_path / "lab"
    fl = create_fleet(2, models=["h100-8x"], faults={"gpu-02": ["host-key-changed"]})
    fl.save(lab_dir)  # gpu-02 now offers another key
    collect(fleet)
    collect(fleet)
    alarms = _alarms(fleet)
    assert [(a.kind, a.severity, a.closed_at) for a in alarms] == [
        (AlarmKind.HOST_KEY_CHANGED, AlarmSeverity.CRITICAL, None)
    ]
    assert "SSH host key changed" in alarms[0].message
    # Two alarm events (one per refused collection), one open alarm.
    assert len(list_events(fleet, "gpu-02", kind="alarm")) == 2
    assert [a.kind for a in show_host(fleet, "gpu-02").alarms] == ["host-key-changed"]
    assert show_host(fleet, "gpu-01").alarms == []
    sm = fleet_summary(fleet)
    assert [(a["host"], a["fault"]) for a in sm.alarms] == [
        ("gpu-02", "host-key-changed (critical)")
    ]
    rekey(fleet, "gpu-02", "reimaged")
    collect(fleet, "gpu-02")  # first use again: the new key is pinned, the alarm closes
    closed = _alarms(fleet)[0]
    assert closed.closed_at is not None and closed.reason is not None
    assert closed.reason.startswith("new host key pinned")
    assert fleet_summary(fleet).alarms == [] and show_host(fleet, "gpu-02").alarms == []


# ------------------------------------------------ data migration of the old audit rows

_JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
_EVENTS = sa.table(
    "events",
    sa.column("id", sa.Integer()),
    sa.column("at", sa.DateTime(timezone=True)),
    sa.column("actor", sa.String()),
    sa.column("host_id", sa.Integer()),
    sa.column("host_name", sa.String()),
    sa.column("kind", sa.String()),
    sa.column("message", sa.Text()),
    sa.column("data", _JSON),
)


def _old_db(url: str) -> Database:
    """A database at schema 0001 whose audit log holds evidence and alarms as events."""
    db = Database(url)
    db.migrate("0001")
    t0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    with db.engine.begin() as c:
        for name in ("gpu-01", "gpu-02"):
            c.execute(
                sa.text(
                    "INSERT INTO hosts (name, address, port, groups, vars, expected, state,"
                    " state_entered_at, health, profiles, created_at, updated_at)"
                    " VALUES (:n, '10.0.0.1', 22, '[]', '{}', '{}', 'available', :t, 'ok',"
                    " '[]', :t, :t)"
                ),
                {"n": name, "t": t0},
            )
        ids = dict(c.execute(sa.text("SELECT name, id FROM hosts")).all())  # type: ignore[arg-type]
        dcgm = parse_dcgm_diag_json(DCGM.read_text(), level=1).model_dump(mode="json")
        nccl = parse_nccl_tests(NCCL.read_text()).model_dump(mode="json")
        burn = parse_gpu_burn(BURN.read_text()).model_dump(mode="json")
        rows: list[tuple[str, str, str, dict[str, Any]]] = [
            ("gpu-01", "evidence", "dcgm_diag result from f.json",
             {"kind": "dcgm_diag", "result": dcgm, "source": "f.json"}),
            ("gpu-01", "change-detected", "driver changed", {"snapshot": 1}),
            ("gpu-01", "evidence", "nccl result from ssh: all_reduce_perf",
             {"kind": "nccl", "result": nccl, "source": "ssh: all_reduce_perf"}),
            ("gpu-01", "evidence", "gpu_burn result from b.log",
             {"kind": "gpu_burn", "result": burn, "source": "b.log"}),
            ("gpu-01", "evidence", "garbage", {"kind": "memtest", "result": {}}),
            ("gpu-02", "alarm", "SSH host key changed; collection refused. x",
             {"pinned": "ssh-ed25519 AAAA1", "offered": "ssh-ed25519 AAAA2"}),
            ("gpu-02", "alarm", "SSH host key changed; collection refused. y",
             {"pinned": "ssh-ed25519 AAAA1", "offered": "ssh-ed25519 AAAA2"}),
            ("gpu-02", "host-key-pinned", "pinned host key SHA256:abc", {}),
            ("gpu-02", "alarm", "SSH host key changed; collection refused. z",
             {"pinned": "ssh-ed25519 AAAA2", "offered": "ssh-ed25519 AAAA3"}),
            ("gpu-01", "alarm", "duplicate host: same GPUs as gpu-02",
             {"duplicate_of": "gpu-02", "gpu_uuids": ["GPU-1"]}),
        ]
        for i, (host, kind, message, data) in enumerate(rows):
            c.execute(
                sa.insert(_EVENTS).values(
                    at=t0 + timedelta(minutes=i), actor="old", host_id=ids[host],
                    host_name=host, kind=kind, message=message, data=data,
                )
            )
    return db


def _downgrade(db: Database, target: str) -> None:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with db.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, target)


def test_0002_moves_old_evidence_and_alarm_events_into_their_tables(empty_url: str) -> None:
    db = _old_db(empty_url)
    db.migrate()
    assert db.current_revision() == SCHEMA_REVISION
    t0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    with db.session() as s:
        change_id = s.scalar(sa.text("SELECT id FROM events WHERE kind = 'change-detected'"))
        ev = list(s.scalars(select(EvidenceRow).order_by(EvidenceRow.id)))
        # The unrecognisable "memtest" row stays only in the audit log.
        assert [(e.kind, e.passed, e.change_event_id) for e in ev] == [
            (EvidenceKind.DCGM, True, None),
            (EvidenceKind.NCCL, None, change_id),
            (EvidenceKind.GPU_BURN, True, change_id),
        ]
        assert ev[0].recorded_at == t0 and ev[0].source == "f.json" and ev[0].actor == "old"
        assert ev[0].data["gpu_ids"] == list(range(8))
        assert ev[1].summary == "nccl result from ssh: all_reduce_perf"
        # Validation's rule holds on the migrated rows: only post-change evidence counts.
        assert sorted(evidence_kinds(s, host_by_name(s, "gpu-01"), None)) == ["gpu_burn", "nccl"]
        al = list(s.scalars(select(Alarm).order_by(Alarm.id)))
        assert [(a.kind, a.severity, a.closed_at is None) for a in al] == [
            (AlarmKind.HOST_KEY_CHANGED, AlarmSeverity.CRITICAL, False),  # closed by the pin
            (AlarmKind.HOST_KEY_CHANGED, AlarmSeverity.CRITICAL, True),
            (AlarmKind.DUPLICATE_HOST, AlarmSeverity.WARNING, True),
        ]
        assert al[0].opened_at == t0 + timedelta(minutes=5)
        assert al[0].closed_at == t0 + timedelta(minutes=7)
        assert al[0].reason == "pinned host key SHA256:abc"
        assert al[1].data["offered"] == "ssh-ed25519 AAAA3"
        # The audit log keeps every old row.
        assert s.scalar(sa.text("SELECT count(*) FROM events")) == 10
    _downgrade(db, "0001")  # and back: the tables go, the events stay
    assert not {"evidence", "alarms"} & set(sa.inspect(db.engine).get_table_names())
    with db.engine.connect() as c:
        assert c.execute(sa.text("SELECT count(*) FROM events")).scalar() == 10
    db.dispose()
