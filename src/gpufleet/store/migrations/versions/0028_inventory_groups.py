"""the enrolled inventory's own groups: children and group variables (issue 26 item 5)

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-05 16:50:00

One block per change, named by what it is for; every block has its reverse in ``downgrade``
(reverse order).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    # --- inventory_groups: each group of an enrolled inventory (``all`` included, for its
    # vars) with its child groups and its own non-secret variables, so the Ansible dynamic
    # inventory gives a site's playbooks the groups, children and vars of their hosts.ini.
    # One row per name: the last enroll naming a group writes it. Hosts keep their groups in
    # hosts.groups (unchanged); a host enrolled before this has no group rows to follow.
    op.create_table(
        "inventory_groups",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("children", _JSON, nullable=False),
        sa.Column("vars", _JSON, nullable=False),
        sa.Column("source", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
    )


def downgrade() -> None:
    # --- inventory_groups (reverse) ---
    op.drop_table("inventory_groups")
