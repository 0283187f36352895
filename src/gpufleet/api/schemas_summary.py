"""The shapes of ``GET /api/v1/summary`` and ``GET /api/v1/labels``: the same JSON that
``gpufleet summary --json`` and ``gpufleet labels --json`` print (remote mode prints these
responses as they come)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import pydantic_core
from pydantic import AliasChoices, Field

from gpufleet.api.schemas import DriftItemOut, DriftSummaryOut, Mirror

if TYPE_CHECKING:  # the service's read models, checked by mypy; not loaded at run time
    # (named in Mirror["..."], where ruff does not look)
    from gpufleet.domain.labels import Taint  # noqa: F401
    from gpufleet.service.hosts.baselines import DriftReport  # noqa: F401
    from gpufleet.service.hosts.labels import HostLabels
    from gpufleet.service.views.summary import FleetSummary  # noqa: F401


# The summary's part of the drift report: only these fields are read (issue 8: at 12,500
# hosts the whole report names every host). No docstring: it would be published.
class SummaryDriftOut(Mirror["DriftReport"]):
    summary: list[DriftSummaryOut]
    hosts: dict[str, list[DriftItemOut]] = Field(
        description="Host -> its differences.",
        validation_alias=AliasChoices("hosts", "by_host"),  # the report's by_host
    )
    no_baseline: list[str]


class SummaryOut(Mirror["FleetSummary"]):
    """``gpufleet summary``: hosts per state, available GPUs per profile and model, the
    hosts that need a look (each row ``host`` plus ``fault``/``reason``), drift."""

    hosts: int
    per_state: dict[str, int]
    gpus_per_profile_model: dict[str, dict[str, int]] = Field(
        description="Profile -> GPU model -> available GPUs."
    )
    hosts_per_profile: dict[str, int]
    quarantined: list[dict[str, str | None]]
    validating: list[dict[str, str | None]]
    unreachable: list[dict[str, str | None]]
    warnings: list[dict[str, str | None]]
    drift: SummaryDriftOut
    gpus_total: int
    gpus_available: int
    alarms: list[dict[str, str | None]]
    extra: dict[str, Any]
    back: list[dict[str, str | None]]
    accelerators: list[dict[str, Any]] = Field(
        default_factory=list,
        description="Per vendor and model (issue 15): vendor, model, hosts, accelerators, "
        "available (on available hosts).",
    )
    per_vendor: list[dict[str, Any]] = Field(
        default_factory=list,
        description="Per vendor (issue 15), the most first: vendor, noun (GPUs, NPUs), "
        "brand (NVIDIA, Ascend, Hygon), accelerators, available (on available hosts); "
        "gpus_total is their sum.",
    )
    nodes_by_role: dict[str, dict[str, int]] = Field(
        default_factory=dict,
        description="The nodes that are not GPU nodes (gpufleet_role cpu, storage), counted "
        "apart from every GPU count: role -> hosts, available.",
    )


class TaintOut(Mirror["Taint"]):
    key: str
    value: str
    effect: str


class LabelsOut(Mirror["HostLabels"]):
    """One host's Kubernetes labels and taints (``gpufleet labels``)."""

    host: str
    labels: dict[str, str]
    taints: list[TaintOut]

    @classmethod
    def json_of(cls, rows: Iterable[HostLabels]) -> bytes:
        """The JSON of ``[LabelsOut.of(r) for r in rows]`` as the API sends it (pydantic's
        compact JSON, the same bytes), without a model per host (issue 8: 12,500 hosts'
        labels are ~12 MB): the fields are plain strings already (label keys and values
        are sanitized, taints are strings)."""
        return pydantic_core.to_json(
            [
                {
                    "host": r.host,
                    "labels": r.labels,
                    "taints": [
                        {"key": t.key, "value": t.value, "effect": t.effect} for t in r.taints
                    ],
                }
                for r in rows
            ]
        )
