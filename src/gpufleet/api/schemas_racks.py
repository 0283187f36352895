"""API shapes of racks (issue 27): ``GET /api/v1/racks`` and ``/racks/{rack}``; the CLI's
``racks list/show --json`` print the same keys."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from gpufleet.api.schemas import Schema
from gpufleet.service.views.racks import RackRow


class RackFindingOut(Schema):
    kind: str = Field(description="missing_tray, extra_tray or domain_split.")
    message: str


class TrayOut(Schema):
    host: str
    slot: int | None
    tray_index: int | None
    host_id: int | None
    gpus: int
    state: str
    health: str
    reporting: bool = Field(description="Its latest collection answered.")
    fabric: str = Field(description="The fabric outcome (ok, restricted, fails ...).")
    fabric_reasons: list[str]
    fabric_message: str
    partition: str | None
    restricted: str | None = Field(description="Why a rack incident restricts it.")
    profiles: list[str]
    lease: dict[str, Any] | None
    alarms: list[dict[str, Any]]


class RackOut(Schema):
    """One rack (chassis serial); ``trays`` only from ``/racks/{rack}``."""

    rack: str
    model: str | None = Field(description="The manifest's rack model (None: no manifest).")
    nvl_domain: str | None = Field(description="Its NVLink domain (None: none or several).")
    domains: list[str]
    partitions: list[str]
    trays: int
    expected_trays: int | None
    gpus: int
    free_gpus: int
    state: str = Field(description="ok, degraded (a tray not ok) or alarmed (a finding).")
    findings: list[RackFindingOut]
    tray_rows: list[TrayOut] | None = Field(default=None, description="Trays in slot order.")

    @classmethod
    def of(cls, r: RackRow, *, trays: bool) -> RackOut:
        d = r.as_json(trays=False)
        rows = [TrayOut(**t.__dict__) for t in r.tray_rows] if trays else None
        return cls(**d, tray_rows=rows)
