"""what the labels take from the facts, stored once per distinct value (issue 8)

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-03 18:30:00

One block per change, named by what it is for; every block has its reverse in ``downgrade``
(reverse order). An empty body is a revision kept for work that needed no schema change.
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
#: Snapshot ids per UPDATE (each a range of ids: a short statement on a large history).
_BATCH = 5000
#: Distinct values per CASE in one UPDATE.
_CASES = 100
_INDEX = "ix_fact_snapshots_read_columns"
_COLUMNS_0016 = ["id", "gpu_count", "gpu_model", "driver", "cuda"]


def _snaps(*columns: sa.ColumnClause[Any]) -> sa.TableClause:
    return sa.table("fact_snapshots", sa.column("id", sa.Integer), *columns)


_SETS = sa.table(
    "fact_label_sets",
    sa.column("id", sa.Integer),
    sa.column("digest", sa.String),
    sa.column("value", _JSON),
)


def _id_ranges(conn: sa.Connection) -> list[tuple[int, int]]:
    """(lo, hi] ranges of :data:`_BATCH` snapshot ids covering every snapshot."""
    top = conn.execute(sa.text("SELECT max(id) FROM fact_snapshots")).scalar() or 0
    return [(lo, lo + _BATCH) for lo in range(0, top, _BATCH)]


def upgrade() -> None:
    # --- fact_label_sets: each distinct fact_labels value once ---
    # A snapshot's fact_labels (~1.4 KB) sat in its row after the facts document (~36 KB on
    # SQLite): the labels read walked the document's overflow pages for it (~0.3 s at 12,500
    # hosts), and it was too large for the snapshots' read index. A fleet has a few distinct
    # values (the 12,500-host lab: 3): each is stored once, keyed by the SHA-256 of its
    # canonical JSON text (store.repo.label_set_digest, which the writers use too), and a
    # snapshot holds its set's id, which the read index covers.
    op.create_table(
        "fact_label_sets",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("value", _JSON, nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("digest"),
    )
    if op.get_bind().dialect.name == "sqlite":  # a column's REFERENCES: no ALTER of constraints
        op.execute(
            "ALTER TABLE fact_snapshots ADD COLUMN fact_labels_id INTEGER"
            " REFERENCES fact_label_sets (id)"
        )
    else:
        op.add_column(
            "fact_snapshots",
            sa.Column(
                "fact_labels_id", sa.Integer(), sa.ForeignKey("fact_label_sets.id"), nullable=True
            ),
        )
    # Backfill in SQL, a range of snapshot ids at a time: its distinct values (as their JSON
    # text: SQLite's stored text, PostgreSQL's JSONB text) become sets, then one UPDATE
    # sets the ids by CASE on that text. Snapshots without a value keep NULL.
    from gpufleet.store.repo import label_set_digest

    conn = op.get_bind()
    text = sa.cast(sa.column("fact_labels", _JSON), sa.Text)
    snaps = _snaps(sa.column("fact_labels", _JSON), sa.column("fact_labels_id", sa.Integer))
    by_text: dict[str, int] = {}
    by_digest: dict[str, int] = {}
    for lo, hi in _id_ranges(conn):
        in_range = sa.and_(snaps.c.id > lo, snaps.c.id <= hi, snaps.c.fact_labels.is_not(None))
        texts = sorted(
            t
            for (t,) in conn.execute(sa.select(text).select_from(snaps).where(in_range).distinct())
        )
        for t in texts:
            if t in by_text:
                continue
            value = json.loads(t)
            digest = label_set_digest(value)
            if digest not in by_digest:
                by_digest[digest] = conn.execute(
                    _SETS.insert().values(digest=digest, value=value).returning(_SETS.c.id)
                ).scalar_one()
            by_text[t] = by_digest[digest]
        for i in range(0, len(texts), _CASES):
            group = texts[i : i + _CASES]
            conn.execute(
                snaps.update()
                .where(in_range, text.in_(group))
                .values(fact_labels_id=sa.case({t: by_text[t] for t in group}, value=text))
            )
    # Plain DROP COLUMN (SQLite >= 3.35 has it): a batch copy of fact_snapshots would trip
    # the foreign keys that point at it. The column is in no index.
    op.drop_column("fact_snapshots", "fact_labels")

    # --- fact_snapshots read columns index: the label set's id, covered ---
    op.drop_index(_INDEX, table_name="fact_snapshots")
    op.create_index(_INDEX, "fact_snapshots", [*_COLUMNS_0016, "fact_labels_id"])


def downgrade() -> None:
    # --- fact_snapshots read columns index (reverse): 0016's columns ---
    op.drop_index(_INDEX, table_name="fact_snapshots")
    op.create_index(_INDEX, "fact_snapshots", _COLUMNS_0016)

    # --- fact_label_sets (reverse): each snapshot's value back in its row ---
    op.add_column("fact_snapshots", sa.Column("fact_labels", _JSON, nullable=True))
    conn = op.get_bind()
    snaps = _snaps(sa.column("fact_labels", _JSON), sa.column("fact_labels_id", sa.Integer))
    value = sa.select(_SETS.c.value).where(_SETS.c.id == snaps.c.fact_labels_id).scalar_subquery()
    for lo, hi in _id_ranges(conn):
        conn.execute(
            snaps.update()
            .where(snaps.c.id > lo, snaps.c.id <= hi, snaps.c.fact_labels_id.is_not(None))
            .values(fact_labels=value)
        )
    # The column's foreign key goes with it (PostgreSQL drops it; SQLite's is the column's).
    op.drop_column("fact_snapshots", "fact_labels_id")
    op.drop_table("fact_label_sets")
