"""``gpufleet inventory``: the Ansible dynamic inventory (and the script for ``ansible -i``)."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from gpufleet.cli.common import boundary, console, lit, open_fleet, print_json
from gpufleet.errors import ConfigError
from gpufleet.service.ansible import inventory_host, inventory_list, write_inventory_script

inventory_app = typer.Typer(
    help="Ansible dynamic inventory: --list, --host NAME, and an executable script for -i.",
    invoke_without_command=True,
    no_args_is_help=False,
)

#: How the inventory script runs this gpufleet: the interpreter running now, so the script
#: works from a virtual environment that is not on Ansible's PATH.
GPUFLEET_COMMAND = (sys.executable, "-m", "gpufleet.cli.main")


@inventory_app.callback()
@boundary
def inventory_cmd(
    ctx: typer.Context,
    list_: bool = typer.Option(False, "--list", help="Every host, grouped (Ansible's --list)."),
    host: str | None = typer.Option(None, "--host", help="The variables of one host."),
    selector: str | None = typer.Option(
        None, "--select", help="Only these hosts (a selector; default all)."
    ),
) -> None:
    """Ansible's dynamic-inventory JSON: groups by state, GPU model, pool, fabric, validated
    profile and rack; host variables with the pool baseline and GPU facts; no secrets."""
    if ctx.invoked_subcommand is not None:
        return
    if list_ == (host is not None):
        raise ConfigError(setting="inventory", cause="give exactly one of --list or --host NAME")
    if host is not None:
        print_json(inventory_host(open_fleet(), host))
    else:
        print_json(inventory_list(open_fleet(), selector))


@inventory_app.command("script")
@boundary
def inventory_script_cmd(
    path: Path = typer.Argument(..., help="Where to write the executable inventory."),
    no_db: bool = typer.Option(
        False, "--no-db", help="Leave the database to Ansible's environment (GPUFLEET_*)."
    ),
) -> None:
    """Write an executable inventory (sh) calling this gpufleet with this --home / --db, for
    ``ansible -i PATH`` and ``ansible-inventory -i PATH``."""
    out = write_inventory_script(open_fleet(), path, GPUFLEET_COMMAND, embed_db=not no_db)
    console.print(f"wrote {lit(out)}: use it as  ansible -i {lit(out)} all -m ping")


def register(app: typer.Typer) -> None:
    """Attach ``inventory`` (and ``k8s``)."""
    app.add_typer(inventory_app, name="inventory")
