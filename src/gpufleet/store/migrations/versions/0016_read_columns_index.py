"""the snapshot columns fleet-wide reads take, in one index (issue 8)

Revision ID: 0016
Revises: 0011
Create Date: 2026-12-03 15:15:00

One block per change, named by what it is for; every block has its reverse in ``downgrade``
(reverse order). An empty body is a revision kept for work that needed no schema change.
"""

from __future__ import annotations

from alembic import op

revision = "0016"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # --- fact_snapshots: the columns summary, hosts list and drift read, covered ---
    # A snapshot row holds its facts document (~36 KB on SQLite) before these columns, so
    # SQLite reading any of them walks the document's overflow pages (~9 per host: ~0.3 s
    # at 12,500 hosts). The index holds the snapshot id with the derived columns the
    # fleet-wide reads take; they read it alone (SQLite: INDEXED BY, store.repo).
    op.create_index(
        "ix_fact_snapshots_read_columns",
        "fact_snapshots",
        ["id", "gpu_count", "gpu_model", "driver", "cuda"],
    )


def downgrade() -> None:
    # --- fact_snapshots read columns index (reverse) ---
    op.drop_index("ix_fact_snapshots_read_columns", table_name="fact_snapshots")
