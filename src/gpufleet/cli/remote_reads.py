"""Remote mode's commands that one row of :data:`gpufleet.cli.remote_table.READS` cannot
say yet (an answer whose API shape is not the read model's: host page, summary, drift,
capacity, baselines; several calls or a file: allocation, failures import), registered with
:func:`gpufleet.cli.remote.remote`."""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from gpufleet.cli.common import print_json
from gpufleet.cli.remote import (
    Client,
    _dt,
    refuse_options,
    remote,
)
from gpufleet.errors import (
    ConfigError,
)

if TYPE_CHECKING:
    from gpufleet.domain.spec import Baseline

# --- hosts, events, summary, labels ---------------------------------------------------------


@remote("hosts.show_cmd", routes=("GET hosts/{name}",))
def hosts_show(api: Client, name: str, as_json: bool) -> None:
    from types import SimpleNamespace

    from gpufleet.api.schemas import AlarmOut, HostOut
    from gpufleet.cli.hosts_show import render_host
    from gpufleet.domain.facts import HostFacts

    d = api.get(f"hosts/{urllib.parse.quote(name, safe='')}")
    if as_json:
        print_json(d)
        return

    def timed(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [r | {"at": _dt(r.get("at"))} for r in rows]

    detail: Any = SimpleNamespace(
        view=HostOut.model_validate(d["host"]),
        facts=None if d["facts"] is None else HostFacts.model_validate(d["facts"]),
        usable_gpus=d["usable_gpus"],
        unusable_gpus=d["unusable_gpus"],
        reclaim_due=d.get("reclaim_due"),
        collections=d["collections"],
        alarms=[AlarmOut.model_validate(a) for a in d["alarms"]],
        remediations=timed(d["remediations"]),
        evidence=timed(d["evidence"]),
        events=timed(d["events"]),
    )
    render_host(detail)


@remote("summary.summary_cmd", routes=("GET summary",))
def summary(api: Client, selector: str | None, as_json: bool) -> None:
    from gpufleet.cli.summary import render_summary
    from gpufleet.domain.drift import DriftItem, DriftSummary
    from gpufleet.service.hosts.baselines import DriftReport
    from gpufleet.service.views.summary import FleetSummary

    d = api.get("summary", selector=selector)
    if as_json:
        print_json(d)
        return
    drift = d["drift"]
    report = DriftReport(
        by_host={h: [DriftItem(**i) for i in items] for h, items in drift["hosts"].items()},
        summary=[DriftSummary(**x) for x in drift["summary"]],
        baselines={},
        no_baseline=drift["no_baseline"],
        no_facts=[],
    )
    render_summary(FleetSummary(**(d | {"drift": report})))


# --- leases, allocation, capacity ---------------------------------------------------------


def _lease(d: dict[str, Any]) -> Any:
    from gpufleet.api.schemas import LeaseOut
    from gpufleet.service.allocation.leases import LeaseView

    return LeaseView(**dict(LeaseOut.model_validate(d)))


def _when(value: str | None, flag: str) -> str | None:
    from gpufleet.cli.common import when  # local unless zoned; sent zoned (API: naive = UTC)

    t = when(value, flag)
    return None if t is None else t.isoformat()


@remote("alloc.allocate_cmd", routes=("POST leases",))
def allocate(
    api: Client,
    gpus: int | None,
    hosts: int | None,
    model: str | None,
    min_gpu_memory: str | None,
    fabric: str | None,
    profile: str | None,
    cuda: str | None,
    nvl_domain: bool,
    selector: str | None,
    owner: str,
    purpose: str,
    for_: str | None,
    until: str | None,
    start: str | None,
    users: list[str] | None,
    account: str | None,
    as_json: bool,
) -> None:
    from gpufleet.cli.alloc import show_allocation
    from gpufleet.domain.placement import Refusal
    from gpufleet.service.allocation.allocation import Allocation

    body = {
        "gpus": gpus,
        "hosts": hosts,
        "model": model,
        "min_gpu_memory": min_gpu_memory,
        "fabric": fabric,
        "profile": profile,
        "cuda": cuda,
        "nvl_domain": nvl_domain,
        "selector": selector,
        "owner": owner,
        "purpose": purpose,
        "for": for_,
        "until": _when(until, "--until"),
        "start": _when(start, "--start"),
        "users": users or None,
        "account": account,
    }
    out = api.post("leases", {k: v for k, v in body.items() if v is not None})
    r = out.get("refusal")
    show_allocation(
        Allocation(
            lease=_lease(out["lease"]) if out.get("lease") else None,
            refusal=None
            if r is None
            else Refusal(
                message=r["reason"],
                counts=r["counts"],
                held=r["held"],
                missing_gpus=r["missing_gpus"],
            ),
            warnings=list(out.get("warnings") or []),
        ),
        as_json,
    )


@remote("alloc.capacity_cmd", routes=("GET capacity",))
def capacity(
    api: Client,
    ctx: typer.Context,
    selector: str | None,
    at: str | None,
    as_json: bool,
    k8s: bool,
    kubeconfig: Path | None,
    slurm: bool = False,
) -> None:
    from gpufleet.cli.alloc import show_capacity
    from gpufleet.service.allocation.capacity import CapacityReport

    if ctx.invoked_subcommand is not None:
        return
    refuse_options(**{"--k8s": k8s, "--kubeconfig": kubeconfig, "--slurm": slurm})
    d = api.get("capacity", selector=selector, at=_when(at, "--at"))
    rep = CapacityReport(
        at=_dt(d["at"]) or datetime.now().astimezone(),
        rows=d["rows"],
        totals=d["totals"],
        back=[b | {"eta": _dt(b["eta"])} for b in d["back"]],
        domains=d.get("domains", []),
        largest_domain_block=d.get("largest_domain_block", 0),
    )
    show_capacity(rep, None, as_json)


# --- alarms, failures, drift, baselines, pools ----------------------------------------------


@remote("failures.import_cmd", routes=("POST failures/import",))
def failures_import(api: Client, file: Path | None, as_json: bool, slurm: bool, since: str) -> None:
    from gpufleet.cli.failures import show_import
    from gpufleet.errors import LocalIOError
    from gpufleet.service.health.failures import ImportReport

    refuse_options(**{"--slurm": slurm})
    if file is None:
        raise ConfigError("failures import: give a FILE or --slurm (one of them)")
    try:
        text = file.read_text()
    except OSError as exc:
        raise LocalIOError(path=str(file), cause=exc.strerror or str(exc)) from None
    fmt = {".jsonl": "jsonl", ".json": "jsonl", ".csv": "csv"}.get(file.suffix)
    d = api.post("failures/import", {"text": text, "format": fmt})
    # the server names a refused line "line N: why"; the CLI names it FILE:N: why
    errors = [f"{file}:{e.removeprefix('line ')}" for e in d["errors"]]
    show_import(ImportReport(recorded=d["recorded"], errors=errors), as_json)


@remote("baseline.drift_cmd", routes=("GET drift",))
def drift(api: Client, selector: str | None, as_json: bool) -> None:
    from gpufleet.cli.baseline import show_drift
    from gpufleet.domain.drift import DriftItem, DriftSummary, PoolDrift, PoolField
    from gpufleet.service.hosts.baselines import DriftReport

    d = api.get("drift", selector=selector)
    pools = [
        PoolDrift(**({k: v for k, v in p.items() if k != "drifts"}
                     | {"fields": [PoolField(**f) for f in p["fields"]]}))
        for p in d.get("pools", [])
    ]
    show_drift(
        DriftReport(
            by_host={h: [DriftItem(**i) for i in items] for h, items in d["by_host"].items()},
            summary=[DriftSummary(**x) for x in d["summary"]],
            baselines=d["baselines"],
            no_baseline=d["no_baseline"],
            no_facts=d["no_facts"],
            pools=pools,
        ),
        as_json,
    )


@remote("baseline.list_cmd", routes=("GET baselines",))
def baselines_list(api: Client, as_json: bool) -> None:
    from gpufleet.cli.baseline import show_baselines

    rows = [(baseline_of(b), list(b["pools"])) for b in api.get("baselines")]
    show_baselines(rows, as_json)


def baseline_of(b: Mapping[str, Any]) -> Baseline:
    """The baseline of the API's ``BaselineOut`` (its pins are under ``spec``)."""
    from gpufleet.domain.spec import Baseline

    return Baseline.model_validate(
        {k: b[k] for k in ("name", "status", "purpose", "os_image_url")} | b["spec"]
    )
