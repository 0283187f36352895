"""API tokens in the store, dashboard (issue 12)

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03 06:00:00

One block per change, named by what it is for; every block has its reverse in ``downgrade``
(reverse order). An empty body is a revision kept for work that needed no schema change.
"""

from __future__ import annotations

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
