"""``gpufleet``: onboard, validate and run fleets of GPU servers."""

from __future__ import annotations

from pathlib import Path

import typer

from gpufleet.cli import alarms as alarms_cmds
from gpufleet.cli import alloc as alloc_cmds
from gpufleet.cli import baseline as baseline_cmds
from gpufleet.cli import bmc as bmc_cmds
from gpufleet.cli import campaign as campaign_cmds
from gpufleet.cli import collect as collect_cmds
from gpufleet.cli import db as db_cmds
from gpufleet.cli import export as export_cmds
from gpufleet.cli import failures as failures_cmds
from gpufleet.cli import hosts as hosts_cmds
from gpufleet.cli import inspect as inspect_cmds
from gpufleet.cli import lifecycle as lifecycle_cmds
from gpufleet.cli import parts as parts_cmds
from gpufleet.cli import preflight as preflight_cmds
from gpufleet.cli import reclaim as reclaim_cmds
from gpufleet.cli import remediate as remediate_cmds
from gpufleet.cli import serve as serve_cmds
from gpufleet.cli import slurm as slurm_cmds
from gpufleet.cli import summary as summary_cmds
from gpufleet.cli import sync as sync_cmds
from gpufleet.cli import token as token_cmds
from gpufleet.cli import worker as worker_cmds
from gpufleet.cli.common import OPTIONS
from gpufleet.cli.plugins import PluginGroup

app = typer.Typer(
    cls=PluginGroup,  # adds plugin commands (`gpufleet lab`) from entry points, lazily
    help="gpufleet: take GPU servers from 'racked' to 'verified, allocatable, maintained'.\n\n"
    "Commands take host selectors: NAME-GLOB, group:G, pool:P, state:S, model:M, rack:R; "
    "comma = union.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)


@app.callback()
def main(
    home: Path | None = typer.Option(
        None,
        "--home",
        help="State directory (SQLite database, lab). Overrides GPUFLEET_HOME; "
        "default ~/.local/share/gpufleet.",
    ),
    db: str | None = typer.Option(
        None,
        "--db",
        help="Database URL, e.g. postgresql+psycopg://user@host/db. Overrides "
        "GPUFLEET_DATABASE_URL and --home's SQLite.",
    ),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks with errors."),
) -> None:
    """gpufleet: take GPU servers from 'racked' to 'verified, allocatable, maintained'.

    Settings come from GPUFLEET_* environment variables (docs/reference.md, "Settings");
    they are validated before any command does anything.
    """
    # Only remembered here: the settings are loaded and validated by each command's error
    # boundary (cli.common.boundary), so that a bad value ends in one line and exit 2.
    OPTIONS.home = home
    OPTIONS.db_url = db
    OPTIONS.debug = debug
    OPTIONS.settings = None


collect_cmds.register(app)
lifecycle_cmds.register(app)
summary_cmds.register(app)
app.command("drift")(baseline_cmds.drift_cmd)
app.command("events")(hosts_cmds.events_cmd)
app.add_typer(baseline_cmds.app, name="baseline", help="Validated image/driver/CUDA/firmware sets.")
app.add_typer(baseline_cmds.pool_app, name="pool", help="Pools and the baseline each points to.")
app.add_typer(hosts_cmds.app, name="hosts", help="List, inspect, rekey and remove hosts.")
app.add_typer(db_cmds.app, name="db", help="Database schema: status, explicit upgrade.")
app.command("prune")(db_cmds.prune_cmd)
alloc_cmds.register(app)
hosts_cmds.app.command("eta")(alloc_cmds.hosts_eta_cmd)
app.command("reclaim")(reclaim_cmds.reclaim_cmd)
app.command("preflight")(preflight_cmds.preflight_cmd)
app.add_typer(alarms_cmds.app, name="alarms", help="Alarms: list, show, acknowledge, resolve.")
app.add_typer(slurm_cmds.app, name="slurm", help="Slurm: export node definitions, sync drains.")
app.add_typer(failures_cmds.app, name="failures", help="Job failures: record, import, report.")
app.add_typer(bmc_cmds.app, name="bmc", help="BMCs over Redfish: set, status, power, sel-ack.")
app.command("reimage")(bmc_cmds.reimage_cmd)
export_cmds.register(app)
app.add_typer(sync_cmds.app, name="sync", help="Run the enabled syncs; sync status: drift.")
app.command("serve")(serve_cmds.serve_cmd)
app.command("worker")(worker_cmds.worker_cmd)
app.command("remediate")(remediate_cmds.remediate_cmd)
baseline_cmds.pool_app.command("health-policy")(remediate_cmds.pool_health_policy_cmd)
app.add_typer(parts_cmds.app, name="parts", help="GPU parts history by serial: list, show.")
app.add_typer(token_cmds.app, name="token", help="API tokens: create (shown once), list, revoke.")
app.add_typer(
    inspect_cmds.app, name="inspect", help="Health sweep: inspect [SELECTOR], report, guard."
)
app.add_typer(campaign_cmds.app, name="campaign", help="Change campaigns: canary, waves, rollback.")

if __name__ == "__main__":  # pragma: no cover
    app()
