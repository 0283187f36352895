"""Remote mode: with ``GPUFLEET_URL`` set, commands call a gpufleet server's API
(``/api/v1``, ``Authorization: Bearer $GPUFLEET_TOKEN``) instead of opening the database,
for people without database access.

The CLI's error boundary (:func:`gpufleet.cli.common.boundary`) hands every command to
:func:`call_remote`. A command with a remote implementation here calls the API, rebuilds
the service's answer from the response and prints it with the command's own presenter, so
``--json`` and the tables are the local ones. Any other command fails closed: exit 2 with a
message naming it; never a silent fall-back to a local database.

HTTP errors become the error class the server names (its ``code``), so the exit codes are
the one table of :mod:`gpufleet.errors` (401 ``unauthorized`` and 403 ``forbidden`` exit 2,
404 exit 4, 409 exit 5 or 6); a server that cannot be reached (refused, timeout, a proxy's
502/503/504) is :class:`~gpufleet.errors.ServerUnavailable` (exit 2, retryable). The token
is only ever put into the request header: no message, log line or traceback carries it.

Standard library only (urllib): the client needs nothing the CLI does not already have.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import typer
from typer._click.globals import get_current_context  # typer's own copy of Click

from gpufleet.cli.common import OPTIONS, current_settings, err_console, lit, print_json
from gpufleet.errors import (
    ConfigError,
    Conflict,
    Forbidden,
    GpufleetError,
    NotFound,
    ServerUnavailable,
    Unauthorized,
)

#: Commands that need no database and run as they are in remote mode.
LOCAL_ONLY = frozenset({"gpufleet.cli.preflight.preflight_cmd"})

#: Seconds one HTTP request may take.
TIMEOUT_S = 60.0
#: Seconds between two polls of a background run.
POLL_S = 0.5


def command_name() -> str:
    """The command being run, as typed: ``gpufleet hosts remove``."""
    ctx = get_current_context(silent=True)
    names: list[str] = []
    while ctx is not None:
        names.append(ctx.info_name or "")
        ctx = ctx.parent
    names[-1:] = ["gpufleet"]
    return " ".join(reversed([n for n in names if n]))


def not_available(what: str | None = None) -> ConfigError:
    """The refusal of a command (or an option of one) that remote mode does not offer."""
    return ConfigError(
        f"{what or command_name()} is not available over GPUFLEET_URL; run it where the "
        "database is reachable (unset GPUFLEET_URL)"
    )


def _error_classes() -> dict[str, type[GpufleetError]]:
    out: dict[str, type[GpufleetError]] = {}
    todo: list[type[GpufleetError]] = [GpufleetError]
    while todo:
        cls = todo.pop()
        out.setdefault(cls.code, cls)
        todo.extend(cls.__subclasses__())
    return out


#: The class of an HTTP status when the answer carries no error shape of ours.
_BY_STATUS: dict[int, type[GpufleetError]] = {
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    400: ConfigError,
    422: ConfigError,
}


def server_error(status: int, body: bytes, url: str) -> GpufleetError:
    """The gpufleet error an HTTP error answer stands for, with the server's message."""
    code = message = None
    try:
        err = json.loads(body)["error"]
        code, message = str(err["code"]), str(err["message"])
    except (ValueError, KeyError, TypeError):
        pass
    cls = _error_classes().get(code or "") if code else None
    if cls is None or cls is GpufleetError:
        if status in (502, 503, 504) or (cls is None and status >= 500):
            return ServerUnavailable(
                url=url, cause=f"HTTP {status}" + (f": {message}" if message else "")
            )
        cls = _BY_STATUS.get(status, GpufleetError)
    text = message or f"HTTP {status}"
    if cls in (Unauthorized, Forbidden):
        text += f" (server {url}; check GPUFLEET_TOKEN)"
    exc = cls.__new__(cls)  # the server's message as it is, whatever the class's fields
    GpufleetError.__init__(exc, text)
    return exc


