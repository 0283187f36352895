"""a host that failed reclaim returns only through a reclaim that passes (issue 24)

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-05 10:45:00

One block per change, named by what it is for; every block has its reverse in ``downgrade``
(reverse order).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # --- hosts.reclaim_due: why a host owes a passing reclaim ---
    # Set when a lease releases the host, kept while reclaim finds the lessee's leftovers,
    # cleared by a reclaim whose checks pass or by an audited `unquarantine --force`.
    # Validation never makes a host that owes one available (service/validate.py).
    op.add_column("hosts", sa.Column("reclaim_due", sa.Text(), nullable=True))
    # Hosts released before this revision that are still in reclaiming, or that a reclaim
    # quarantined, owe one now (fail closed: their leftovers were never seen clean).
    op.execute(
        "UPDATE hosts SET reclaim_due = 'reclaim not yet passed (before schema 0024)' "
        "WHERE state = 'reclaiming' OR fault = 'reclaim_failed'"
    )


def downgrade() -> None:
    op.drop_column("hosts", "reclaim_due")  # native DROP COLUMN (SQLite >= 3.35)
