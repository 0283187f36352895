"""second schema revision (claim columns renamed, typed vocabulary, new tables)

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02 22:40:00

Each change below is one block, named by what it is for, so several changes made in the same
round can share this revision. Every block has its reverse in ``downgrade`` (reverse order).
"""

from __future__ import annotations

import sqlalchemy as sa  # noqa: F401
from alembic import op  # noqa: F401

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
