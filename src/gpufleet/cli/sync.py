"""``gpufleet sync``: run the enabled syncs once or in a loop; ``gpufleet sync status``."""

from __future__ import annotations

import signal
import threading
from datetime import timedelta
from pathlib import Path
from types import FrameType

import typer

from gpufleet.cli.common import boundary, console, lit, open_fleet, print_json
from gpufleet.domain.sync import Target, parse_every
from gpufleet.errors import UsageError
from gpufleet.i18n import _
from gpufleet.service.exports.sync import Round, Systems, enabled_targets, sync_loop, sync_round
from gpufleet.service.exports.sync import sync_status as compute_status

app = typer.Typer(invoke_without_command=True, no_args_is_help=False)


def _chosen(k8s: bool, slurm: bool) -> list[Target]:
    return [t for t, on in ((Target.K8S, k8s), (Target.SLURM, slurm)) if on]


def _print_round(r: Round) -> None:
    for res in r.results:
        head = _("ok") if res.ok else "[red]" + _("FAILED") + "[/]"
        console.print(_("{target}: {result}, {n} change(s)").format(
            target=res.target, result=head, n=len(res.changed)))
        for line in res.changed:
            console.print(f"  {lit(line)}")
        for e in res.errors:
            console.print("  [red]" + _("error") + f"[/]: {lit(e)}")


@app.callback()
@boundary
def sync_cmd(
    ctx: typer.Context,
    once: bool = typer.Option(False, "--once", help="One round, then exit (1 if one failed)."),
    every: str | None = typer.Option(
        None, "--every", help="Time between rounds: 30s, 1m, 2h (default GPUFLEET_SYNC_EVERY)."
    ),
    k8s: bool = typer.Option(False, "--k8s", help="Sync Kubernetes (default: the setting)."),
    slurm: bool = typer.Option(False, "--slurm", help="Sync Slurm (default: the setting)."),
    kubeconfig: Path | None = typer.Option(
        None, "--kubeconfig", help="Kubeconfig file (default GPUFLEET_KUBECONFIG, ...)."
    ),
) -> None:
    """Run the enabled syncs (GPUFLEET_SYNC_TARGETS, or --k8s/--slurm): once with --once,
    else in a loop until SIGTERM/SIGINT (the round in progress finishes, exit 0). A target
    that fails is reported and never stops the other. Kubernetes includes the DRA
    DeviceTaintRules (k8s dra-sync) where GPUFLEET_KUBE_DRA is set; Slurm includes the
    leases' reservations."""
    ctx.ensure_object(dict)
    ctx.obj.update(k8s=k8s, slurm=slurm, kubeconfig=kubeconfig)
    if ctx.invoked_subcommand is not None:
        return
    fleet = open_fleet()
    targets = enabled_targets(fleet, _chosen(k8s, slurm))
    systems = Systems(kubeconfig=kubeconfig)
    if once:
        r = sync_round(fleet, targets, systems)
        _print_round(r)
        if not r.ok:
            raise typer.Exit(1)
        return
    try:
        seconds = parse_every(every) if every is not None else fleet.settings.sync_every_s
    except ValueError as exc:
        raise UsageError(command="gpufleet sync", cause=f"--every {exc}") from None
    stop = threading.Event()

    def _stop(signum: int, frame: FrameType | None) -> None:
        console.print(_("signal {name}: stopping after this round").format(
            name=signal.Signals(signum).name))
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    console.print(_("sync {targets} every {seconds}s (SIGTERM stops)").format(
        targets=", ".join(targets), seconds=f"{seconds:g}"))
    n = sync_loop(fleet, targets, timedelta(seconds=seconds), stop, systems, _print_round)
    console.print(_("stopped after {n} round(s)").format(n=n))


@app.command("status")
@boundary
def status_cmd(
    ctx: typer.Context,
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
) -> None:
    """Per host, where Kubernetes or Slurm disagree with gpufleet (hand uncordon, hand
    resume, edited labels, DeviceTaintRules with GPUFLEET_KUBE_DRA, lease reservations,
    someone else's reservation...) and what the next sync will do. Writes nothing. Exit 1
    when a target could not be read."""
    opts = ctx.obj or {}
    fleet = open_fleet()
    targets = enabled_targets(fleet, _chosen(opts.get("k8s", False), opts.get("slurm", False)))
    st = compute_status(fleet, targets, Systems(kubeconfig=opts.get("kubeconfig")))
    if as_json:
        print_json({"targets": [t.value for t in st.targets],
                    "disagreements": [d.as_json() for d in st.disagreements],
                    "errors": st.errors})
    else:
        host = None
        for d in st.disagreements:
            if d.host != host:
                host = d.host
                console.print(f"[bold]{lit(host)}[/]")
            console.print(f"  {d.target} [{d.cause}] {lit(d.what)}")
            console.print("      " + _("next sync: ") + lit(d.next_sync))
        for e in st.errors:
            console.print("[red]" + _("error") + f"[/]: {lit(e)}")
        if not st.disagreements and st.ok:
            console.print(_("{targets} agree with gpufleet").format(targets=", ".join(st.targets)))
    if not st.ok:
        raise typer.Exit(1)
