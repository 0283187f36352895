"""accelerator columns of every vendor (issue 15)

Revision ID: 0011
Revises: 0014
Create Date: 2026-12-03 10:30:00

One block per change, named by what it is for; every block has its reverse in ``downgrade``
(reverse order). An empty body is a revision kept for work that needed no schema change.
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0014"
branch_labels = None
depends_on = None

_BATCH = 200
_COLUMNS = ("driver", "gpu_count", "gpu_model", "gpu_memory_mib")


def upgrade() -> None:
    # --- fact_snapshots accelerator columns count Ascend NPUs and AMD GPUs (data only) ---
    # gpu_count, gpu_model, gpu_memory_mib and driver were nvidia-smi's alone: an Ascend or
    # AMD host listed 0 GPUs, was no placement candidate and counted nothing in capacity
    # until its facts changed. The hosts' latest snapshots (what the list, placement and
    # capacity read) are recomputed from their facts in batches; only changed rows are
    # written, so an NVIDIA fleet's rows stay as they are (their values are equal).
    from gpufleet.domain.facts import HostFacts
    from gpufleet.domain.snapshot_columns import derived_columns

    conn = op.get_bind()
    snaps = sa.table(
        "fact_snapshots",
        sa.column("id", sa.Integer),
        sa.column("facts", sa.JSON),
        sa.column("driver", sa.String),
        sa.column("gpu_count", sa.Integer),
        sa.column("gpu_model", sa.String),
        sa.column("gpu_memory_mib", sa.Integer),
    )
    hosts = sa.table("hosts", sa.column("latest_snapshot_id", sa.Integer))
    latest = sa.select(hosts.c.latest_snapshot_id).where(hosts.c.latest_snapshot_id.is_not(None))
    last = 0
    while True:
        rows = conn.execute(
            sa.select(snaps.c.id, snaps.c.facts, *(snaps.c[c] for c in _COLUMNS))
            .where(snaps.c.id > last, snaps.c.id.in_(latest))
            .order_by(snaps.c.id)
            .limit(_BATCH)
        ).all()
        if not rows:
            break
        params = []
        for sid, doc, *stored in rows:
            if isinstance(doc, str):
                doc = json.loads(doc)
            try:
                want = derived_columns(HostFacts.model_validate(doc))
            except ValueError:  # a document this gpufleet cannot read: left as it is
                continue
            if [want[c] for c in _COLUMNS] != list(stored):
                params.append({"sid": sid, **{f"v_{c}": want[c] for c in _COLUMNS}})
        if params:
            conn.execute(
                snaps.update()
                .where(snaps.c.id == sa.bindparam("sid"))
                .values({c: sa.bindparam(f"v_{c}") for c in _COLUMNS}),
                params,
            )
        last = rows[-1][0]


def downgrade() -> None:
    # --- fact_snapshots accelerator columns (reverse) ---
    # Nothing to undo in the schema; the recomputed values stay (an older gpufleet reads
    # them as counts of accelerators, which they are).
    pass
