"""canary campaigns (issue 14)

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03 06:00:00

One block per change, named by what it is for; every block has its reverse in ``downgrade``
(reverse order). An empty body is a revision kept for work that needed no schema change.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    # --- campaigns: what a campaign does, its plan and where it is ---
    op.create_table(
        "campaigns",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("action_kind", sa.String(length=12), nullable=False),
        sa.Column("action", sa.Text(), nullable=False),
        sa.Column("rollback", sa.Text(), nullable=True),
        sa.Column("target_baseline", sa.String(length=128), nullable=False),
        sa.Column("selector", sa.Text(), nullable=False),
        sa.Column("ticket", sa.String(length=128), nullable=False),
        sa.Column("options", _JSON, nullable=False),
        sa.Column("plan", _JSON, nullable=False),
        sa.Column("current_wave", sa.Integer(), nullable=False),
        sa.Column("halt_reason", sa.Text(), nullable=True),
        sa.Column("approved_by", sa.String(length=128), nullable=True),
        sa.Column("approved_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("owner", sa.String(length=128), nullable=True),
        sa.Column("created_by", sa.String(length=128), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
    )

    # --- campaign hosts: each host's wave and step (crash-safe resume) ---
    op.create_table(
        "campaign_hosts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("campaign_id", sa.Integer(), nullable=False),
        sa.Column("host_id", sa.Integer(), nullable=True),
        sa.Column("host_name", sa.String(length=255), nullable=False),
        sa.Column("wave", sa.Integer(), nullable=False),
        sa.Column("step", sa.String(length=20), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("previous_baseline", sa.String(length=128), nullable=True),
        sa.Column("driver_before", sa.String(length=32), nullable=True),
        sa.Column("action_runs", sa.Integer(), nullable=False),
        sa.Column("action_started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("action_finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["campaign_id"], ["campaigns.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["host_id"], ["hosts.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "ix_campaign_hosts_campaign_host",
        "campaign_hosts",
        ["campaign_id", "host_name"],
        unique=True,
    )


def downgrade() -> None:
    op.drop_index("ix_campaign_hosts_campaign_host", table_name="campaign_hosts")
    op.drop_table("campaign_hosts")
    op.drop_table("campaigns")
