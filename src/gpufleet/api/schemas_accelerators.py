"""A host's accelerators and vendor software in the API (issue 29 item 5): any vendor.

``HostDetailOut.accelerators`` / ``software`` (``GET /api/v1/hosts/{name}``, ``hosts show
--json``): the read model of :mod:`gpufleet.service.views.accelerators`, so the JSON says
what the CLI and the dashboard show. Only pydantic here (the CLI imports it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:  # the service's read models, checked by mypy; not loaded at run time
    from gpufleet.service.views.accelerators import AcceleratorRow, VendorSoftware


class AcceleratorOut(BaseModel):
    """One accelerator of any vendor (NVIDIA GPU, Ascend NPU, AMD GPU, Hygon DCU ...)."""

    model_config = ConfigDict(extra="forbid", from_attributes=True)

    vendor: str
    index: int = Field(description="The vendor tool's own numbering.")
    model: str
    serial: str | None
    uuid: str | None
    bus_id: str | None = Field(description='PCI address, "0000:c1:00.0".')
    memory_total_mib: int | None
    memory_used_mib: int | None
    temperature_c: float | None
    power_w: float | None
    power_limit_w: float | None
    health: str = Field(description="ok, warning, alarm or unknown (as the vendor tool says).")
    error_codes: list[str]
    error_counters: dict[str, int] = Field(description="The counters that are not zero.")
    firmware: dict[str, str]

    @classmethod
    def of(cls, row: AcceleratorRow) -> AcceleratorOut:
        """From ``service.views.accelerators.AcceleratorRow``."""
        return cls.model_validate(row)


class VendorSoftwareOut(BaseModel):
    """One vendor on the host: its accelerators' count and models, and its software."""

    model_config = ConfigDict(extra="forbid", from_attributes=True)

    vendor: str
    noun: str = Field(description="GPUs, NPUs, DCUs ...")
    description: str
    count: int
    models: list[str]
    driver: str | None
    firmware: str | None
    runtime: str | None
    runtime_name: str | None = Field(description="CUDA, CANN, ROCM, DTK ...")
    tool: str | None
    tool_version: str | None
    error: str | None = Field(description="Why the vendor's tool could not answer.")
    on_pci: int | None = Field(description="NVIDIA only: its GPUs on the PCI bus.")

    @classmethod
    def of(cls, v: VendorSoftware) -> VendorSoftwareOut:
        """From ``service.views.accelerators.VendorSoftware``."""
        return cls.model_validate(v)
