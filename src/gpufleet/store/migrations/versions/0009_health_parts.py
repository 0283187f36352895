"""GPU-level health, remediation, parts history, webhooks (issue 10)

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03 06:00:00

One block per change, named by what it is for; every block has its reverse in ``downgrade``
(reverse order). An empty body is a revision kept for work that needed no schema change.
"""

from __future__ import annotations

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
