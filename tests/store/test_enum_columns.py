"""Enum-like columns are typed with their domain enums (issue 25, item 5): a read returns the
member, a write of a value the enum does not know is refused before it reaches the database;
the DDL stays ``VARCHAR(n)`` (the migrations compare equal, tests/store/test_store_integrity.py).
On both databases."""

from __future__ import annotations

from enum import StrEnum

import pytest
from sqlalchemy import String, select
from sqlalchemy.exc import StatementError

from gpufleet.domain.bmc import BmcOutcome
from gpufleet.domain.campaign import ActionKind, CampaignStatus, HostStep
from gpufleet.domain.remediation import Action
from gpufleet.domain.spec import BaselineStatus
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.baselines import save_baseline
from gpufleet.store.tables import (
    BaselineRow,
    BmcRead,
    CampaignHost,
    CampaignRow,
    Remediation,
    StrEnumType,
)
from gpufleet.testing import BASELINE

COLUMNS = [
    (BaselineRow.status, BaselineStatus, 16),
    (CampaignRow.status, CampaignStatus, 20),
    (CampaignRow.action_kind, ActionKind, 12),
    (CampaignHost.step, HostStep, 20),
    (BmcRead.outcome, BmcOutcome, 20),
    (Remediation.action, Action, 20),
]


@pytest.mark.parametrize(("column", "enum", "length"), COLUMNS, ids=lambda v: str(v))
def test_the_column_is_typed_with_its_domain_enum_and_stays_a_varchar(
    column: object, enum: type[StrEnum], length: int
) -> None:
    col_type = column.property.columns[0].type  # type: ignore[attr-defined]
    assert isinstance(col_type, StrEnumType)
    assert col_type.enum_cls is enum
    assert isinstance(col_type.impl_instance, String)
    assert col_type.impl_instance.length == length
    assert max(len(m.value) for m in enum) <= length  # every member fits the column


def test_a_baseline_status_reads_back_as_the_member_and_a_typo_is_refused(fleet: Fleet) -> None:
    save_baseline(fleet, BASELINE)
    with fleet.db.session() as s:
        status = s.scalar(select(BaselineRow.status).where(BaselineRow.name == BASELINE.name))
    assert status is BaselineStatus.VALIDATED
    refused = pytest.raises(StatementError, match="'valiated' is not a BaselineStatus")
    with refused, fleet.db.session() as s:
        row = s.scalar(select(BaselineRow).where(BaselineRow.name == BASELINE.name))
        assert row is not None
        row.status = "valiated"  # type: ignore[assignment]
    with fleet.db.session() as s:
        kept = s.scalar(select(BaselineRow.status).where(BaselineRow.name == BASELINE.name))
    assert kept is BaselineStatus.VALIDATED
