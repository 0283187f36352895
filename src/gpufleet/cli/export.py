"""``gpufleet inventory`` (Ansible dynamic inventory) and ``gpufleet k8s`` (Kubernetes sync)."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from gpufleet.cli.common import boundary, console, lit, open_fleet, print_json
from gpufleet.errors import ConfigError, LocalIOError
from gpufleet.i18n import _
from gpufleet.service.exports.ansible import inventory_host, inventory_list, write_inventory_script
from gpufleet.service.exports.k8s import SyncReport, k8s_export, k8s_sync

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
    console.print(_("wrote {path}: use it as  ansible -i {path} all -m ping").format(path=lit(out)))


k8s_app = typer.Typer(help="Kubernetes: apply gpufleet's labels and taints to the nodes.")


def sync_json(report: SyncReport) -> dict[str, object]:
    """A sync report as plain data."""
    return {
        "dry_run": report.dry_run,
        "nodes": [
            {
                "host": r.host,
                "node": r.node,
                "state": r.state,
                "missing": r.missing,
                "changes": r.patch.diff() if r.patch else [],
                "patch": r.patch.body() if r.patch else {},
                "findings": [{"kind": str(f.kind), "message": f.message} for f in r.findings],
                "error": r.error,
            }
            for r in report.results
        ],
    }


@k8s_app.command("sync")
@boundary
def k8s_sync_cmd(
    selector: str | None = typer.Argument(None, help="Hosts (default all)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the per-node diff only."),
    kubeconfig: Path | None = typer.Option(
        None, "--kubeconfig", help="Kubeconfig file (default GPUFLEET_KUBECONFIG, ...)."
    ),
    cordon_quarantined: bool | None = typer.Option(
        None,
        "--cordon-quarantined",
        help="Cordon quarantined hosts' nodes (default GPUFLEET_KUBE_CORDON_QUARANTINED).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
) -> None:
    """Apply gpufleet's labels and taints to each host's node (only gpufleet's keys), and
    alarm on nodes with fewer allocatable GPUs than validated or NotReady while healthy.
    Exit 1 when a node could not be patched or a cross-check found something."""
    report = k8s_sync(
        open_fleet(),
        selector,
        dry_run=dry_run,
        kubeconfig=kubeconfig,
        cordon_quarantined=cordon_quarantined,
    )
    if as_json:
        print_json(sync_json(report))
    else:
        for r in report.results:
            if r.missing:
                console.print(f"[yellow]{lit(r.host)}[/]: "
                              + _("no node named {node}").format(node=lit(r.node)))
                continue
            lines = r.patch.diff() if r.patch else []
            head = _("would change") if report.dry_run else _("changed")
            if lines:
                console.print(f"[bold]{lit(r.host)}[/] "
                              + _("(node {node}): {what}").format(node=lit(r.node), what=head))
                for line in lines:
                    console.print(f"  {lit(line)}")
            if r.error:
                console.print(f"[red]{lit(r.host)}[/]: {lit(r.error)}")
            for f in r.findings:
                console.print("[red]" + _("alarm") + f"[/] {lit(f.kind)}: {lit(f.message)}")
        n = len(report.changed)
        line = _("{n} node(s) to change") if report.dry_run else _("{n} node(s) changed")
        console.print(line.format(n=n))
    if report.findings or any(r.error for r in report.results):
        raise typer.Exit(1)


@k8s_app.command("export")
@boundary
def k8s_export_cmd(
    selector: str | None = typer.Argument(None, help="Hosts (default all)."),
    output: Path | None = typer.Option(None, "--output", "-o", help="File (default stdout)."),
    cordon_quarantined: bool | None = typer.Option(
        None,
        "--cordon-quarantined",
        help="Cordon quarantined hosts' nodes (default GPUFLEET_KUBE_CORDON_QUARANTINED).",
    ),
) -> None:
    """A kubectl script (sh) applying the same labels and taints, for clusters gpufleet
    cannot reach."""
    text = k8s_export(open_fleet(), selector, cordon_quarantined=cordon_quarantined)
    if output is None:
        sys.stdout.write(text)
        return
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise LocalIOError(path=str(output), cause=str(exc.strerror or exc)) from exc
    console.print(_("wrote ") + lit(output))


@k8s_app.command("dra-sync")
@boundary
def k8s_dra_sync_cmd(
    dry_run: bool = typer.Option(False, "--dry-run", help="Print what would change only."),
    kubeconfig: Path | None = typer.Option(
        None, "--kubeconfig", help="Kubeconfig file (default GPUFLEET_KUBECONFIG, ...)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
) -> None:
    """DRA clusters: a DeviceTaintRule (gpufleet.io/quarantine, NoSchedule, by GPU UUID) per
    quarantined or unusable GPU, dry run (effect None) first; removed once the GPU passes
    validation; alarm on nodes whose ResourceSlices list fewer devices than validated.
    Exit 1 on an error or a short node."""
    from dataclasses import asdict

    from gpufleet.service.exports.k8s_dra import dra_sync

    rep = dra_sync(open_fleet(), kubeconfig=kubeconfig, dry_run=dry_run)
    if as_json:
        print_json(asdict(rep))
    else:
        taint = _("would taint {rule} ({host})") if dry_run else _("taint {rule} ({host})")
        remove = _("would remove {rule} ({host})") if dry_run else _("remove {rule} ({host})")
        for name in rep.created:
            console.print(taint.format(rule=lit(name), host=lit(rep.hosts.get(name, "?"))))
        for name in rep.removed:
            console.print(remove.format(rule=lit(name), host=lit(rep.hosts.get(name, "?"))))
        for host, (n, want) in sorted(rep.short.items()):
            console.print("[red]" + _("alarm") + f"[/] {lit(host)}: " + _(
                "ResourceSlices list {n} of {want} GPUs").format(n=n, want=want))
        for e in rep.errors:
            console.print(f"[red]{lit(e)}[/]")
    if rep.errors or rep.short:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Attach ``inventory`` and ``k8s``."""
    app.add_typer(inventory_app, name="inventory")
    app.add_typer(k8s_app, name="k8s")
