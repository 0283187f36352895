"""Remote mode's long work: an inspection sweep answered when it ends, and collect and
validate as background runs the CLI follows to their end (registered with
:func:`gpufleet.cli.remote.remote`; moved out of :mod:`gpufleet.cli.remote`)."""

from __future__ import annotations

import time
from datetime import datetime

import typer

from gpufleet.cli.common import err_console, lit, print_json
from gpufleet.cli.remote import (
    POLL_S,
    Client,
    _dt,
    refuse_options,
    remote,
)

# --- inspect: one sweep, answered when it ends ------------------------------------------------


@remote("inspect.run_cmd", routes=("POST inspect",))
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
    from gpufleet.service.health.inspect import HostInspection, SweepReport

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
        from gpufleet.cli.common import console
        from gpufleet.cli.tables import Col, show

        counts = run["verdicts"] if kind == "validate" else run["counts"]
        show([Col("outcome", ident=True), Col("hosts", ident=True, justify="right")],
             [[lit(name), str(n)] for name, n in sorted(counts.items())],
             title=f"run {run_id} ({kind}) {lit(run['state'])}")
        for host in run["skipped"]:
            console.print(f"skipped (held by another run): {lit(host)}")
        if run.get("error"):
            err_console.print(f"[bold red]run failed:[/] {lit(run['error'])}", soft_wrap=True)
    outcomes = run["verdicts"] if kind == "validate" else run["counts"]
    if run["state"] != "succeeded" or run["skipped"] or set(outcomes) - _FINE:
        raise typer.Exit(1)


@remote("collect.collect_cmd", routes=("POST runs", "GET runs/{run_id}"))
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


@remote("lifecycle.validate_cmd", routes=("POST runs", "GET runs/{run_id}"))
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
