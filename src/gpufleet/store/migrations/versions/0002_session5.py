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


def downgrade() -> None:
    # --- lifecycle compare-and-set counter (reverse) ---
    op.drop_column("hosts", "state_version")  # native DROP COLUMN (SQLite >= 3.35)

    # --- claim columns renamed (reverse) ---
    op.alter_column("hosts", "claimed_until", new_column_name="locked_until")
    op.alter_column("hosts", "claim_token", new_column_name="lock_token")
