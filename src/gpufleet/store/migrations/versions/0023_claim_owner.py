"""who holds a host's claim: boot identity, pid and start time, machine (issue 24)

Revision ID: 0023
Revises: 0018
Create Date: 2026-12-05 10:50:00

A claim of a process that died (``kill -9``, a lost terminal) used to hold its hosts until
``claimed_until``; with its owner recorded, a claim whose owner ran on this machine's current
boot and is gone is taken over at once (``service/claim_owner.py``).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # -- the owner of a host's claim (meaningful only while claim_token is set)
    op.add_column("hosts", sa.Column("claim_owner", sa.String(200), nullable=True))


def downgrade() -> None:
    op.drop_column("hosts", "claim_owner")
