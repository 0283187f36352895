"""``gpufleet slurm``: export node definitions, sync drains and resumes with the lifecycle."""

from __future__ import annotations

from pathlib import Path

import typer

from gpufleet.cli.common import boundary, console, lit, open_fleet, print_json
from gpufleet.cli.tables import WIDE_HELP, Col, show
from gpufleet.domain.slurm import DEFAULT_GPU_FILES
from gpufleet.i18n import _
from gpufleet.service.exports.slurm import slurm_sync, write_slurm_config, write_topology

app = typer.Typer(no_args_is_help=True)


@app.command("export")
@boundary
def export_cmd(
    out: Path = typer.Option(Path("."), "--out", help="Directory for slurm.conf and gres.conf."),
    selector: str | None = typer.Argument(None, help="Hosts (selector); all by default."),
    gpu_files: str = typer.Option(
        DEFAULT_GPU_FILES, "--gpu-files",
        help="gres.conf File= per node; {node} is the node name, {minors} the device "
        "minors of its usable GPUs (0,2-7).",
    ),
    topology: bool = typer.Option(
        False, "--topology", help="Also write topology.conf (topology/tree: one switch per "
        "NVLink domain) and topology-block.conf (topology/block: one BlockName= per domain)."
    ),
) -> None:
    """Write slurm.conf NodeName= lines (CPUs, RealMemory, Gres=gpu:<model>:<n>, Features
    from gpufleet's labels) and gres.conf for the selected hosts."""
    fleet = open_fleet()
    paths = write_slurm_config(fleet, out, selector, gpu_files)
    if topology:
        paths += write_topology(fleet, out, selector)
    for path in paths:
        console.print(_("wrote ") + lit(path))


@app.command("sync")
@boundary
def sync_cmd(
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Show what would change; change nothing."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the decisions as JSON."),
    wide: bool = typer.Option(False, "--wide", help=WIDE_HELP),
) -> None:
    """Drain the Slurm nodes of quarantined, maintenance and not-yet-validated hosts (reason
    'gpufleet:<state>[:<fault>] ...'), resume the nodes gpufleet drained once their host is
    available again; never resume another drain. Slurm's own drains and DOWN nodes raise a
    slurm-node alarm. Exit 1 if a Slurm command failed."""
    rep = slurm_sync(open_fleet(), dry_run=dry_run)
    if as_json:
        print_json({"dry_run": rep.dry_run, "decisions": [d.as_json() for d in rep.decisions],
                    "done": rep.done, "errors": rep.errors, "alarms": rep.alarms})
    else:
        cols = [Col("node", ident=True), Col("gpufleet", 1, ident=True),
                Col("slurm", words=True), Col("action", words=True), Col("why", 2)]
        cells = []
        for d in rep.decisions:
            slurm = d.slurm_state + (f" ({d.slurm_reason})" if d.slurm_reason else "")
            action = d.action.value + (f": {d.reason}" if d.reason else "")
            why = d.why + (f"; ALARM: {d.signal.message}" if d.signal else "")
            cells.append(
                [lit(d.node), lit(d.host_state or "-"), lit(slurm), lit(action), lit(why)]
            )
        show(cols, cells, title=_("slurm sync (dry run)") if dry_run else _("slurm sync"))
        for e in rep.errors:
            console.print("[red]" + _("error") + f"[/]: {lit(e)}")
    if not rep.ok:
        raise typer.Exit(1)
