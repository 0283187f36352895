"""health: driver-load grace, webhook outbox (issue 10)

Revision ID: 0014
Revises: 0015
Create Date: 2026-12-03 09:20:00

One block per change, named by what it is for; every block has its reverse in ``downgrade``
(reverse order). An empty body is a revision kept for work that needed no schema change.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # --- host_samples.driver_age_s: seconds since the NVIDIA driver was loaded (grace) ---
    op.add_column("host_samples", sa.Column("driver_age_s", sa.Float(), nullable=True))
    # --- webhook_deliveries as an outbox: due time, the sender's claim, delivery time ---
    with op.batch_alter_table("webhook_deliveries") as batch:
        batch.add_column(sa.Column("next_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("claim", sa.String(length=32), nullable=True))
        batch.add_column(sa.Column("claimed_until", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True))
    op.create_index("ix_webhook_deliveries_next_at", "webhook_deliveries", ["next_at"])


def downgrade() -> None:
    # --- webhook_deliveries as an outbox (reverse) ---
    op.drop_index("ix_webhook_deliveries_next_at", table_name="webhook_deliveries")
    with op.batch_alter_table("webhook_deliveries") as batch:
        batch.drop_column("delivered_at")
        batch.drop_column("claimed_until")
        batch.drop_column("claim")
        batch.drop_column("next_at")
    # --- host_samples.driver_age_s (reverse) ---
    with op.batch_alter_table("host_samples") as batch:
        batch.drop_column("driver_age_s")
