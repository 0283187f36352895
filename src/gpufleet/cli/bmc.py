"""``gpufleet bmc``: the hosts' BMCs over Redfish (set, status, power, sel-ack) and
``gpufleet reimage`` by virtual media. Parsing and printing only; the work is in
``service/hosts/bmc.py``."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import typer

from gpufleet.cli.common import boundary, console, err_console, lit, open_fleet, print_json
from gpufleet.cli.lifecycle import DRAIN_TIMEOUT_OPTION, NO_DRAIN_OPTION
from gpufleet.cli.tables import WIDE_HELP, Col, show
from gpufleet.domain.bmc import PowerAction
from gpufleet.errors import ConfigError
from gpufleet.i18n import _, language, reason_text
from gpufleet.service.hosts import bmc as svc

app = typer.Typer(no_args_is_help=True)


OVERRIDE_HELP = "Act even while the host's bmc-identity alarm is open (needs --reason)."
REASON_HELP = "Why the BMC is the right one (with --override-identity; recorded)."


def override_reason(override_identity: bool, reason: str | None) -> str | None:
    """The override's reason: --override-identity needs --reason, and --reason alone is
    refused (it would be silently ignored)."""
    if override_identity and (reason is None or not reason.strip()):
        raise ConfigError("--override-identity needs --reason TEXT (why the BMC is right)")
    if reason is not None and not override_identity:
        raise ConfigError("--reason is only for --override-identity")
    return reason if override_identity else None


@app.command("set")
@boundary
def set_cmd(
    host: str = typer.Argument(..., help="The host."),
    address: str | None = typer.Option(None, "--address", help="BMC URL or host name."),
    username: str | None = typer.Option(None, "--username", help="BMC login."),
    password_file: Path | None = typer.Option(
        None, "--password-file",
        help="Read the password from this file now and store it encrypted.",
    ),
    password_stdin: bool = typer.Option(
        False, "--password-stdin", help="Read the password from standard input."
    ),
    keep_file: Path | None = typer.Option(
        None, "--password-path",
        help="Store only this path; the password is read from it at each use.",
    ),
    system: str | None = typer.Option(None, "--system", help="Redfish system id behind it."),
    ca_bundle: Path | None = typer.Option(None, "--ca-bundle", help="CA bundle for its TLS."),
    insecure: bool | None = typer.Option(
        None, "--insecure/--verify", help="Skip TLS verification (only when asked)."
    ),
    serial: str | None = typer.Option(None, "--serial", help="The machine's serial number."),
    uuid: str | None = typer.Option(None, "--uuid", help="The machine's system UUID."),
    as_json: bool = typer.Option(False, "--json", help="Print the stored values as JSON."),
) -> None:
    """Set a host's BMC address and credentials (the password is stored encrypted with
    GPUFLEET_SECRET_KEY and never shown). TLS is verified unless --insecure."""
    password: str | None = None
    if password_file is not None and password_stdin:
        raise ConfigError("give --password-file or --password-stdin, not both")
    if password_file is not None:
        try:
            password = password_file.expanduser().read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"--password-file {password_file}: cannot read it "
                              f"({getattr(exc, 'strerror', None) or type(exc).__name__})"
                              ) from None
    elif password_stdin:
        password = sys.stdin.readline().strip()
    if password is not None and not password:
        raise ConfigError("the BMC password is empty")
    stored = svc.set_bmc(
        open_fleet(), host, address=address, username=username, password=password,
        password_file=str(keep_file) if keep_file else None, system=system,
        ca_bundle=str(ca_bundle) if ca_bundle else None, insecure=insecure, serial=serial,
        uuid=uuid,
    )
    if as_json:
        print_json({"host": host, "set": stored})
    else:
        for k, v in sorted(stored.items()):
            console.print(f"{lit(host)}: {lit(k)} = {lit(v)}")


@app.command("status")
@boundary
def status_cmd(
    selector: str | None = typer.Argument(None, help="Hosts (selector); all by default."),
    forks: int | None = typer.Option(None, "--forks", help="BMCs read at once."),
    timeout: float | None = typer.Option(None, "--timeout", help="Seconds per request."),
    deadline: float | None = typer.Option(
        None, "--deadline", help="Seconds one BMC's whole read may take (60)."),
    as_json: bool = typer.Option(False, "--json", help="Print the reads as JSON."),
    wide: bool = typer.Option(False, "--wide", help=WIDE_HELP),
) -> None:
    """Read each host's BMC: identity, power, health, GPU processors, event-log entries new
    since the last read; store them; open alarms (identity mismatch, health Critical, new
    critical SEL entries). A BMC whose read outlasts --deadline is reported timed out (the
    others as they finish); an answer over GPUFLEET_BMC_MAX_BODY_BYTES is refused. Exit 1
    when a BMC could not be read."""
    show_bmc_status(svc.bmc_status(open_fleet(), selector, forks=forks, timeout_s=timeout,
                                   deadline_s=deadline), as_json)


def show_bmc_status(rows: Sequence[svc.BmcStatus], as_json: bool) -> None:
    """Print ``bmc status`` (local and remote mode); exit 1 when a BMC could not be read."""
    if as_json:
        print_json({"hosts": [r.as_json() for r in rows]})
    else:
        cols = [Col("host", ident=True), Col("bmc", ident=True), Col("power", 3, ident=True),
                Col("health", 1, ident=True), Col("serial", 4, ident=True),
                Col("GPUs", 5, justify="right"), Col("new SEL", 6, justify="right"),
                Col("notes", 2)]
        cells = []
        for r in rows:
            notes = [*(r.alarms), *([r.diagnosis] if r.diagnosis else []),
                     *([r.reason] if r.reason else [])]
            cells.append([
                lit(r.host), lit(r.outcome), lit(r.power_state or "-"), lit(r.health or "-"),
                lit((r.identity or {}).get("serial") or "-"),
                "-" if r.gpus is None else str(len(r.gpus)),
                str(len(r.sel_new)), lit(_("; ").join(_note(n) for n in notes)),
            ])
        show(cols, cells, title=_("BMC status"))
    if not all(r.ok for r in rows):
        raise typer.Exit(1)


@app.command("power")
@boundary
def power_cmd(
    action: PowerAction = typer.Argument(..., help="on, off, cycle or reset."),
    host: str = typer.Argument(..., help="The host."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
    force: bool = typer.Option(False, "--force", help="Even if the host is allocated."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    override_identity: bool = typer.Option(False, "--override-identity", help=OVERRIDE_HELP),
    reason: str | None = typer.Option(None, "--reason", help=REASON_HELP),
) -> None:
    """Power a host on/off/cycle/reset through its BMC and wait for the state to settle;
    refused for allocated hosts unless --force, and while its bmc-identity alarm is open
    unless --override-identity --reason; recorded as a bmc event."""
    why = override_reason(override_identity, reason)
    _confirm(action, host, yes)
    res = svc.power(open_fleet(), host, action, force=force, override_identity=why)
    show_action(res, as_json)


def _confirm(action: PowerAction, host: str, yes: bool) -> None:
    if not yes and not typer.confirm(
            _("Power {action} {host}?").format(action=action.value, host=host), default=False
    ):
        raise typer.Exit(1)


def confirm_power(_api: object, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """``bmc power`` in remote mode, before the call: the same checks and question as
    locally; the reason is sent only with --override-identity."""
    why = override_reason(kwargs["override_identity"], kwargs["reason"])
    _confirm(kwargs["action"], kwargs["host"], kwargs["yes"])
    return {"reason": why}


@app.command("sel-ack")
@boundary
def sel_ack_cmd(
    host: str = typer.Argument(..., help="The host."),
    reason: str = typer.Option(..., "--reason", help="What was done about it (audited)."),
) -> None:
    """Acknowledge a host's BMC event-log fault: closes its bmc-sel alarm (the only way it
    closes), recorded with actor and reason."""
    show_sel_ack({"host": host, "closed": svc.sel_ack(open_fleet(), host, reason)})


def show_sel_ack(acked: Mapping[str, Any]) -> None:
    """Print ``bmc sel-ack`` (local and remote mode): the host, the alarms closed."""
    console.print(_("{host}: {n} bmc-sel alarm(s) closed").format(
        host=lit(acked["host"]), n=acked["closed"]))


@boundary
def reimage_cmd(
    host: str = typer.Argument(..., help="The host."),
    image: str | None = typer.Option(None, "--image", help="OS image URL (http/https)."),
    baseline: str | None = typer.Option(
        None, "--baseline", help="Use this baseline's os_image_url (default: the host's)."
    ),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    override_identity: bool = typer.Option(False, "--override-identity", help=OVERRIDE_HELP),
    reason: str | None = typer.Option(None, "--reason", help=REASON_HELP),
    no_drain: bool = NO_DRAIN_OPTION,
    drain_timeout: str = DRAIN_TIMEOUT_OPTION,
) -> None:
    """Reimage a host by virtual media: insert the image, one-time boot from it, power-cycle,
    record a reimage change (the host goes back to validation; accept its new SSH host key
    with 'gpufleet hosts rekey'). Refused for allocated hosts, and while its bmc-identity
    alarm is open unless --override-identity --reason. Drained first where work runs (Slurm
    jobs waited for, Kubernetes pods evicted): exit 6 with what blocked."""
    from gpufleet.domain.leases import parse_duration

    why = override_reason(override_identity, reason)
    timeout = parse_duration(drain_timeout, "--drain-timeout")
    if image and baseline:
        raise ConfigError("give --image or --baseline, not both")
    if not yes and not typer.confirm(
            _("Reimage {host} (its disk is overwritten)?").format(host=host), default=False):
        raise typer.Exit(1)
    res = svc.reimage(open_fleet(), host, image=image, baseline=baseline,
                      override_identity=why, no_drain=no_drain, drain_timeout=timeout)
    show_action(res, as_json)


def show_action(res: svc.BmcAction, as_json: bool) -> None:
    """Print a BMC action (``bmc power``, ``reimage``; local and remote mode); exit 1 when
    it failed."""
    if as_json:
        print_json(res.as_json())
    elif res.ok:
        done = _("{host}: {action} done, power {power}").format(
            host=lit(res.host), action=lit(res.action), power=lit(res.power_state))
        state = _(", state {state}").format(state=lit(res.state)) if res.state else ""
        console.print(done + state)
        for n in res.notes:
            console.print("  " + _("note: {note}").format(note=lit(_note(n))))
    else:
        err_console.print("[bold red]" + _("error:") + f"[/] {lit(res.reason)}", soft_wrap=True)
    if not res.ok:
        raise typer.Exit(1)


def _note(text: str) -> str:
    """A stored note (a diagnosis, an alarm, an error) in the operator's language."""
    shown = reason_text(text)
    if shown == text and language() != "en":
        from gpufleet.domain.error_texts import localize

        shown = localize(text, _)
    return shown
