"""Remote mode's long work: inspect, collect, validate, evidence and remediate as background
runs on the server's workers that the CLI follows to their end. They are rows of
:data:`gpufleet.cli.remote_table.READS`; this module holds their hooks: the bodies
(``build``), remediate's checks (``prepare``), the followers (``follow``: ``GET runs/{id}``
until the run ends), remediate's view and the run's presenter."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import typer

from gpufleet.api.schemas import Schema
from gpufleet.api.schemas_runs import RunHostOut, RunOut
from gpufleet.cli.common import err_console, lit, print_json
from gpufleet.cli.remote import POLL_S, Client, error_of, refuse_options
from gpufleet.errors import GpufleetError, UsageError
from gpufleet.i18n import _

#: The routes the followers call: a run's progress, then each host's result.
RUN_ROUTES = ("GET runs/{run_id}", "GET runs/{run_id}/hosts")

#: Outcomes (collect) and decisions (validate) that do not fail a run; a validate run's
#: "skipped" are hosts held out on purpose (allocated, maintenance), as locally.
_FINE = frozenset({"ok", "available", "skipped", "passed"})


class FollowedRun(Schema):
    """A run as it ended and each host's result (None under --json: not fetched)."""

    run: RunOut
    hosts: list[RunHostOut] | None


# --- bodies ------------------------------------------------------------------------------


def collect_body(selector: str | None) -> dict[str, object]:
    """``collect``: ``POST runs`` of a collect run."""
    return {"kind": "collect", "selector": selector}


def validate_body(selector: str | None) -> dict[str, object]:
    """``validate``: ``POST runs`` of a validate run."""
    return {"kind": "validate", "selector": selector}


# --- following a run ----------------------------------------------------------------------


def _until_done(
    api: Client, run: dict[str, Any], seen: Callable[[dict[str, Any]], None] | None = None
) -> dict[str, Any]:
    """Poll ``GET runs/{id}`` until the run ended; ``seen`` is shown each answer."""
    while run["state"] not in ("succeeded", "failed"):
        time.sleep(POLL_S)
        run = api.get(f"runs/{run['id']}")
        if seen is not None:
            seen(run)
    return run


def follow_run(api: Client, run: dict[str, Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Follow a started run until it ends (its progress on stderr, not under --json); the
    run and, but under --json, each host's result (``FollowedRun``)."""
    as_json = bool(kwargs["as_json"])
    run_id = run["id"]
    if not as_json:
        err_console.print(_("run {id}: {kind} of {n} hosts queued").format(
            id=run_id, kind=run["kind"], n=run["hosts"]), soft_wrap=True)
    shown = [-1]

    def progress(now: dict[str, Any]) -> None:
        if not as_json and now["hosts_done"] != shown[0]:
            shown[0] = now["hosts_done"]
            err_console.print(_("run {id}: {done}/{n} hosts").format(
                id=run_id, done=shown[0], n=now["hosts"]), soft_wrap=True)

    run = _until_done(api, run, progress)
    hosts = None if as_json else api.get(f"runs/{run_id}/hosts")
    return {"run": run, "hosts": hosts}


def show_run(followed: dict[str, Any], as_json: bool) -> None:
    """Print a run as it ended and each host's result; exit 1 when a host was not collected
    / did not end available / was not inspected ok, or the run failed."""
    run = followed["run"]
    run_id, kind = run["id"], run["kind"]
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
        show([Col("host", ident=True), Col("outcome", ident=True), Col("result", 2)],
             [[lit(h["host"]), lit(h["outcome"]), lit(h["detail"] or "")]
              for h in followed["hosts"]],
             title=_("run {id} hosts").format(id=run_id))
        for host in run["skipped"]:
            console.print(_("skipped (held by another run): {host}").format(host=lit(host)))
        if run.get("error"):
            err_console.print("[bold red]" + _("run failed:") + f"[/] {lit(run['error'])}",
                              soft_wrap=True)
    outcomes = run["verdicts"] if kind == "validate" else run["counts"]
    if run["state"] != "succeeded" or run["skipped"] or set(outcomes) - _FINE:
        raise typer.Exit(1)


# --- remediate: one rung of the ladder, a run of one host ---------------------------------


def remediate_args(_api: object, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """``remediate`` before the call: the options the route cannot take refused, the local
    command's check, the arguments as the route takes them."""
    from gpufleet.cli.common import when
    from gpufleet.domain.leases import parse_duration

    timeout, reboot_wait = kwargs["timeout"], kwargs["reboot_wait"]
    refuse_options(**{"--timeout": timeout if timeout != 300.0 else None,
                      "--reboot-wait": reboot_wait if reboot_wait != 900.0 else None})
    reason = kwargs["reason"]
    if kwargs["override_identity"] and (reason is None or not reason.strip()):
        raise UsageError("--override-identity needs --reason TEXT (why the BMC is right)")
    at = when(kwargs["eta"], "--eta")
    action = kwargs["action"]
    return {
        "action": str(getattr(action, "value", action)),
        "eta": at.isoformat() if at else None,
        "drain_timeout": parse_duration(
            kwargs["drain_timeout"], "--drain-timeout").total_seconds(),
    }


def follow_remediation(
    api: Client, run: dict[str, Any], kwargs: Mapping[str, Any]
) -> dict[str, Any]:
    """Follow the remediation's run (``GET runs/{id}``) until it ends; the run."""
    if not kwargs["as_json"]:
        err_console.print(_("run {id}: remediation of {host} queued").format(
            id=run["id"], host=kwargs["host"]), soft_wrap=True)
    return _until_done(api, run)


def remediation_report(run: RunOut) -> dict[str, Any]:
    """The report of a finished remediate run (``gpufleet remediate``'s), or the error that
    stopped it, raised as the local command raises it."""
    rep = run.remediation
    if rep is None:  # failed before the remediation ran (its host removed meanwhile)
        raise GpufleetError(str(run.error or run.state.value))
    if "error" in rep:
        raise error_of(str(rep["error"]["code"]), str(rep["error"]["message"]))
    return rep