@dataclass
class Client:
    """The API of one gpufleet server, as one token."""

    url: str
    token: str | None

    def call(
        self,
        method: str,
        path: str,
        params: Mapping[str, object] | None = None,
        body: object = None,
    ) -> Any:
        """``METHOD /api/v1/PATH`` -> the decoded JSON answer; errors as gpufleet errors."""
        query = {
            k: ("true" if v is True else "false" if v is False else str(v))
            for k, v in (params or {}).items()
            if v is not None
        }
        target = f"{self.url}/api/v1/{path}" + (
            f"?{urllib.parse.urlencode(query)}" if query else ""
        )
        data = None if body is None else json.dumps(body, default=str).encode()
        req = urllib.request.Request(target, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            raise server_error(exc.code, exc.read(), self.url) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", None) or exc
            why = getattr(reason, "strerror", None) or str(reason) or type(reason).__name__
            if isinstance(reason, socket.timeout | TimeoutError):
                why = f"no answer within {TIMEOUT_S:g} s"
            raise ServerUnavailable(url=self.url, cause=why) from None
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            raise ServerUnavailable(url=self.url, cause="the answer is not JSON") from None

    def get(self, path: str, **params: object) -> Any:
        return self.call("GET", path, params)

    def post(self, path: str, body: object) -> Any:
        return self.call("POST", path, body=body)


def client() -> Client:
    """The client of ``GPUFLEET_URL`` with ``GPUFLEET_TOKEN``."""
    s = current_settings()
    assert s.url is not None
    return Client(s.url, s.token.get_secret_value() if s.token is not None else None)


Handler = Callable[..., None]
HANDLERS: dict[str, Handler] = {}


def remote(*keys: str) -> Callable[[Handler], Handler]:
    """Register the remote implementation of commands (``module.function`` of the command
    under ``gpufleet.cli``)."""

    def register(fn: Handler) -> Handler:
        for key in keys:
            HANDLERS[f"gpufleet.cli.{key}"] = fn
        return fn

    return register


def call_remote(fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    """Run the command ``fn`` in remote mode: its remote implementation, the command itself
    when it needs no database (:data:`LOCAL_ONLY`), else the refusal."""
    key = f"{fn.__module__}.{fn.__qualname__}"
    if key in LOCAL_ONLY:
        return fn(**kwargs)
    handler = HANDLERS.get(key)
    if handler is None:
        raise not_available()
    if OPTIONS.db_url is not None:
        raise ConfigError("--db and GPUFLEET_URL are both given; use one (unset GPUFLEET_URL)")
    handler(client(), **kwargs)
    return None


def refuse_options(**given: object) -> None:
    """Options the API does not offer: refused (named) when given, never ignored."""
    for flag, value in given.items():
        if value not in (None, False):
            raise not_available(f"{command_name()} {flag}")


def _dt(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


# --- hosts, events, summary, labels ---------------------------------------------------------


@remote("hosts.list_cmd")
def hosts_list(
    api: Client,
    selector: str | None,
    group: str | None,
    model: str | None,
    state: str | None,
    pool: str | None,
    as_json: bool,
) -> None:
    from gpufleet.api.schemas import HostOut
    from gpufleet.cli.hosts import render_host_list

    items: list[dict[str, Any]] = []
    cursor = None
    while True:
        page = api.get(
            "hosts",
            selector=selector,
            group=group,
            model=model,
            state=state,
            pool=pool,
            limit=1000,
            cursor=cursor,
        )
        items.extend(page["items"])
        cursor = page.get("next_cursor")
        if not cursor:
            break
    if as_json:
        print_json(items)
    else:
        render_host_list([HostOut.model_validate(i) for i in items])


@remote("hosts.show_cmd")
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


@remote("hosts.events_cmd")
def events(api: Client, host: str | None, kind: str | None, limit: int, as_json: bool) -> None:
    from gpufleet.cli.hosts import render_events

    rows = api.get("events", host=host, kind=kind, limit=limit)
    if as_json:
        print_json(rows)
    else:
        render_events([r | {"at": _dt(r["at"])} for r in rows])


@remote("summary.summary_cmd")
def summary(api: Client, selector: str | None, as_json: bool) -> None:
    from gpufleet.cli.summary import render_summary
    from gpufleet.domain.drift import DriftItem, DriftSummary
    from gpufleet.service.baselines import DriftReport
    from gpufleet.service.summary import FleetSummary

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


@remote("summary.labels_cmd")
def labels(api: Client, selector: str | None, as_json: bool) -> None:
    from types import SimpleNamespace

    from gpufleet.cli.labels import render_labels
    from gpufleet.domain.labels import Taint

    rows = api.get("labels", selector=selector)
    if as_json:
        print_json(rows)
        return
    hosts: list[Any] = [
        SimpleNamespace(
            host=r["host"], labels=r["labels"], taints=[Taint(**t) for t in r["taints"]]
        )
        for r in rows
    ]
    render_labels(hosts)


# --- leases, allocation, capacity ---------------------------------------------------------


def _lease(d: dict[str, Any]) -> Any:
    from gpufleet.api.schemas import LeaseOut
    from gpufleet.service.leases import LeaseView

    return LeaseView(**dict(LeaseOut.model_validate(d)))


def _when(value: str | None, flag: str) -> str | None:
    from gpufleet.cli.common import when  # local unless zoned; sent zoned (API: naive = UTC)

    t = when(value, flag)
    return None if t is None else t.isoformat()


@remote("alloc.allocate_cmd")
def allocate(
    api: Client,
    gpus: int | None,
    hosts: int | None,
    model: str | None,
    min_gpu_memory: str | None,
    fabric: str | None,
    profile: str | None,
    cuda: str | None,
    selector: str | None,
    owner: str,
    purpose: str,
    for_: str | None,
    until: str | None,
    start: str | None,
    users: list[str] | None,
    as_json: bool,
) -> None:
    from gpufleet.cli.alloc import show_allocation
    from gpufleet.domain.placement import Refusal
    from gpufleet.service.allocation import Allocation

    body = {
        "gpus": gpus,
        "hosts": hosts,
        "model": model,
        "min_gpu_memory": min_gpu_memory,
        "fabric": fabric,
        "profile": profile,
        "cuda": cuda,
        "selector": selector,
        "owner": owner,
        "purpose": purpose,
        "for": for_,
        "until": _when(until, "--until"),
        "start": _when(start, "--start"),
        "users": users or None,
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


@remote("alloc.leases_list_cmd")
def leases_list(
    api: Client, selector: str | None, owner: str | None, all_: bool, as_json: bool
) -> None:
    from gpufleet.cli.alloc import _lease_json, _lease_table
    from gpufleet.cli.common import console

    rows = [_lease(d) for d in api.get("leases", selector=selector, owner=owner, all=all_)]
    if as_json:
        print_json([_lease_json(v) for v in rows])
    else:
        console.print(_lease_table(rows, "leases"))


@remote("alloc.leases_show_cmd")
def leases_show(api: Client, lease_id: int, as_json: bool) -> None:
    from gpufleet.cli.alloc import show_lease

    show_lease(_lease(api.get(f"leases/{lease_id}")), as_json)


@remote("alloc.leases_renew_cmd")
def leases_renew(
    api: Client,
    lease_id: int,
    for_: str | None,
    until: str | None,
    shorten: bool,
    owner: str | None,
    as_json: bool,
) -> None:
    from gpufleet.cli.alloc import show_renewed

    until_at, short = _when(until, "--until"), shorten or None
    body = {"for": for_, "until": until_at, "shorten": short, "owner": owner}
    out = api.post(f"leases/{lease_id}/renew", {k: v for k, v in body.items() if v is not None})
    show_renewed(_lease(out), as_json)


@remote("alloc.leases_release_cmd")
def leases_release(
    api: Client, lease_id: int, reason: str, owner: str | None, as_json: bool
) -> None:
    from gpufleet.cli.alloc import show_released
    from gpufleet.service.leases import Released

    body: dict[str, Any] = {"reason": reason} | ({"owner": owner} if owner else {})
    out = api.post(f"leases/{lease_id}/release", body)
    show_released(
        Released(
            lease=_lease(out["lease"]),
            reclaiming=out["reclaiming"],
            reclaim=out["reclaim"],
            note=out["note"],
            warnings=out["warnings"],
        ),
        as_json,
    )


@remote("alloc.capacity_cmd")
def capacity(
    api: Client,
    ctx: typer.Context,
    selector: str | None,
    at: str | None,
    as_json: bool,
    k8s: bool,
    kubeconfig: Path | None,
) -> None:
    from gpufleet.cli.alloc import show_capacity
    from gpufleet.service.capacity import CapacityReport

    if ctx.invoked_subcommand is not None:
        return
    refuse_options(**{"--k8s": k8s, "--kubeconfig": kubeconfig})
    d = api.get("capacity", selector=selector, at=_when(at, "--at"))
    rep = CapacityReport(
        at=_dt(d["at"]) or datetime.now().astimezone(),
        rows=d["rows"],
        totals=d["totals"],
        back=[b | {"eta": _dt(b["eta"])} for b in d["back"]],
    )
    show_capacity(rep, None, as_json)


@remote("alloc.capacity_check_cmd")
def capacity_check(
    api: Client,
    gpus: int,
    model: str | None,
    profile: str | None,
    headroom: str,
    selector: str | None,
    cuda: str | None,
    as_json: bool,
) -> None:
    from gpufleet.cli.alloc import show_check
    from gpufleet.service.capacity import CapacityCheck

    d = api.get(
        "capacity/check",
        gpus=gpus,
        model=model,
        profile=profile,
        headroom=headroom,
        selector=selector,
        cuda=cuda,
    )
    d["held"] = [h | {"until": _dt(h["until"])} for h in d["held"]]
    d["frees"] = [f | {"at": _dt(f["at"])} for f in d["frees"]]
    show_check(CapacityCheck(**d), as_json)


# --- alarms, failures, drift, baselines, pools ----------------------------------------------


def _alarm(d: dict[str, Any]) -> Any:
    from gpufleet.api.schemas import AlarmRecordOut
    from gpufleet.service.alarms import AlarmRecord

    return AlarmRecord(**dict(AlarmRecordOut.model_validate(d)))


@remote("alarms.list_cmd")
def alarms_list(api: Client, selector: str | None, include_closed: bool, as_json: bool) -> None:
    from gpufleet.cli.alarms import show_alarms

    rows = api.get("alarms", selector=selector, all=include_closed)
    show_alarms([_alarm(d) for d in rows], as_json)


@remote("alarms.show_cmd")
def alarms_show(api: Client, alarm_id: int, as_json: bool) -> None:
    from gpufleet.cli.alarms import show_one

    show_one(_alarm(api.get(f"alarms/{alarm_id}")), as_json)


@remote("alarms.ack_cmd")
def alarms_ack(api: Client, alarm_id: int, reason: str | None, as_json: bool) -> None:
    from gpufleet.cli.alarms import show_acked

    show_acked(_alarm(api.post(f"alarms/{alarm_id}/ack", {"reason": reason})), as_json)


@remote("failures.record_cmd")
def failures_record(
    api: Client,
    job: str,
    host: str,
    gpu: str | None,
    time: str,
    message: str,
    as_json: bool,
) -> None:
    from gpufleet.cli.failures import show_recorded
    from gpufleet.service.failures import Recorded

    at = _when(time, "--time")
    d = api.post("failures", {"job": job, "host": host, "gpu": gpu, "time": at, "message": message})
    show_recorded(
        Recorded(
            job=d["job"],
            host=d["host"],
            gpu=d["gpu"],
            at=_dt(d["at"]) or datetime.now().astimezone(),
            category=d["category"],
            rule=d["rule"],
        ),
        as_json,
    )


@remote("failures.import_cmd")
def failures_import(api: Client, file: Path | None, as_json: bool, slurm: bool, since: str) -> None:
    from gpufleet.cli.failures import show_import
    from gpufleet.errors import LocalIOError
    from gpufleet.service.failures import ImportReport

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


@remote("baseline.drift_cmd")
def drift(api: Client, selector: str | None, as_json: bool) -> None:
    from gpufleet.cli.baseline import show_drift
    from gpufleet.domain.drift import DriftItem, DriftSummary, PoolDrift, PoolField
    from gpufleet.service.baselines import DriftReport

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


@remote("baseline.list_cmd")
def baselines_list(api: Client, as_json: bool) -> None:
    from gpufleet.cli.baseline import show_baselines
    from gpufleet.domain.spec import Baseline

    rows = [
        (
            Baseline.model_validate(
                {k: b[k] for k in ("name", "status", "purpose", "os_image_url")} | b["spec"]
            ),
            list(b["pools"]),
        )
        for b in api.get("baselines")
    ]
    show_baselines(rows, as_json)


@remote("baseline.pool_list_cmd")
def pools_list(api: Client, as_json: bool) -> None:
    from gpufleet.cli.baseline import show_pools
    from gpufleet.service.baselines import PoolView

    show_pools([PoolView(**p) for p in api.get("pools")], as_json)


# --- inspect: one sweep, answered when it ends ------------------------------------------------


@remote("inspect.run_cmd")
def inspect_run(
    api: Client,
    selector: str | None,
    every: str | None,
    transport: str | None,
    forks: int,
    timeout: float,
    as_json: bool,
) -> None:
    from gpufleet.cli.inspect import _as_json, _print_sweep
    from gpufleet.domain.rules import Action, Finding, Severity
    from gpufleet.service.inspect import HostInspection, SweepReport

    refuse_options(**{"--every": every, "--transport": transport})
    d = api.post("inspect", {"selector": selector, "forks": forks, "timeout_s": timeout})
    report = SweepReport(
        at=_dt(d["at"]) or datetime.now().astimezone(),
        policy_version=d["policy_version"],
        hosts=[
            HostInspection(
                host=h["host"],
                outcome=h["outcome"],
                reason=h["reason"],
                findings=[
                    Finding(
                        **(f | {"severity": Severity(f["severity"]), "action": Action(f["action"])})
                    )
                    for f in h["findings"]
                ],
                actions=h["actions"],
                problems=h["problems"],
            )
            for h in d["hosts"]
        ],
        busy=d["busy"],
        guard_tripped=d["guard_tripped"],
        guard_message=d["guard_message"],
    )
    if as_json:
        print_json(_as_json(report))
    else:
        _print_sweep(report)


# --- collect and validate: background runs ----------------------------------------------------

#: Outcomes (collect) and decisions (validate) that do not fail a run; a validate run's
#: "skipped" are hosts held out on purpose (allocated, maintenance), as locally.
_FINE = frozenset({"ok", "available", "skipped"})


def _run(
    api: Client,
    kind: str,
    selector: str | None,
    as_json: bool,
) -> None:
    """Start a run (``POST runs``), follow it until it ends, print it; exit 1 when a host
    was not collected / did not end available, or the run failed."""
    run = api.post("runs", {"kind": kind, "selector": selector})
    run_id = run["id"]
    if not as_json:
        err_console.print(f"run {run_id}: {kind} of {run['hosts']} hosts queued", soft_wrap=True)
    shown = -1
    while run["state"] not in ("succeeded", "failed"):
        time.sleep(POLL_S)
        run = api.get(f"runs/{run_id}")
        if not as_json and run["hosts_done"] != shown:
            shown = run["hosts_done"]
            err_console.print(f"run {run_id}: {shown}/{run['hosts']} hosts", soft_wrap=True)
    if as_json:
        print_json(run)
    else:
        from rich.table import Table

        from gpufleet.cli.common import console

        t = Table(title=f"run {run_id} ({kind}) {run['state']}")
        t.add_column("outcome")
        t.add_column("hosts", justify="right")
        for name, n in sorted((run["verdicts"] if kind == "validate" else run["counts"]).items()):
            t.add_row(lit(name), str(n))
        console.print(t)
        for host in run["skipped"]:
            console.print(f"skipped (held by another run): {lit(host)}")
        if run.get("error"):
            err_console.print(f"[bold red]run failed:[/] {lit(run['error'])}", soft_wrap=True)
    outcomes = run["verdicts"] if kind == "validate" else run["counts"]
    if run["state"] != "succeeded" or run["skipped"] or set(outcomes) - _FINE:
        raise typer.Exit(1)


@remote("collect.collect_cmd")
def collect(
    api: Client,
    selector: str | None,
    local: bool,
    transport: str | None,
    forks: int | None,
    timeout: float | None,
    as_json: bool,
    **_: object,
) -> None:
    refuse_options(
        **{"--local": local, "--transport": transport, "--forks": forks, "--timeout": timeout}
    )
    _run(api, "collect", selector, as_json)


@remote("lifecycle.validate_cmd")
def validate(
    api: Client,
    selector: str | None,
    transport: str | None,
    no_collect: bool,
    forks: int | None,
    timeout: float | None,
    as_json: bool,
    **_: object,
) -> None:
    refuse_options(
        **{
            "--transport": transport,
            "--no-collect": no_collect,
            "--forks": forks,
            "--timeout": timeout,
        }
    )
    _run(api, "validate", selector, as_json)
