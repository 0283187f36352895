"""API tokens, worker jobs (issue 12)

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03 06:00:00

One block per change, named by what it is for; every block has its reverse in ``downgrade``
(reverse order). An empty body is a revision kept for work that needed no schema change.

The job queue's own schema (procrastinate's tables and functions, PostgreSQL only) is not a
gpufleet table: ``gpufleet db upgrade`` applies it after the migrations
(:meth:`gpufleet.store.db.Database.migrate` with ``queue=True``).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    # --- runs of background work and their chunks (issue 12 item 2: workers) ---
    op.create_table(
        "job_runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=20), nullable=False),
        sa.Column("selector", sa.Text(), nullable=True),
        sa.Column("state", sa.String(length=20), nullable=False),
        sa.Column("actor", sa.String(length=128), nullable=False),
        sa.Column("schedule", sa.String(length=64), nullable=True),
        sa.Column("period", sa.BigInteger(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("collection_run_id", sa.Integer(), nullable=True),
        sa.Column("hosts", sa.Integer(), nullable=False),
        sa.Column("chunks", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["collection_run_id"], ["collection_runs.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("job_runs", schema=None) as batch_op:
        batch_op.create_index("ix_job_runs_state", ["state"], unique=False)
        batch_op.create_index("ux_job_runs_schedule_period", ["schedule", "period"], unique=True)
    op.create_table(
        "job_chunks",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("hosts", _JSON, nullable=False),
        sa.Column("state", sa.String(length=20), nullable=False),
        sa.Column("job_id", sa.BigInteger(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("worker", sa.String(length=128), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("result", _JSON, nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["run_id"], ["job_runs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("job_chunks", schema=None) as batch_op:
        batch_op.create_index("ux_job_chunks_run_seq", ["run_id", "seq"], unique=True)


def downgrade() -> None:
    # --- runs of background work (reverse) ---
    op.drop_table("job_chunks")
    op.drop_table("job_runs")
