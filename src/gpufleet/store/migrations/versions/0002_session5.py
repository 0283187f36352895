"""second schema revision (claim columns renamed, typed vocabulary, new tables)

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02 22:40:00

Each change below is one block, named by what it is for, so several changes made in the same
round can share this revision. Every block has its reverse in ``downgrade`` (reverse order).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

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


def downgrade() -> None:
    # --- the foreign key 0001 missed on PostgreSQL (reverse) ---
    if op.get_bind().dialect.name == "postgresql":
        op.drop_constraint("fk_hosts_latest_snapshot", "hosts", type_="foreignkey")

    # --- lifecycle compare-and-set counter (reverse) ---
    op.drop_column("hosts", "state_version")  # native DROP COLUMN (SQLite >= 3.35)

    # --- claim columns renamed (reverse) ---
    op.alter_column("hosts", "claimed_until", new_column_name="locked_until")
    op.alter_column("hosts", "claim_token", new_column_name="lock_token")
