"""a host's rack and NVLink domain from its facts, and the rack incident restricting it
(issue 27)

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-05 15:20:00

One block per change, named by what it is for; every block has its reverse in ``downgrade``
(reverse order).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # --- hosts: the rack (chassis serial) and NVLink domain (clusterUuid) its latest facts
    # report (domain/fabric.host_fabric; NULL: not a multi-node NVLink member, or not
    # collected since: written at the next collection), read by placement (--nvl-domain)
    # without decoding facts; and why a rack incident keeps it out of NVLink-domain placement
    # (NULL: it does not).
    op.add_column("hosts", sa.Column("nvl_rack", sa.String(64), nullable=True))
    op.add_column("hosts", sa.Column("nvl_domain", sa.String(64), nullable=True))
    op.add_column("hosts", sa.Column("nvl_restricted", sa.Text(), nullable=True))
    op.create_index("ix_hosts_nvl_domain", "hosts", ["nvl_domain"])


def downgrade() -> None:
    # --- hosts NVLink domain (reverse) ---
    op.drop_index("ix_hosts_nvl_domain", table_name="hosts")
    op.drop_column("hosts", "nvl_restricted")  # native DROP COLUMN (SQLite >= 3.35)
    op.drop_column("hosts", "nvl_domain")
    op.drop_column("hosts", "nvl_rack")
