"""derived snapshot columns, snapshot content hash (issue 8)

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03 06:00:00

One block per change, named by what it is for; every block has its reverse in ``downgrade``
(reverse order). An empty body is a revision kept for work that needed no schema change.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_BATCH = 500


def _digest(facts: dict[str, Any]) -> str:
    """The content hash the collection computes (service/collect.facts_digest), frozen here."""
    body = {k: v for k, v in facts.items() if k != "collected_at"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def _derived(facts: dict[str, Any]) -> dict[str, Any]:
    dmi = facts.get("dmi") or {}
    uuid = dmi.get("uuid") if isinstance(dmi, dict) else None
    smi = facts.get("nvidia_smi") or {}
    gpus = (smi.get("gpus") or []) if isinstance(smi, dict) else []
    mems = [g.get("memory_total_mib") for g in gpus if isinstance(g, dict)]
    known = [m for m in mems if isinstance(m, int)]
    return {
        "h": _digest(facts),
        "u": uuid.upper() if isinstance(uuid, str) else None,
        "m": min(known) if known else None,
    }


def upgrade() -> None:
    # --- derived snapshot columns and the content hash (issue 8: scale) ---
    with op.batch_alter_table("fact_snapshots", schema=None) as batch_op:
        batch_op.add_column(sa.Column("content_hash", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("dmi_uuid", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("gpu_memory_mib", sa.Integer(), nullable=True))
        batch_op.create_index("ix_fact_snapshots_dmi_uuid", ["dmi_uuid"], unique=False)
    with op.batch_alter_table("hosts", schema=None) as batch_op:
        batch_op.create_index("ix_hosts_latest_snapshot", ["latest_snapshot_id"], unique=False)
    # Backfill every existing snapshot, in batches by id (facts decoded once each).
    conn = op.get_bind()
    snaps = sa.table(
        "fact_snapshots",
        sa.column("id", sa.Integer),
        sa.column("facts", sa.JSON),
        sa.column("content_hash", sa.String),
        sa.column("dmi_uuid", sa.String),
        sa.column("gpu_memory_mib", sa.Integer),
    )
    last = 0
    while True:
        rows = conn.execute(
            sa.select(snaps.c.id, snaps.c.facts)
            .where(snaps.c.id > last)
            .order_by(snaps.c.id)
            .limit(_BATCH)
        ).all()
        if not rows:
            break
        params = []
        for sid, facts in rows:
            if isinstance(facts, str):
                facts = json.loads(facts)
            params.append({"sid": sid} | _derived(facts if isinstance(facts, dict) else {}))
        conn.execute(
            snaps.update()
            .where(snaps.c.id == sa.bindparam("sid"))
            .values(
                content_hash=sa.bindparam("h"),
                dmi_uuid=sa.bindparam("u"),
                gpu_memory_mib=sa.bindparam("m"),
            ),
            params,
        )
        last = rows[-1][0]


def downgrade() -> None:
    # --- derived snapshot columns and the content hash (reverse) ---
    with op.batch_alter_table("hosts", schema=None) as batch_op:
        batch_op.drop_index("ix_hosts_latest_snapshot")
    with op.batch_alter_table("fact_snapshots", schema=None) as batch_op:
        batch_op.drop_index("ix_fact_snapshots_dmi_uuid")
        batch_op.drop_column("gpu_memory_mib")
        batch_op.drop_column("dmi_uuid")
        batch_op.drop_column("content_hash")
