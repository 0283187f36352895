"""``gpufleet hosts list|show|rekey|remove``."""

from __future__ import annotations

from typing import Any

import typer

from gpufleet.cli.common import (
    boundary,
    cell,
    console,
    err_console,
    error_text,
    lit,
    local_time,
    open_fleet,
    print_json,
)
from gpufleet.cli.hosts_list import (
    PROFILE_SHORT,
    STATE_STYLE,
    print_host_list,
    render_host_list,
)
from gpufleet.cli.hosts_show import print_host
from gpufleet.cli.tables import WIDE_HELP, Col, show
from gpufleet.i18n import _, state_name
from gpufleet.service.views.hosts import list_events, list_hosts, show_host

__all__ = ["PROFILE_SHORT", "STATE_STYLE", "app", "render_host_list"]

app = typer.Typer(no_args_is_help=True)


@app.command("list")
@boundary
def list_cmd(
    selector: str | None = typer.Argument(
        None, help="NAME-GLOB, group:G, pool:P, state:S, model:M"
    ),
    group: str | None = typer.Option(None, "--group", "-g", help="Only hosts in this group."),
    model: str | None = typer.Option(None, "--model", "-m", help="GPU model substring, e.g. H100."),
    state: str | None = typer.Option(None, "--state", "-s", help="Lifecycle state."),
    pool: str | None = typer.Option(None, "--pool", "-p", help="Pool name."),
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
    wide: bool = typer.Option(False, "--wide", help=WIDE_HELP),
) -> None:
    """List hosts with state, GPUs, driver and last collection."""
    print_host_list(
        list_hosts(open_fleet(), selector, group=group, model=model, state=state, pool=pool),
        as_json=as_json,
    )


@app.command("show")
@boundary
def show_cmd(
    name: str = typer.Argument(..., help="Host name."),
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
    wide: bool = typer.Option(False, "--wide", help=WIDE_HELP),
) -> None:
    """Facts, GPU table, NICs, last collections and recent events of one host."""
    print_host(show_host(open_fleet(), name), as_json=as_json)


@boundary
def events_cmd(
    host: str | None = typer.Argument(None, help="Only this host."),
    kind: str | None = typer.Option(
        None, "--kind", "-k", help="transition, alarm, change-detected, evidence ..."
    ),
    limit: int = typer.Option(50, "--limit", "-n", min=1, help="How many, newest first."),
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
    wide: bool = typer.Option(False, "--wide", help=WIDE_HELP),
) -> None:
    """The audit log: who did what to which host, when and why."""
    print_events(list_events(open_fleet(), host, kind=kind, limit=limit), as_json)


def print_events(rows: list[dict[str, Any]], as_json: bool) -> None:
    """The audit log's rows: JSON, else :func:`render_events` (local and remote mode)."""
    if as_json:
        print_json(rows)
        return
    render_events(rows)


def render_events(rows: list[dict[str, Any]]) -> None:
    """The ``events`` table (``at`` a datetime)."""
    cols = [Col("at", 1, words=True), Col("actor", 3, ident=True), Col("host", ident=True),
            Col("kind", 2, ident=True), Col("message", floor=30)]
    cells = [
        [local_time(e["at"]), lit(e["actor"]), lit(e["host"]), cell(e["kind"]), lit(e["message"])]
        for e in rows
    ]
    show(cols, cells, title=_("{n} events").format(n=len(rows)), expand=True)


SELECTOR_HELP = "Host name or selector (NAME-GLOB, group:G, pool:P, state:S, model:M, rack:R)."


@app.command("rekey")
@boundary
def rekey_cmd(
    hosts: str = typer.Argument(..., help=SELECTOR_HELP),
    fingerprint: str | None = typer.Option(
        None,
        "--fingerprint",
        help="Accept only the key with this SHA256 fingerprint (one host; read it on the "
        "host's console: ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub).",
    ),
    reason: str = typer.Option("host reimaged", "--reason", help="Why (kept in the event)."),
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
) -> None:
    """Accept a new SSH host key (after a reimage). Without --fingerprint the pinned key is
    cleared and the next collection pins the key it is offered (trust on first use); with
    it, the next collection accepts only that key (any other: host key changed, alarm).
    The host's state is unchanged. Exit 4: no such host; 2: bad fingerprint."""
    from gpufleet.service.hosts import operations

    rows = operations.rekey_hosts(open_fleet(), hosts, reason, fingerprint)
    if as_json:
        print_json(
            [
                {
                    "host": r.host,
                    "old": r.old,
                    "expected": r.expected,
                    "state": r.state,
                    "error": r.error.as_json()["error"] if r.error else None,
                }
                for r in rows
            ]
        )
    for r in rows:
        if r.error is not None:
            err_console.print("[bold red]" + _("error:") + f"[/] {lit(r.host)}: "
                              f"{lit(error_text(r.error))}")
            continue
        if as_json:
            continue
        then = (
            _("next collection accepts only {key}").format(key=r.expected)
            if r.expected
            else _("next collection pins the key it is offered")
        )
        console.print(_("{host}: host key {old} released; {then}").format(
            host=lit(r.host), old=lit(r.old or _("none")), then=lit(then)))
        if r.state == "quarantined" and r.fault == "host_key_changed":
            note = _("note: {host} stays quarantined (host_key_changed); once the new key is "
                     "pinned: gpufleet unquarantine {host} --reason ...").format(host=lit(r.host))
            console.print(f"[dim]{note}[/]")
    failed = [r.error for r in rows if r.error is not None]
    if failed:
        raise typer.Exit(failed[0].exit_code)


@app.command("remove")
@boundary
def remove_cmd(
    hosts: str = typer.Argument(..., help=SELECTOR_HELP),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
    reason: str = typer.Option("removed by operator", "--reason", help="Why (kept in the event)."),
) -> None:
    """Remove hosts and everything stored about them (facts, GPU/NIC rows, collection
    results, validations). The audit log keeps their events and a host-removed event with
    the last state. Refused for an allocated host (exit 5) or one a running collection
    holds (exit 6); exit 4 when nothing matches."""
    from gpufleet.service.hosts import operations

    fleet = open_fleet()
    names = operations.named_hosts(fleet, hosts, "remove")
    shown = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
    if not yes and not typer.confirm(f"Remove {len(names)} host(s): {shown}?", default=False):
        err_console.print(_("nothing removed"))
        raise typer.Exit(1)
    outcomes = operations.each_name(names, lambda n: operations.remove_host(fleet, n, reason))
    for o in outcomes:
        if o.error is None:
            console.print(_("{host}: removed (was {state})").format(
                host=lit(o.host), state=lit(state_name(o.state) if o.state else "None")))
        else:
            err_console.print("[bold red]" + _("error:")
                              + f"[/] {lit(o.host)}: {lit(str(o.error))}")
    failed = [o.error for o in outcomes if o.error is not None]
    if failed:
        raise typer.Exit(failed[0].exit_code)


@app.command("eta")
@boundary
def hosts_eta_cmd(
    host: str = typer.Argument(..., help="Host in maintenance or quarantine (or a selector)."),
    eta: str = typer.Argument(
        ..., help="Expected back (ISO time, local unless zoned), or 'none' to clear."
    ),
) -> None:
    """Say when hosts in maintenance or quarantine are expected back (summary, capacity)."""
    from gpufleet.cli.common import when
    from gpufleet.cli.lifecycle import report_each
    from gpufleet.service.hosts import operations

    back = None if eta.strip().lower() == "none" else when(eta, "ETA")
    fleet = open_fleet()
    report_each(operations.each(fleet, host, lambda n: operations.set_eta(fleet, n, back)))
