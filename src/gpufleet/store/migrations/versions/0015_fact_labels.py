"""what the labels take from the facts, stored with each snapshot (issue 8)

Revision ID: 0015
Revises: 0012
Create Date: 2026-12-03 09:30:00

One block per change, named by what it is for; every block has its reverse in ``downgrade``
(reverse order). An empty body is a revision kept for work that needed no schema change.
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0015"
down_revision = "0012"
branch_labels = None
depends_on = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
_BATCH = 200


def upgrade() -> None:
    # --- fact_snapshots.fact_labels: the labels' facts, read without the facts document ---
    op.add_column("fact_snapshots", sa.Column("fact_labels", _JSON, nullable=True))
    # Backfill the hosts' latest snapshots (older ones are history: labels never read them),
    # in batches. The value carries its version (domain.labels.FACT_LABELS_VERSION): one of
    # another version is ignored by the readers, who then decode the facts, so computing it
    # with the code of the day is safe even when this revision runs under a later gpufleet.
    from gpufleet.domain.facts import HostFacts
    from gpufleet.domain.labels import fact_labels

    conn = op.get_bind()
    snaps = sa.table(
        "fact_snapshots",
        sa.column("id", sa.Integer),
        sa.column("facts", sa.JSON),
        sa.column("fact_labels", _JSON),
    )
    hosts = sa.table("hosts", sa.column("latest_snapshot_id", sa.Integer))
    latest = sa.select(hosts.c.latest_snapshot_id).where(hosts.c.latest_snapshot_id.is_not(None))
    last = 0
    while True:
        rows = conn.execute(
            sa.select(snaps.c.id, snaps.c.facts)
            .where(snaps.c.id > last, snaps.c.id.in_(latest))
            .order_by(snaps.c.id)
            .limit(_BATCH)
        ).all()
        if not rows:
            break
        params = []
        for sid, doc in rows:
            if isinstance(doc, str):
                doc = json.loads(doc)
            try:
                value = fact_labels(HostFacts.model_validate(doc))
            except ValueError:  # a document this gpufleet cannot read: left to the readers
                continue
            params.append({"sid": sid, "fl": value})
        if params:
            conn.execute(
                snaps.update()
                .where(snaps.c.id == sa.bindparam("sid"))
                .values(fact_labels=sa.bindparam("fl")),
                params,
            )
        last = rows[-1][0]


def downgrade() -> None:
    # --- fact_snapshots.fact_labels (reverse) ---
    # Plain DROP COLUMN (SQLite >= 3.35 has it): a batch copy of fact_snapshots would trip
    # the foreign keys that point at it.
    op.execute("ALTER TABLE fact_snapshots DROP COLUMN fact_labels")
