"""Remote mode's long work: inspect, collect, validate, evidence and remediate as background
runs on the server's workers that the CLI follows to their end (registered with
:func:`gpufleet.cli.remote.remote`; moved out of :mod:`gpufleet.cli.remote`)."""

from __future__ import annotations

import time
from typing import Any

import typer

from gpufleet.cli.common import err_console, lit, print_json
from gpufleet.cli.remote import (
    POLL_S,
    Client,
    error_of,
    refuse_options,
    remote,
)
from gpufleet.errors import GpufleetError, UsageError
from gpufleet.i18n import _

# --- inspect: one sweep, a run on the server's workers --------------------------------------


#: Following a run: its progress, then each host's result.
_RUN = ("POST runs", "GET runs/{run_id}", "GET runs/{run_id}/hosts")


@remote("inspect.run_cmd", routes=("POST inspect", *_RUN[1:]))
def inspect_run(
    api: Client,
    selector: str | None,
    every: str | None,
    transport: str | None,
    forks: int,
    timeout: float,
    as_json: bool,
) -> None:
    refuse_options(**{"--every": every, "--transport": transport})
    _follow(api, api.post("inspect", {"selector": selector}), as_json)


# --- collect and validate: background runs ----------------------------------------------------

#: Outcomes (collect) and decisions (validate) that do not fail a run; a validate run's
#: "skipped" are hosts held out on purpose (allocated, maintenance), as locally.
_FINE = frozenset({"ok", "available", "skipped", "passed"})


def _run(
    api: Client,
    kind: str,
    selector: str | None,
    as_json: bool,
) -> None:
    """Start a run (``POST runs``) and follow it (:func:`_follow`)."""
    _follow(api, api.post("runs", {"kind": kind, "selector": selector}), as_json)


def _follow(api: Client, run: dict[str, Any], as_json: bool) -> None:
    """Follow a started run until it ends, print it and each host's result; exit 1 when a
    host was not collected / did not end available / was not inspected ok, or the run
    failed."""
    run_id, kind = run["id"], run["kind"]
    if not as_json:
        err_console.print(_("run {id}: {kind} of {n} hosts queued").format(
            id=run_id, kind=kind, n=run["hosts"]), soft_wrap=True)
    shown = -1
    while run["state"] not in ("succeeded", "failed"):
        time.sleep(POLL_S)
        run = api.get(f"runs/{run_id}")
        if not as_json and run["hosts_done"] != shown:
            shown = run["hosts_done"]
            err_console.print(_("run {id}: {done}/{n} hosts").format(
                id=run_id, done=shown, n=run["hosts"]), soft_wrap=True)
    if as_json:
        print_json(run)
    else:
        from gpufleet.cli.common import console
        from gpufleet.cli.tables import Col, show

        counts = run["verdicts"] if kind == "validate" else run["counts"]
        show([Col("outcome", ident=True), Col("hosts", ident=True, justify="right")],
             [[lit(name), str(n)] for name, n in sorted(counts.items())],
             title=_("run {id} ({kind}) {state}").format(
                 id=run_id, kind=kind, state=lit(run["state"])))
        hosts = api.get(f"runs/{run_id}/hosts")
        show([Col("host", ident=True), Col("outcome", ident=True), Col("result", 2)],
             [[lit(h["host"]), lit(h["outcome"]), lit(h["detail"] or "")] for h in hosts],
             title=_("run {id} hosts").format(id=run_id))
        for host in run["skipped"]:
            console.print(_("skipped (held by another run): {host}").format(host=lit(host)))
        if run.get("error"):
            err_console.print("[bold red]" + _("run failed:") + f"[/] {lit(run['error'])}",
                              soft_wrap=True)
    outcomes = run["verdicts"] if kind == "validate" else run["counts"]
    if run["state"] != "succeeded" or run["skipped"] or set(outcomes) - _FINE:
        raise typer.Exit(1)


@remote("collect.collect_cmd", routes=_RUN)
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


@remote("lifecycle.validate_cmd", routes=_RUN)
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


@remote("lifecycle.evidence_run_cmd", routes=("POST evidence", *_RUN[1:]))
def evidence_run(
    api: Client,
    selector: str,
    kind: str,
    level: int,
    seconds: int,
    command: str | None,
    timeout: float | None,
    forks: int | None,
    as_json: bool,
) -> None:
    refuse_options(**{"--command": command, "--timeout": timeout, "--forks": forks})
    body = {"selector": selector, "kind": kind, "level": level, "seconds": seconds}
    _follow(api, api.post("evidence", body), as_json)


# --- remediate: one rung of the ladder, a run of one host --------------------------------------


@remote("remediate.remediate_cmd", routes=("POST hosts/{name}/remediate", _RUN[1]))
def remediate(
    api: Client,
    host: str,
    action: str,
    service: str | None,
    override_identity: bool,
    gpu: int | None,
    ticket: str | None,
    eta: str | None,
    reason: str | None,
    timeout: float,
    reboot_wait: float,
    as_json: bool,
    no_drain: bool,
    drain_timeout: str,
) -> None:
    """Queue the remediation (refused at once when it cannot run: the local exit codes),
    follow its run, print its report as ``gpufleet remediate`` does."""
    from urllib.parse import quote

    from gpufleet.cli.common import when
    from gpufleet.cli.remediate import print_report
    from gpufleet.domain.leases import parse_duration

    refuse_options(**{"--timeout": timeout if timeout != 300.0 else None,
                      "--reboot-wait": reboot_wait if reboot_wait != 900.0 else None})
    if override_identity and (reason is None or not reason.strip()):
        raise UsageError("--override-identity needs --reason TEXT (why the BMC is right)")
    at = when(eta, "--eta")
    body = {
        "action": str(getattr(action, "value", action)),
        "service": service,
        "override_identity": override_identity,
        "gpu": gpu,
        "ticket": ticket,
        "eta": at.isoformat() if at else None,
        "reason": reason,
        "no_drain": no_drain,
        "drain_timeout_s": parse_duration(drain_timeout, "--drain-timeout").total_seconds(),
    }
    run = api.post(f"hosts/{quote(host, safe='')}/remediate",
                   {k: v for k, v in body.items() if v is not None})
    if not as_json:
        err_console.print(_("run {id}: remediation of {host} queued").format(
            id=run["id"], host=host), soft_wrap=True)
    while run["state"] not in ("succeeded", "failed"):
        time.sleep(POLL_S)
        run = api.get(f"runs/{run['id']}")
    rep = run.get("remediation")
    if rep is None:  # failed before the remediation ran (its host removed meanwhile)
        raise GpufleetError(str(run.get("error") or run["state"]))
    if "error" in rep:  # the error that stopped it, as the local command raises it
        raise error_of(str(rep["error"]["code"]), str(rep["error"]["message"]))
    print_report(rep, as_json)
