"""inspection samples, rules state, remediation, parts history, webhooks (issue 10)

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03 06:00:00

One block per change, named by what it is for; every block has its reverse in ``downgrade``
(reverse order). An empty body is a revision kept for work that needed no schema change.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    # --- inspection sweep samples and hourly roll-ups (issue 10 item 2: gpufleet inspect) ---
    _create_samples()

    # --- automatic quarantines and fleet alarms (issue 10 items 4/6: blast-radius guard) ---
    op.create_table(
        "inspect_quarantines",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("host_id", sa.Integer(), nullable=False),
        sa.Column("at", _TS, nullable=False),
        sa.Column("rule", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(["host_id"], ["hosts.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_inspect_quarantines_at", "inspect_quarantines", ["at"])
    op.create_table(
        "fleet_alarms",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=40), nullable=False),
        sa.Column("severity", sa.String(length=10), nullable=False),
        sa.Column("opened_at", _TS, nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("data", _JSON, nullable=False),
        sa.Column("closed_at", _TS, nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_fleet_alarms_kind", "fleet_alarms", ["kind"])


def downgrade() -> None:
    # --- automatic quarantines and fleet alarms (reverse) ---
    op.drop_index("ix_fleet_alarms_kind", table_name="fleet_alarms")
    op.drop_table("fleet_alarms")
    op.drop_index("ix_inspect_quarantines_at", table_name="inspect_quarantines")
    op.drop_table("inspect_quarantines")

    # --- inspection sweep samples and hourly roll-ups (reverse) ---
    op.drop_table("sample_rollups")
    op.drop_index("ix_host_samples_at", table_name="host_samples")
    op.drop_table("host_samples")
    op.drop_index("ix_gpu_samples_at", table_name="gpu_samples")
    op.drop_table("gpu_samples")


def _create_samples() -> None:
    floats = [
        "temperature_c",
        "power_w",
        "power_limit_w",
        "sm_clock_mhz",
        "max_sm_clock_mhz",
        "mem_clock_mhz",
        "util_gpu_pct",
        "util_mem_pct",
        "memory_used_mib",
        "fan_pct",
    ]
    bigints = ["ecc_vol_corr", "ecc_vol_unc", "ecc_agg_corr", "ecc_agg_unc"]
    op.create_table(
        "gpu_samples",
        sa.Column("host_id", sa.Integer(), nullable=False),
        sa.Column("at", _TS, nullable=False),
        sa.Column("gpu_index", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("uuid", sa.String(length=64), nullable=True),
        sa.Column("model", sa.String(length=96), nullable=True),
        sa.Column("pci_bus_id", sa.String(length=32), nullable=True),
        *(sa.Column(c, sa.Float(), nullable=True) for c in floats),
        *(sa.Column(c, sa.BigInteger(), nullable=True) for c in bigints),
        sa.Column("retired_sbe", sa.Integer(), nullable=True),
        sa.Column("retired_dbe", sa.Integer(), nullable=True),
        sa.Column("retired_pending", sa.Boolean(), nullable=True),
        sa.Column("remap_corr", sa.Integer(), nullable=True),
        sa.Column("remap_unc", sa.Integer(), nullable=True),
        sa.Column("remap_pending", sa.Boolean(), nullable=True),
        sa.Column("remap_failure", sa.Boolean(), nullable=True),
        sa.Column("pcie_gen", sa.Integer(), nullable=True),
        sa.Column("pcie_gen_max", sa.Integer(), nullable=True),
        sa.Column("pcie_width", sa.Integer(), nullable=True),
        sa.Column("pcie_width_max", sa.Integer(), nullable=True),
        sa.Column("reasons", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["host_id"], ["hosts.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("host_id", "at", "gpu_index"),
    )
    op.create_index("ix_gpu_samples_at", "gpu_samples", ["at"])
    op.create_table(
        "host_samples",
        sa.Column("host_id", sa.Integer(), nullable=False),
        sa.Column("at", _TS, nullable=False),
        sa.Column("gpus_ok", sa.Boolean(), nullable=False),
        sa.Column("gpu_count", sa.Integer(), nullable=False),
        sa.Column("uptime_s", sa.Float(), nullable=True),
        sa.Column("nvlink", sa.Boolean(), nullable=False),
        sa.Column("xids", _JSON, nullable=False),
        sa.Column("ports", _JSON, nullable=False),
        sa.Column("disks", _JSON, nullable=False),
        sa.Column("problems", _JSON, nullable=False),
        sa.Column("kmsg_cursor", sa.String(length=64), nullable=True),
        sa.ForeignKeyConstraint(["host_id"], ["hosts.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("host_id", "at"),
    )
    op.create_index("ix_host_samples_at", "host_samples", ["at"])
    op.create_table(
        "sample_rollups",
        sa.Column("host_id", sa.Integer(), nullable=False),
        sa.Column("hour", _TS, nullable=False),
        sa.Column("gpu_index", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("model", sa.String(length=96), nullable=True),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("temperature_max", sa.Float(), nullable=True),
        sa.Column("temperature_avg", sa.Float(), nullable=True),
        sa.Column("power_avg", sa.Float(), nullable=True),
        sa.Column("sm_clock_avg", sa.Float(), nullable=True),
        sa.Column("util_avg", sa.Float(), nullable=True),
        sa.Column("ecc_unc_max", sa.BigInteger(), nullable=True),
        sa.Column("throttled", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["host_id"], ["hosts.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("host_id", "hour", "gpu_index"),
    )
