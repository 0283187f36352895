"""inspection: the sample's boot and what the probe could not observe (issue 24)

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-05 10:50:00

One block per change, named by what it is for; every block has its reverse in ``downgrade``
(reverse order).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # --- host_samples.boot_id / failures: faults belong to a boot; no data is a fault ---
    json = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
    with op.batch_alter_table("host_samples") as batch:
        batch.add_column(sa.Column("boot_id", sa.String(length=80), nullable=True))
        batch.add_column(sa.Column("failures", json, nullable=True))


def downgrade() -> None:
    # --- host_samples.boot_id / failures (reverse) ---
    with op.batch_alter_table("host_samples") as batch:
        batch.drop_column("failures")
        batch.drop_column("boot_id")
