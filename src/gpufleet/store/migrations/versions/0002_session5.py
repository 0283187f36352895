"""second schema revision (claim columns renamed, typed vocabulary, new tables)

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02 22:40:00

Each change below is one block, named by what it is for, so several changes made in the same
round can share this revision. Every block has its reverse in ``downgrade`` (reverse order).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # --- claim columns renamed (issue 7 item 1: "lease" is kept free for allocation leases) ---
    # A plain column rename (ALTER TABLE ... RENAME ... TO ...) on both backends; no batch
    # table copy on SQLite, which would cascade-delete the hosts' children on DROP TABLE.
    op.alter_column("hosts", "lock_token", new_column_name="claim_token")
    op.alter_column("hosts", "locked_until", new_column_name="claimed_until")

    # --- lifecycle compare-and-set counter (issue 6 B.11: no lost state updates) ---
    op.add_column(
        "hosts",
        sa.Column("state_version", sa.Integer(), server_default="0", nullable=False),
    )

    # --- the foreign key 0001 missed on PostgreSQL (issue 7 item 6) ---
    # 0001 declared hosts.latest_snapshot_id -> fact_snapshots.id with use_alter=True inside
    # create_table, which Alembic leaves out on PostgreSQL (SQLite got it inline).
    if op.get_bind().dialect.name == "postgresql":
        # Without the key, deleting a snapshot could leave a host pointing at nothing.
        op.execute(
            "UPDATE hosts SET latest_snapshot_id = NULL WHERE latest_snapshot_id IS NOT NULL"
            " AND latest_snapshot_id NOT IN (SELECT id FROM fact_snapshots)"
        )
        op.create_foreign_key(
            "fk_hosts_latest_snapshot", "hosts", "fact_snapshots", ["latest_snapshot_id"], ["id"]
        )

    # --- evidence and alarms get their own tables (issue 7 item 3) ---
    # Until now both lived only as rows of the audit log (events of kind evidence / alarm);
    # those rows stay (the audit log still says what happened) and are copied in here.
    _create_evidence_and_alarms()

    # --- allocation: leases, reservations, expected-back times, pool lease policy (issue 9) ---
    _create_leases()

    # --- job failures (issue 9 item 8: gpufleet failures record/import/report) ---
    _create_failures()

    # --- BMC reads over Redfish (issue 11: gpufleet bmc status, history of reads) ---
    _create_bmc_reads()

    # --- placement reads one rack's hosts (issue 9 bench: p99 under 20 ms) ---
    op.create_index("ix_hosts_rack", "hosts", ["rack"], unique=False)


def downgrade() -> None:
    # --- placement reads one rack's hosts (reverse) ---
    op.drop_index("ix_hosts_rack", table_name="hosts")

    # --- BMC reads (reverse) ---
    op.drop_table("bmc_reads")

    # --- job failures (reverse) ---
    op.drop_table("failures")

    # --- allocation (reverse) ---
    op.drop_table("lease_hosts")
    op.drop_table("leases")
    op.drop_column("pools", "lease_policy")
    op.drop_column("hosts", "eta")

    # --- evidence and alarms get their own tables (reverse; the audit log keeps both) ---
    op.drop_table("alarms")
    op.drop_table("evidence")

    # --- the foreign key 0001 missed on PostgreSQL (reverse) ---
    if op.get_bind().dialect.name == "postgresql":
        op.drop_constraint("fk_hosts_latest_snapshot", "hosts", type_="foreignkey")

    # --- lifecycle compare-and-set counter (reverse) ---
    op.drop_column("hosts", "state_version")  # native DROP COLUMN (SQLite >= 3.35)

    # --- claim columns renamed (reverse) ---
    op.alter_column("hosts", "claimed_until", new_column_name="locked_until")
    op.alter_column("hosts", "claim_token", new_column_name="lock_token")


# --- evidence and alarms get their own tables (issue 7 item 3): schema and data copy ---

_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
#: Evidence keys the old events carried -> the one spelling (EvidenceKind).
_EVIDENCE_KINDS = {
    "dcgm_diag": "dcgm",
    "dcgm": "dcgm",
    "nccl": "nccl",
    "gpu_burn": "gpu-burn",
    "gpu-burn": "gpu-burn",
}
_CHANGE_KINDS = ("change-detected", "change-declared")


def _create_evidence_and_alarms() -> None:
    evidence = op.create_table(
        "evidence",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("host_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=20), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("snapshot_id", sa.Integer(), nullable=True),
        sa.Column("change_event_id", sa.Integer(), nullable=True),
        sa.Column("passed", sa.Boolean(), nullable=True),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("data", _JSON, nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("actor", sa.String(length=128), nullable=False),
        sa.ForeignKeyConstraint(["host_id"], ["hosts.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["snapshot_id"], ["fact_snapshots.id"], ondelete="SET NULL"),
        sa.ForeignKeyConstraint(["change_event_id"], ["events.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_evidence_host_time", "evidence", ["host_id", "recorded_at"])
    alarms = op.create_table(
        "alarms",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("host_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=40), nullable=False),
        sa.Column("severity", sa.String(length=10), nullable=False),
        sa.Column("opened_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("data", _JSON, nullable=False),
        sa.Column("acknowledged_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("acknowledged_by", sa.String(length=128), nullable=True),
        sa.Column("closed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["host_id"], ["hosts.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(op.f("ix_alarms_opened_at"), "alarms", ["opened_at"])
    op.create_index("ix_alarms_host_kind", "alarms", ["host_id", "kind"])
    ev, al = _copy_events(op.get_bind())
    if ev:
        op.bulk_insert(evidence, ev)
    if al:
        op.bulk_insert(alarms, al)


def _alarm_kind(data: dict[str, Any], message: str) -> tuple[str, str]:
    """(kind, severity) of an old alarm event, as service code raises them now."""
    if "offered" in data or "pinned" in data or "host key" in message.lower():
        return "host-key-changed", "critical"
    if "duplicate_of" in data or message.startswith("duplicate host"):
        return "duplicate-host", "warning"
    return "other", "warning"


def _passed(kind: str, result: dict[str, Any]) -> bool | None:
    if kind == "dcgm":
        return bool(result.get("passed"))
    if kind == "gpu-burn":
        gpus = result.get("gpus") or []
        return bool(gpus) and all(bool(g.get("ok")) for g in gpus if isinstance(g, dict))
    return None  # nccl: judged against the profile's floor at validation


def _copy_events(bind: sa.Connection) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Rows for ``evidence`` and ``alarms`` from the audit log, replayed in id order: the
    change marker of an evidence row is its host's latest change event before it; an alarm
    stays one open row per host and kind until a newly pinned host key closes a host-key one
    (what the service does from now on). Events without a host (removed) are left out."""
    events = sa.table(
        "events",
        sa.column("id", sa.Integer()),
        sa.column("at", sa.DateTime(timezone=True)),
        sa.column("actor", sa.String()),
        sa.column("host_id", sa.Integer()),
        sa.column("kind", sa.String()),
        sa.column("message", sa.Text()),
        sa.column("data", _JSON),
    )
    rows = bind.execute(
        sa.select(events)
        .where(
            events.c.host_id.is_not(None),
            events.c.kind.in_(["evidence", "alarm", "host-key-pinned", *_CHANGE_KINDS]),
        )
        .order_by(events.c.id)
    ).all()
    last_change: dict[int, int] = {}
    evidence: list[dict[str, Any]] = []
    alarms: list[dict[str, Any]] = []
    open_: dict[tuple[int, str], dict[str, Any]] = {}
    for r in rows:
        data = r.data if isinstance(r.data, dict) else {}
        if r.kind in _CHANGE_KINDS:
            last_change[r.host_id] = r.id
        elif r.kind == "evidence":
            kind = _EVIDENCE_KINDS.get(str(data.get("kind")))
            result = data.get("result")
            if kind is None or not isinstance(result, dict):
                continue  # nothing a check could read; the event stays in the audit log
            evidence.append(
                {
                    "host_id": r.host_id,
                    "kind": kind,
                    "recorded_at": r.at,
                    "snapshot_id": None,
                    "change_event_id": last_change.get(r.host_id),
                    "passed": _passed(kind, result),
                    "summary": r.message,
                    "data": result,
                    "source": str(data.get("source") or ""),
                    "actor": r.actor,
                }
            )
        elif r.kind == "alarm":
            kind, severity = _alarm_kind(data, r.message)
            if (r.host_id, kind) in open_:
                continue
            row = {
                "host_id": r.host_id,
                "kind": kind,
                "severity": severity,
                "opened_at": r.at,
                "message": r.message,
                "data": data,
                "acknowledged_at": None,
                "acknowledged_by": None,
                "closed_at": None,
                "reason": None,
            }
            alarms.append(row)
            open_[(r.host_id, kind)] = row
        elif r.kind == "host-key-pinned" and (r.host_id, "host-key-changed") in open_:
            row = open_.pop((r.host_id, "host-key-changed"))
            row["closed_at"] = r.at
            row["reason"] = r.message
    return evidence, alarms


