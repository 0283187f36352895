"""placement free counts, lessee users (issue 9)

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-03 06:00:00

One block per change, named by what it is for; every block has its reverse in ``downgrade``
(reverse order). An empty body is a revision kept for work that needed no schema change.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def _json() -> sa.types.TypeEngine[Any]:
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    # --- the lessee's users on a lease (issue 9: reclaim checks their processes/crontabs) ---
    op.add_column("leases", sa.Column("users", _json(), nullable=True))

    # --- placement's per-rack summary (issue 9: placement p99 on a 10,000-host fleet) ---
    # Starts empty: without its ``fleet`` row placement reads every candidate and the first
    # allocation rebuilds it (service/placement_index.py).
    op.create_table(
        "placement_racks",
        sa.Column("scope", sa.String(length=8), nullable=False),
        sa.Column("rack", sa.String(length=255), nullable=False),
        sa.Column("blocks", _json(), nullable=False),
        sa.Column("refreshed_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("scope", "rack"),
    )


def downgrade() -> None:
    op.drop_table("placement_racks")
    op.drop_column("leases", "users")
