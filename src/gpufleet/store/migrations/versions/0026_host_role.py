"""a host's role: gpu, cpu or storage node (issue 26 item 9)

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-05 14:50:00

One block per change, named by what it is for; every block has its reverse in ``downgrade``
(reverse order).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # --- hosts: the inventory's gpufleet_role (domain/roles.py); every host enrolled before
    # it is a GPU host. Capacity, placement and GPU labels count role 'gpu' only.
    op.add_column(
        "hosts", sa.Column("role", sa.String(16), server_default="gpu", nullable=False)
    )
    op.create_index("ix_hosts_role", "hosts", ["role"])


def downgrade() -> None:
    # --- hosts role (reverse) ---
    op.drop_index("ix_hosts_role", table_name="hosts")
    op.drop_column("hosts", "role")  # native DROP COLUMN (SQLite >= 3.35)
