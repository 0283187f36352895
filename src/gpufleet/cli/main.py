"""``gpufleet``: onboard, validate and run fleets of GPU servers.

Command modules are imported lazily (issue 8, start-up): :data:`COMMANDS` names every
top-level command with its one-line help and the module that defines it, so ``gpufleet
--help`` lists them without importing any, and ``gpufleet hosts show`` imports the hosts
module only. ``tests/cli/test_cli_output.py`` checks the table against the loaded commands.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import typer
from typer import _click
from typer.core import TyperCommand

from gpufleet.cli.entry import imports_done
from gpufleet.cli.help_i18n import click_heading, translate, translated
from gpufleet.cli.plugins import PluginGroup, plugins
from gpufleet.i18n import _

# -- registration, one function per command module (run when one of its commands is used) ---


def _collect(app: typer.Typer) -> None:
    from gpufleet.cli import collect

    collect.register(app)


def _lifecycle(app: typer.Typer) -> None:
    from gpufleet.cli import lifecycle

    lifecycle.register(app)


def _summary(app: typer.Typer) -> None:
    from gpufleet.cli import summary

    summary.register(app)


def _baseline(app: typer.Typer) -> None:
    from gpufleet.cli import baseline, remediate

    app.command("drift")(baseline.drift_cmd)
    app.add_typer(baseline.app, name="baseline", help="Validated image/driver/CUDA/firmware sets.")
    baseline.pool_app.command("health-policy")(remediate.pool_health_policy_cmd)
    app.add_typer(baseline.pool_app, name="pool", help="Pools and the baseline each points to.")


def _hosts(app: typer.Typer) -> None:
    from gpufleet.cli import hosts

    app.command("events")(hosts.events_cmd)
    app.add_typer(hosts.app, name="hosts", help="List, inspect, rekey and remove hosts.")


def _db(app: typer.Typer) -> None:
    from gpufleet.cli import db

    app.command("prune")(db.prune_cmd)
    app.add_typer(db.app, name="db", help="Database schema: status, explicit upgrade.")


def _alloc(app: typer.Typer) -> None:
    from gpufleet.cli import alloc

    alloc.register(app)


def _single(module: str, name: str, attr: str) -> Callable[[typer.Typer], None]:
    def register(app: typer.Typer) -> None:
        import importlib

        app.command(name)(getattr(importlib.import_module(f"gpufleet.cli.{module}"), attr))

    return register


def _group(module: str, name: str, help: str) -> Callable[[typer.Typer], None]:
    def register(app: typer.Typer) -> None:
        import importlib

        app.add_typer(importlib.import_module(f"gpufleet.cli.{module}").app, name=name, help=help)

    return register


def _bmc(app: typer.Typer) -> None:
    from gpufleet.cli import bmc

    app.add_typer(bmc.app, name="bmc", help="BMCs over Redfish: set, status, power, sel-ack.")
    app.command("reimage")(bmc.reimage_cmd)


def _export(app: typer.Typer) -> None:
    from gpufleet.cli import export

    export.register(app)


_REGISTER: dict[str, Callable[[typer.Typer], None]] = {
    "collect": _collect,
    "lifecycle": _lifecycle,
    "summary": _summary,
    "baseline": _baseline,
    "hosts": _hosts,
    "db": _db,
    "alloc": _alloc,
    "reclaim": _single("reclaim", "reclaim", "reclaim_cmd"),
    "preflight": _single("preflight", "preflight", "preflight_cmd"),
    "alarms": _group("alarms", "alarms", "Alarms: list, show, acknowledge, resolve."),
    "slurm": _group("slurm", "slurm", "Slurm: export node definitions, sync drains."),
    "failures": _group("failures", "failures", "Job failures: record, import, report."),
    "bmc": _bmc,
    "export": _export,
    "sync": _group("sync", "sync", "Run the enabled syncs; sync status: drift."),
    "serve": _single("serve", "serve", "serve_cmd"),
    "worker": _single("worker", "worker", "worker_cmd"),
    "remediate": _single("remediate", "remediate", "remediate_cmd"),
    "parts": _group("parts", "parts", "GPU parts history by serial: list, show."),
    "racks": _group("racks", "racks", "Racks and NVLink domains from facts: list, show."),
    "token": _group("token", "token", "API tokens: create (shown once), list, revoke."),
    "inspect": _group("inspect", "inspect", "Health sweep: inspect [SELECTOR], report, guard."),
    "campaign": _group("campaign", "campaign", "Change campaigns: canary, waves, rollback."),
}

#: Every top-level command, in ``--help`` order: (its registration in :data:`_REGISTER`,
#: its one-line help: the start of the command's own help, which tests/test_docs.py checks).
COMMANDS: dict[str, tuple[str, str]] = {
    "enroll": ("collect", "Enroll (or update) hosts from an inventory; re-running is idempotent."),
    "collect": (
        "collect",
        "Collect facts from hosts over SSH (or the lab / this machine) and store them.",
    ),
    "validate": (
        "lifecycle",
        "Collect fresh facts, run the checks and move each host "
        "(available / validating / quarantined).",
    ),
    "retire": ("lifecycle", "Retire hosts for good (refused while allocated)."),
    "unquarantine": (
        "lifecycle",
        "Declare quarantined hosts repaired: they go back to validating.",
    ),
    "sweep": (
        "lifecycle",
        "Fire deadlines (stuck validating/reclaiming -> quarantined) and validation expiry.",
    ),
    "summary": (
        "summary",
        "Hosts per state, available GPUs per profile/model, quarantined hosts, drift.",
    ),
    "labels": (
        "summary",
        "Kubernetes labels (GPU Feature Discovery compatible + gpufleet.io) and taints.",
    ),
    "drift": (
        "baseline",
        "Every host that differs from its pool's baseline, field by field, with fleet-wide counts.",
    ),
    "events": ("hosts", "The audit log: who did what to which host, when and why."),
    "prune": (
        "db",
        "Remove old fact snapshots; never a host's latest, nor one a validation or "
        "a detected change points at.",
    ),
    "allocate": (
        "alloc",
        "Lease whole hosts to an owner for a purpose and a time (or reserve them from --start).",
    ),
    "reclaim": (
        "reclaim",
        "Run the reclaim checks (GPU processes and memory, pending row "
        "remaps, data mounts, the lessee's processes and crontabs, scratch) and "
        "validation on hosts in reclaiming (or owing a passing reclaim): clean -> available, "
        "else quarantined with the findings as evidence.",
    ),
    "preflight": (
        "preflight",
        "Collect this node (no database, no SSH), run the profiles' "
        "checks and print one verdict: PASS or WARNING exit 0, CRITICAL exit 1, "
        "UNKNOWN exit 2 (fail closed).",
    ),
    "reimage": (
        "bmc",
        "Reimage a host by virtual media: insert the image, one-time boot from "
        "it, power-cycle, record a reimage change (the host goes back to validation; "
        "accept its new SSH host key with 'gpufleet hosts rekey').",
    ),
    "serve": (
        "serve",
        "Serve the REST API (/api/v1, OpenAPI at /api/v1/openapi.json) and "
        "Prometheus metrics (/metrics) over the fleet database.",
    ),
    "worker": (
        "worker",
        "Run jobs from the job queue in the fleet's PostgreSQL database until "
        "stopped: chunks of collect/validate runs (POST /api/v1/runs, the schedules), "
        "the deadline and lease sweep, the exporter syncs.",
    ),
    "remediate": (
        "remediate",
        "Run one rung of the remediation ladder on a host, record it, "
        "send the host to validation (service-request: to maintenance with the "
        "ticket and ETA).",
    ),
    "maintenance": ("lifecycle", "Take hosts in and out of maintenance."),
    "change": ("lifecycle", "Declare changes made outside gpufleet."),
    "evidence": ("lifecycle", "Store active-test results (DCGM, NCCL, gpu-burn)."),
    "baseline": ("baseline", "Validated image/driver/CUDA/firmware sets."),
    "pool": ("baseline", "Pools and the baseline each points to."),
    "hosts": ("hosts", "List, inspect, rekey and remove hosts."),
    "db": ("db", "Database schema: status, explicit upgrade."),
    "leases": ("alloc", "Leases and reservations: list, renew, release."),
    "capacity": ("alloc", "GPU capacity, and the CI capacity gate."),
    "alarms": ("alarms", "Alarms: list, show, acknowledge, resolve."),
    "slurm": ("slurm", "Slurm: export node definitions, sync drains."),
    "failures": ("failures", "Job failures: record, import, report."),
    "bmc": ("bmc", "BMCs over Redfish: set, status, power, sel-ack."),
    "inventory": (
        "export",
        "Ansible dynamic inventory: --list, --host NAME, and an executable script for -i.",
    ),
    "k8s": ("export", "Kubernetes: apply gpufleet's labels and taints to the nodes."),
    "sync": ("sync", "Run the enabled syncs; sync status: drift."),
    "parts": ("parts", "GPU parts history by serial: list, show."),
    "racks": ("racks", "Racks and NVLink domains from facts: list, show."),
    "token": ("token", "API tokens: create (shown once), list, revoke."),
    "inspect": ("inspect", "Health sweep: inspect [SELECTOR], report, guard."),
    "campaign": ("campaign", "Change campaigns: canary, waves, rollback."),
}


@cache
def _loaded(key: str) -> dict[str, Any]:
    """The Click commands one registration adds (imported and built once per process)."""
    sub = typer.Typer(rich_markup_mode="rich")
    _REGISTER[key](sub)
    return dict(translate(typer.main.get_group(sub)).commands)


class LazyGroup(PluginGroup):
    """The top-level group: :data:`COMMANDS` loaded on first use, then the plugins.

    While its own help is formatted it answers placeholders carrying the one-line help, so
    ``gpufleet --help`` imports no command module.
    """

    _listing = False

    def list_commands(self, ctx: Any) -> list[str]:
        """The built-in commands in their order, then plugins (:class:`PluginGroup`)."""
        own = [*super().list_commands(ctx)]
        return [*COMMANDS, *(n for n in own if n not in COMMANDS)]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        """A built-in command (its module imported now), else a plugin. Once loaded, the
        garbage collector the entry point kept off while importing is on again
        (:func:`gpufleet.cli.entry.imports_done`)."""
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            if self._listing and cmd_name not in self.commands:
                ep = plugins().get(cmd_name)  # its help would mean importing it
                return (
                    None
                    if ep is None
                    else TyperCommand(
                        name=cmd_name, short_help=_("Plugin {name}.").format(name=ep.value)
                    )
                )
            found = super().get_command(ctx, cmd_name)
            if found is not None:  # a plugin: the project's own (the lab) are in the catalog
                translate(found)
        else:
            key, one_line = entry
            if self._listing:
                one_line = translated(one_line) or one_line
                return TyperCommand(name=cmd_name, help=one_line, short_help=one_line)
            found = _loaded(key)[cmd_name]
        imports_done()
        return found

    def format_help(self, ctx: Any, formatter: Any) -> None:
        """This group's help, in Click's plain layout (Rich's would cost more to import than
        the whole start-up budget), its command list from :data:`COMMANDS`: nothing imported.
        """
        self._listing = True
        try:
            _click.Command.format_help(self, ctx, formatter)
        finally:
            self._listing = False
        formatter.buffer[:] = [  # Click's own headings (Options:, Commands:)
            click_heading(part.strip()) + "\n" if part.endswith(":\n") else part
            for part in formatter.buffer
        ]

    def main(self, *args: Any, **kwargs: Any) -> Any:
        """Run the CLI, its own help and options in the language of the messages."""
        translate(self)
        return super().main(*args, **kwargs)


app = typer.Typer(
    cls=LazyGroup,  # built-in commands from COMMANDS and plugins from entry points, lazily
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
    debug: bool = typer.Option(
        False, "--debug", help="Show tracebacks with errors, and debug log lines."
    ),
    utc: bool = typer.Option(
        False,
        "--utc",
        help="Read times without a zone as UTC and show times in UTC (default: local time, "
        "TZ).",
    ),
) -> None:
    """gpufleet: take GPU servers from 'racked' to 'verified, allocatable, maintained'.

    Settings come from GPUFLEET_* environment variables (docs/reference.md, "Settings");
    they are validated before any command does anything.
    """
    # Only remembered here: the settings are loaded and validated by each command's error
    # boundary (cli.common.boundary), so that a bad value ends in one line and exit 2.
    from gpufleet.cli.common import OPTIONS

    OPTIONS.home = home
    OPTIONS.db_url = db
    OPTIONS.debug = debug
    OPTIONS.utc = utc
    OPTIONS.settings = None


if __name__ == "__main__":  # pragma: no cover
    app()