# --- allocation: leases, reservations, expected-back times, pool lease policy (issue 9) ---


def _create_leases() -> None:
    op.add_column("hosts", sa.Column("eta", sa.DateTime(timezone=True), nullable=True))
    op.add_column("pools", sa.Column("lease_policy", _JSON, nullable=True))
    op.create_table(
        "leases",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("owner", sa.String(length=128), nullable=False),
        sa.Column("purpose", sa.Text(), nullable=False),
        sa.Column("actor", sa.String(length=128), nullable=False),
        sa.Column("state", sa.String(length=12), nullable=False),
        sa.Column("request", _JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("starts_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ends_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("released_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("notified_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(op.f("ix_leases_owner"), "leases", ["owner"])
    op.create_index("ix_leases_state_ends", "leases", ["state", "ends_at"])
    op.create_table(
        "lease_hosts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("lease_id", sa.Integer(), nullable=False),
        sa.Column("host_id", sa.Integer(), nullable=False),
        sa.Column("host_name", sa.String(length=255), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("gpu_uuids", _JSON, nullable=False),
        sa.Column("starts_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ends_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("holding", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(["lease_id"], ["leases.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["host_id"], ["hosts.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(op.f("ix_lease_hosts_lease_id"), "lease_hosts", ["lease_id"])
    op.create_index(op.f("ix_lease_hosts_host_id"), "lease_hosts", ["host_id"])
    op.create_index("ix_lease_hosts_window", "lease_hosts", ["holding", "ends_at"])


# --- job failures (issue 9 item 8) ---


def _create_failures() -> None:
    op.create_table(
        "failures",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.String(length=128), nullable=False),
        sa.Column("host_id", sa.Integer(), nullable=False),
        sa.Column("gpu", sa.String(length=64), nullable=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("category", sa.String(length=32), nullable=False),
        sa.Column("rule", sa.String(length=64), nullable=True),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("actor", sa.String(length=128), nullable=False),
        sa.ForeignKeyConstraint(["host_id"], ["hosts.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(op.f("ix_failures_job_id"), "failures", ["job_id"])
    op.create_index(op.f("ix_failures_at"), "failures", ["at"])
    op.create_index("ix_failures_host_time", "failures", ["host_id", "at"])


# --- BMC reads over Redfish (issue 11) ---


def _create_bmc_reads() -> None:
    op.create_table(
        "bmc_reads",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("host_id", sa.Integer(), nullable=False),
        sa.Column("read_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("outcome", sa.String(length=20), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("power_state", sa.String(length=32), nullable=True),
        sa.Column("health", sa.String(length=32), nullable=True),
        sa.Column("reading", _JSON, nullable=True),
        sa.Column("sel_new", _JSON, nullable=False),
        sa.Column("sel_seen", _JSON, nullable=True),
        sa.ForeignKeyConstraint(["host_id"], ["hosts.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_bmc_reads_host_time", "bmc_reads", ["host_id", "read_at"])
