"""GPU-level health, remediation, parts history, webhooks (issue 10)

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03 06:00:00

One block per change, named by what it is for; every block has its reverse in ``downgrade``
(reverse order). An empty body is a revision kept for work that needed no schema change.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    # --- GPU-level health: usable GPU count of a partial host, the pool's health policy ---
    op.add_column("hosts", sa.Column("usable_gpus", sa.Integer(), nullable=True))
    op.add_column("hosts", sa.Column("unusable_gpus", _JSON, nullable=True))
    op.add_column("pools", sa.Column("health_policy", _JSON, nullable=True))

    # --- remediation records (gpufleet remediate) ---
    op.create_table(
        "remediations",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("host_id", sa.Integer(), nullable=False),
        sa.Column("host_name", sa.String(length=255), nullable=False),
        sa.Column("action", sa.String(length=20), nullable=False),
        sa.Column("gpus", _JSON, nullable=False),
        sa.Column("serials", _JSON, nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("outcome", sa.String(length=20), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("steps", _JSON, nullable=False),
        sa.Column("ticket", sa.String(length=128), nullable=True),
        sa.Column("eta", sa.DateTime(timezone=True), nullable=True),
        sa.Column("rule", sa.String(length=128), nullable=True),
        sa.Column("actor", sa.String(length=128), nullable=False),
        sa.ForeignKeyConstraint(["host_id"], ["hosts.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_remediations_host_time", "remediations", ["host_id", "started_at"])

    # --- parts history: what happened to one GPU (by serial) ---
    op.create_table(
        "part_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("serial", sa.String(length=64), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("host_id", sa.Integer(), nullable=True),
        sa.Column("host_name", sa.String(length=255), nullable=True),
        sa.Column("gpu_index", sa.Integer(), nullable=True),
        sa.Column("kind", sa.String(length=20), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("data", _JSON, nullable=False),
        sa.ForeignKeyConstraint(["host_id"], ["hosts.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_part_events_serial_time", "part_events", ["serial", "at"])

    # --- webhook deliveries (notifications), failures kept ---
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("kind", sa.String(length=40), nullable=False),
        sa.Column("host_name", sa.String(length=255), nullable=True),
        sa.Column("payload", _JSON, nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("delivered", sa.Boolean(), nullable=False),
        sa.Column("status", sa.Integer(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_webhook_deliveries_at", "webhook_deliveries", ["at"])


def downgrade() -> None:
    # --- webhook deliveries (reverse) ---
    op.drop_table("webhook_deliveries")
    # --- parts history (reverse) ---
    op.drop_table("part_events")
    # --- remediation records (reverse) ---
    op.drop_table("remediations")
    # --- GPU-level health (reverse) ---
    op.drop_column("pools", "health_policy")
    op.drop_column("hosts", "unusable_gpus")
    op.drop_column("hosts", "usable_gpus")
