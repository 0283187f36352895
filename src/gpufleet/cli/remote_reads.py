"""The views of remote mode's rows (:data:`gpufleet.cli.remote_table.READS`) whose API shape
is not the read model's: each takes the validated answer (the row's schema: mypy checks the
pair) and returns what the local command's presenter takes, so the presenter prints the
same tables and ``--json`` in both modes. And the body of ``failures import`` (a file's
text). No handler: the table's one handler calls these."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from gpufleet.errors import ConfigError, LocalIOError

if TYPE_CHECKING:
    from gpufleet.api.schemas import AllocationOut, BaselineOut, HostDetailOut
    from gpufleet.api.schemas_health import FailureImportOut
    from gpufleet.api.schemas_summary import SummaryOut
    from gpufleet.domain.spec import Baseline
    from gpufleet.service.allocation.allocation import Allocation
    from gpufleet.service.health.failures import ImportReport
    from gpufleet.service.views.hosts import HostDetail
    from gpufleet.service.views.summary import FleetSummary


def _dt(value: object) -> object:
    """A time the API sends inside a JSON object (text) as the service holds it."""
    return datetime.fromisoformat(value) if isinstance(value, str) else value


def host_detail(m: HostDetailOut) -> HostDetail:
    """``GET hosts/{name}`` as ``service.views.hosts.HostDetail`` (its facts are the
    document as collected; the summary, GPU and NIC tables are made from them again)."""
    from pydantic import TypeAdapter

    # HostDetail names HostFacts only for type checkers (the fast read layer does not import
    # pydantic); TypeAdapter resolves that name in this frame's namespace
    from gpufleet.domain.facts import HostFacts  # noqa: F401
    from gpufleet.service.views.hosts import HostDetail

    d = m.model_dump()
    d["view"] = d.pop("host")
    # a remediation is a JSON object in the API: its time comes as text
    d["remediations"] = [r | {"at": _dt(r.get("at"))} for r in d["remediations"]]
    return TypeAdapter(HostDetail).validate_python(d, from_attributes=True)


def fleet_summary(m: SummaryOut) -> FleetSummary:
    """``GET summary`` as ``service.views.summary.FleetSummary`` (its drift is the part of
    the report the summary publishes: differences by host, the fleet-wide counts)."""
    from pydantic import TypeAdapter

    from gpufleet.service.views.summary import FleetSummary

    d = m.model_dump()
    drift = d["drift"]
    d["drift"] = {"by_host": drift["hosts"], "summary": drift["summary"], "baselines": {},
                  "no_baseline": drift["no_baseline"], "no_facts": []}
    return TypeAdapter(FleetSummary).validate_python(d, from_attributes=True)


def allocation(m: AllocationOut) -> Allocation:
    """``POST leases`` as ``service.allocation.allocation.Allocation``."""
    from gpufleet.domain.placement import Refusal
    from gpufleet.service.allocation.allocation import Allocation
    from gpufleet.service.allocation.leases import LeaseView

    r = m.refusal
    return Allocation(
        lease=None if m.lease is None else LeaseView(**m.lease.model_dump()),
        refusal=None if r is None else Refusal(
            message=r.reason, counts=r.counts, held=list(r.held), missing_gpus=r.missing_gpus
        ),
        warnings=list(m.warnings),
    )


def failures_file(file: Path | None) -> dict[str, object]:
    """The body of ``POST failures/import``: the file's text, read as the local import reads
    it, and its format by the same suffixes (else the server looks at the first line)."""
    if file is None:
        raise ConfigError("failures import: give a FILE or --slurm (one of them)")
    try:
        text = file.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise LocalIOError(path=str(file), cause=exc.strerror or str(exc)) from None
    fmt = {".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl", ".csv": "csv"}.get(
        file.suffix.lower()
    )
    body: dict[str, object] = {"text": text}
    if fmt is not None:
        body["format"] = fmt
    return body


def import_report(m: FailureImportOut, file: Path) -> ImportReport:
    """``POST failures/import`` as ``service.health.failures.ImportReport``: the server names
    a refused line ``line N: why``, the CLI names it ``FILE:N: why``."""
    from gpufleet.service.health.failures import ImportReport

    return ImportReport(
        recorded=m.recorded, errors=[f"{file}:{e.removeprefix('line ')}" for e in m.errors]
    )


def baseline_row(m: BaselineOut) -> tuple[Baseline, list[str]]:
    """One row of ``GET baselines``: the baseline and the pools pointing at it."""
    return baseline_of(m.model_dump()), list(m.pools)


def baseline_of(b: dict[str, object]) -> Baseline:
    """The baseline of the API's ``BaselineOut`` as a dict (its pins are under ``spec``)."""
    from gpufleet.domain.spec import Baseline

    spec = b["spec"]
    assert isinstance(spec, dict)
    return Baseline.model_validate(
        {k: b[k] for k in ("name", "status", "purpose", "os_image_url")} | spec
    )
