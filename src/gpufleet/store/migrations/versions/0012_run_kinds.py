"""Inspect and evidence runs as queue jobs; chunks by host id (issue 12 workers)

Revision ID: 0012
Revises: 0010
Create Date: 2026-12-03 09:20:00

One block per change, named by what it is for; every block has its reverse in ``downgrade``
(reverse order).
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0012"
down_revision = "0010"
branch_labels = None
depends_on = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def _hosts(value: Any) -> list[Any]:
    if isinstance(value, str):  # SQLite returns the JSON text
        value = json.loads(value)
    return list(value or [])


def _convert_chunk_hosts(to_ids: bool) -> None:
    """Rewrite ``job_chunks.hosts``: names -> ids (upgrade) or ids -> names (downgrade);
    hosts no longer in the fleet are dropped from the chunk."""
    bind = op.get_bind()
    hosts = sa.table("hosts", sa.column("id", sa.Integer()), sa.column("name", sa.String()))
    chunks = sa.table("job_chunks", sa.column("id", sa.Integer()), sa.column("hosts", _JSON))
    rows = bind.execute(sa.select(chunks.c.id, chunks.c.hosts)).all()
    if not rows:
        return
    pairs = bind.execute(sa.select(hosts.c.id, hosts.c.name)).all()
    mapping: dict[Any, Any] = (
        {name: hid for hid, name in pairs} if to_ids else {hid: name for hid, name in pairs}
    )
    for chunk_id, value in rows:
        new = [mapping[h] for h in _hosts(value) if h in mapping]
        bind.execute(sa.update(chunks).where(chunks.c.id == chunk_id).values(hosts=new))


def upgrade() -> None:
    # --- run parameters (evidence: test, level, seconds) ---
    with op.batch_alter_table("job_runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("params", _JSON, nullable=True))
    # --- one result per host and inspect/evidence run ---
    op.create_table(
        "job_run_hosts",
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("host_id", sa.Integer(), nullable=False),
        sa.Column("outcome", sa.String(length=32), nullable=False),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["host_id"], ["hosts.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["run_id"], ["job_runs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("run_id", "host_id"),
    )
    # --- chunks carry host ids, not names ---
    _convert_chunk_hosts(to_ids=True)


def downgrade() -> None:
    # --- chunks carry host names again (reverse) ---
    _convert_chunk_hosts(to_ids=False)
    # --- one result per host and run (reverse) ---
    op.drop_table("job_run_hosts")
    # --- run parameters (reverse) ---
    with op.batch_alter_table("job_runs", schema=None) as batch_op:
        batch_op.drop_column("params")
