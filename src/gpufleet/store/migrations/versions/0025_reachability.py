"""a host's run of failed contacts: unreachable is a state the platform acts on (issue 24)

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-05 10:40:00

One block per change, named by what it is for; every block has its reverse in ``downgrade``
(reverse order).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # --- hosts: consecutive collections/inspections that could not reach the host, and
    # when the first of them failed (service/reachability.py); 0 / NULL once one reaches it.
    op.add_column(
        "hosts",
        sa.Column("unreachable_attempts", sa.Integer(), server_default="0", nullable=False),
    )
    op.add_column(
        "hosts", sa.Column("unreachable_since", sa.DateTime(timezone=True), nullable=True)
    )


def downgrade() -> None:
    # --- hosts reachability (reverse) ---
    op.drop_column("hosts", "unreachable_since")  # native DROP COLUMN (SQLite >= 3.35)
    op.drop_column("hosts", "unreachable_attempts")
