"""``gpufleet summary`` and ``gpufleet labels``."""

from __future__ import annotations

import typer

from gpufleet.cli.common import boundary, current_settings, open_fleet
from gpufleet.cli.labels import print_labels
from gpufleet.cli.summary_view import STATE_ORDER, print_summary, render_summary, summary_json
from gpufleet.cli.tables import WIDE_HELP

__all__ = ["STATE_ORDER", "labels_cmd", "register", "render_summary", "summary_cmd", "summary_json"]


def register(app: typer.Typer) -> None:
    """Attach ``summary`` and ``labels``."""
    app.command("summary")(summary_cmd)
    app.command("labels")(labels_cmd)


@boundary
def summary_cmd(
    selector: str | None = typer.Argument(None, help="Hosts (default all)."),
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
    wide: bool = typer.Option(False, "--wide", help=WIDE_HELP),
) -> None:
    """Hosts per state, available GPUs per profile/model, quarantined hosts, drift."""
    from gpufleet.service.views.summary import fleet_summary

    print_summary(fleet_summary(open_fleet(), selector), as_json)


@boundary
def labels_cmd(
    selector: str | None = typer.Argument(None, help="HOST or selector (default all)."),
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
    wide: bool = typer.Option(False, "--wide", help=WIDE_HELP),
) -> None:
    """Kubernetes labels (GPU Feature Discovery compatible + gpufleet.io) and taints."""
    from gpufleet.service.hosts.labels import lean_host_labels

    # One host by name: read lean (no SQLAlchemy, no facts document), else the full path.
    rows = lean_host_labels(current_settings().db_url(), selector)
    if rows is None:
        from gpufleet.service.views.summary import host_labels

        rows = host_labels(open_fleet(), selector)
    print_labels(rows, as_json=as_json)
