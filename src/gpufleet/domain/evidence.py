"""Evidence from *active* checks (DCGM diagnostics, nccl-tests, gpu-burn). Pure data.

Unlike :mod:`gpufleet.domain.facts` (what a host has), evidence records what a host *did*
under load; parsers in :mod:`gpufleet.collect.active` produce these from real tool output.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

DiagStatus = Literal["PASS", "FAIL", "WARN", "SKIP"]


class Evidence(BaseModel):
    """Base for evidence records: immutable, unknown keys refused."""

    model_config = ConfigDict(frozen=True, extra="forbid")


# ------------------------------------------------------------------------------ DCGM


class DcgmGpuResult(Evidence):
    """The outcome of one DCGM test on one GPU."""

    gpu_id: int
    status: DiagStatus
    warnings: list[str] = Field(default_factory=list)


class DcgmTest(Evidence):
    """One DCGM diagnostic test (e.g. "Denylist", "Memory") with its per-GPU results."""

    name: str
    category: str  # "Deployment", "Hardware", "Integration", "Performance", "Custom"
    results: list[DcgmGpuResult] = Field(default_factory=list)

    @property
    def status(self) -> dict[int, DiagStatus]:
        """GPU id -> status."""
        return {r.gpu_id: r.status for r in self.results}


class DcgmDiagResult(Evidence):
    """``dcgmi diag -r <level> -j``.

    ``passed`` is False when any test FAILed on any GPU or DCGM reported a runtime error;
    WARN and SKIP do not fail the run (DCGM itself treats them as non-fatal).
    """

    dcgm_version: str | None = None
    level: int | None = Field(default=None, ge=1, le=4)
    gpu_ids: list[int] = Field(default_factory=list)
    tests: list[DcgmTest] = Field(default_factory=list)
    runtime_error: str | None = None
    passed: bool

    @property
    def failed_gpus(self) -> list[int]:
        """GPUs with at least one FAIL, sorted."""
        return sorted({r.gpu_id for t in self.tests for r in t.results if r.status == "FAIL"})


# ------------------------------------------------------------------------ nccl-tests


class NcclMeasurement(Evidence):
    """One half (out-of-place or in-place) of a nccl-tests result row."""

    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    wrong: int | None = None  # None when validation is off ("N/A")


class NcclRow(Evidence):
    """One message size of a nccl-tests run."""

    size_bytes: int
    count: int
    dtype: str
    redop: str | None = None
    root: int | None = None
    out_of_place: NcclMeasurement
    in_place: NcclMeasurement


class NcclResult(Evidence):
    """A nccl-tests run (``all_reduce_perf`` and friends); bandwidths in GB/s."""

    op: str
    max_bus_bw_gbps: float
    avg_bus_bw_gbps: float | None = None  # the "# Avg bus bandwidth" trailer
    size_max_bytes: int
    out_of_bounds_values: int | None = None
    rows: list[NcclRow] = Field(default_factory=list)

    @property
    def wrong_total(self) -> int:
        """Sum of #wrong over all rows (0 when validation was off)."""
        return sum((m.wrong or 0) for r in self.rows for m in (r.out_of_place, r.in_place))


# -------------------------------------------------------------------------- gpu-burn


class GpuBurnGpu(Evidence):
    """gpu-burn's verdict on one GPU."""

    index: int
    ok: bool  # "OK" vs "FAULTY"
    errors: int | None = None  # from the last progress line, when there was one


class GpuBurnResult(Evidence):
    """The final summary of a ``gpu_burn`` run."""

    gpus: list[GpuBurnGpu] = Field(default_factory=list)

    @property
    def passed(self) -> bool:
        """True when every tested GPU is OK."""
        return bool(self.gpus) and all(g.ok for g in self.gpus)

    @property
    def faulty(self) -> list[int]:
        """Indices of FAULTY GPUs."""
        return [g.index for g in self.gpus if not g.ok]
