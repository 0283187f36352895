"""``gpufleet racks list|show``: racks (chassis serial) and NVLink domains derived from the
hosts' latest facts, their trays in slot order and the manifest findings (issue 27)."""

from __future__ import annotations

import typer
from rich.table import Table

from gpufleet.cli.common import boundary, console, lit, open_fleet, print_json
from gpufleet.i18n import N_, _, reason_text, state_name
from gpufleet.service.health.rack_incidents import open_incidents, resolve_incident
from gpufleet.service.views.racks import RackRow, list_racks, show_rack

app = typer.Typer(no_args_is_help=True)

#: A rack's states (:class:`RackRow`), marked for display (``--json`` keeps the value).
RACK_STATES = (N_("degraded"), N_("alarmed"))
#: A tray's health and fabric outcomes (``ok`` as a rack's), marked for display.
TRAY_WORDS = (N_("warning"), N_("critical"), N_("not_member"), N_("pending"), N_("fails"))


def _state(state: str) -> str:
    """A rack's state (a tray's health, fabric) as shown: ``ok`` has its own entry (a rack
    is "fine", where a collection's ``ok`` "succeeded"); English shows the value."""
    if state == "ok":
        shown = _("rack state ok")
        return state if shown == "rack state ok" else shown
    return _(state)


def _dash(v: object) -> str:
    return "-" if v is None else str(v)


@app.command("list")
@boundary
def list_cmd(as_json: bool = typer.Option(False, "--json", help="Print as JSON.")) -> None:
    """Every rack: model, NVLink domain, trays (of those expected), GPUs, free GPUs, state."""
    print_racks(list_racks(open_fleet()), as_json)


def print_racks(rows: list[RackRow], as_json: bool) -> None:
    """``racks list``'s output, local or remote (one presenter)."""
    if as_json:
        print_json([r.as_json(trays=False) for r in rows])
        return
    t = Table(title=_("racks"))
    for col in (_("rack"), _("model"), _("NVLink domain"), _("trays"), _("GPUs"), _("free"),
                _("state")):
        t.add_column(col, overflow="fold")
    for r in rows:
        t.add_row(lit(r.rack), lit(_dash(r.model)), lit(_dash(r.nvl_domain or
                  (", ".join(r.domains) or None))), f"{r.trays}/{_dash(r.expected_trays)}",
                  str(r.gpus), str(r.free_gpus), lit(_state(r.state)))
    console.print(t)
    for r in rows:
        for f in r.findings:
            console.print(f"[yellow]{lit(r.rack)}[/yellow]: {lit(f['message'])}")


@app.command("show")
@boundary
def show_cmd(
    rack: str = typer.Argument(..., help="Rack id (chassis serial), NVLink domain or a host."),
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
) -> None:
    """One rack's trays in slot order: state, health, fabric, validated profiles, lease and
    alarms; and the manifest findings."""
    print_rack(show_rack(open_fleet(), rack), as_json)


def print_rack(r: RackRow, as_json: bool) -> None:
    """``racks show``'s output, local or remote (one presenter)."""
    if as_json:
        print_json(r.as_json(trays=True))
        return
    console.print(_("rack {rack} ({model}), NVLink domain {domain}, {trays}/{expected} trays, "
                    "{free}/{gpus} GPUs free, {state}").format(
        rack=lit(r.rack), model=lit(_dash(r.model)), domain=lit(_dash(r.nvl_domain)),
        trays=r.trays, expected=_dash(r.expected_trays), free=r.free_gpus, gpus=r.gpus,
        state=lit(_state(r.state))))
    t = Table(title=_("trays"))
    for col in (_("slot"), _("tray"), _("host"), _("state"), _("health"), _("fabric"),
                _("profiles"), _("lease"), _("alarms")):
        t.add_column(col, overflow="fold")
    for tr in r.tray_rows:
        lease = f"{tr.lease['id']} {tr.lease['owner']}" if tr.lease else "-"
        t.add_row(_dash(tr.slot), _dash(tr.tray_index), lit(tr.host), lit(state_name(tr.state)),
                  lit(_state(tr.health)),
                  lit(_state(tr.fabric) if tr.reporting
                      else _("{fabric} (silent)").format(fabric=_state(tr.fabric))),
                  lit(", ".join(tr.profiles) or "-"), lit(lease),
                  lit(", ".join(a["kind"] for a in tr.alarms) or "-"))
    console.print(t)
    for why in sorted({tr.restricted for tr in r.tray_rows if tr.restricted}):
        n = sum(1 for tr in r.tray_rows if tr.restricted == why)
        console.print("[red]" + _("restricted") + "[/red]" + _(
            ": {n} trays by {why}: out of NVLink-domain placement (gpufleet racks incidents)"
        ).format(n=n, why=lit(reason_text(why))))
    for f in r.findings:
        console.print(f"[yellow]{lit(f['kind'])}[/yellow]: {lit(f['message'])}")


@app.command("incidents")
@boundary
def incidents_cmd(as_json: bool = typer.Option(False, "--json", help="Print as JSON.")) -> None:
    """Open rack incidents: one per NVLink domain whose trays report rack-scoped fabric
    faults together; its hosts are out of NVLink-domain placement."""
    rows = open_incidents(open_fleet())
    if as_json:
        print_json(rows)
        return
    for r in rows:
        console.print(_("alarm {id} on {host}: {message}").format(
            id=r["id"], host=lit(r["host"]), message=lit(reason_text(r["message"]))))
        if r.get("drain_command"):
            console.print("  " + _("approve the drain: ") + lit(r["drain_command"]))
    if not rows:
        console.print(_("no open rack incident"))


@app.command("resolve")
@boundary
def resolve_cmd(
    rack: str = typer.Argument(..., help="Rack id, NVLink domain or one of its hosts."),
    reason: str = typer.Option(..., "--reason", help="Why the incident is over."),
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
) -> None:
    """Close the rack's open incident, lift its hosts' restriction and re-validate them."""
    got = resolve_incident(open_fleet(), rack, reason)
    if as_json:
        print_json(got)
        return
    states = ", ".join(f"{h} {s}" for h, s in sorted(got["validated"].items()))
    console.print(_("rack incident {alarm} resolved; re-validated: {states}").format(
        alarm=got["alarm"], states=lit(states)))
