"""``gpufleet campaign``: create (shows the plan), run, approve, status, pause, resume, abort,
report, list. The work is in :mod:`gpufleet.service.campaigns.campaign`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape

from gpufleet.api.schemas_runs import CampaignOut
from gpufleet.cli.common import boundary, console, err_console, lit, open_fleet, print_json
from gpufleet.cli.tables import WIDE_HELP
from gpufleet.domain.campaign import (
    ActionKind,
    AllocatedPolicy,
    CampaignStatus,
    CampaignUnit,
    HostStep,
    progress_bar,
)
from gpufleet.domain.changes import DeclaredChangeKind
from gpufleet.errors import ConfigError
from gpufleet.i18n import _
from gpufleet.service.campaigns.campaign import (
    CampaignSpec,
    CampaignView,
    abort_campaign,
    approve_campaign,
    create_campaign,
    list_campaigns,
    pause_campaign,
    run_campaign,
    show_campaign,
)

if TYPE_CHECKING:
    from gpufleet.cli.remote import Client

app = typer.Typer(no_args_is_help=True)

#: Exit code of ``campaign run``/``resume`` when the campaign halted (too many failures).
EXIT_HALTED = 1

_FINISHED = {HostStep.DONE, HostStep.FAILED, HostStep.ROLLED_BACK, HostStep.SKIPPED,
             HostStep.DEFERRED, HostStep.RELEASED}


def show_plan(v: CampaignView) -> None:
    """Waves (canary first) with hosts and progress bars, skipped hosts and why."""
    console.print(
        f"campaign [bold]{lit(v.name)}[/] ({lit(v.ticket)}): {lit(v.status)}, "
        f"{lit(v.action_kind)} {lit(v.action)} -> baseline {lit(v.target_baseline)}"
    )
    if v.approved_by:
        console.print(_("approved by ") + lit(v.approved_by))
    for i, wave in enumerate(v.waves):
        label = "canary" if i == 0 else f"wave {i}"
        done = sum(1 for h in wave if h.step in _FINISHED)
        failed = sum(1 for h in wave if h.step in (HostStep.FAILED, HostStep.ROLLED_BACK))
        console.print(
            f"  {label:<8} {escape(progress_bar(done, len(wave)))} {done}/{len(wave)}"
            + (f" [red]{failed} failed[/]" if failed else "")
        )
        racks = [r for r, trays in v.racks.items() if {h.host for h in wave} & set(trays)]
        if racks:
            console.print("    " + _("racks: {racks} (one maintenance window each)").format(
                racks=lit(", ".join(racks))))
        for h in wave:
            why = f" ({lit(h.reason)})" if h.reason else ""
            runs = f" runs={h.action_runs}" if h.action_runs > 1 else ""
            console.print(f"    {lit(h.host):<24} {lit(h.step)}{runs}{why}")
    if v.skipped:
        console.print("  " + _("skipped: ") + str(len(v.skipped)))
        for k in v.skipped:
            console.print(f"    {lit(k['host']):<24} {lit(k['reason'])}")
    for note in v.notes:
        console.print("  [dim]" + _("note: {note}").format(note=escape(note)) + "[/]")
    if v.halt_reason:
        console.print("[bold red]" + _("halted:") + f"[/] {lit(v.halt_reason)}")


def _json(v: CampaignView) -> dict[str, object]:
    """The campaign as ``--json`` prints it: the API's ``CampaignOut`` (one schema)."""
    return CampaignOut.of(v).json_dict()


def _say(line: str) -> None:
    err_console.print(escape(line))


@boundary
def create_cmd(
    name: str = typer.Argument(..., help="Campaign name (unique)."),
    target_baseline: str = typer.Option(..., "--target-baseline", help="Baseline to reach."),
    selector: str = typer.Option(..., "--selector", help="Hosts (NAME-GLOB, pool:P, ...)."),
    playbook: str | None = typer.Option(None, "--playbook", help="Ansible playbook to run."),
    command: str | None = typer.Option(None, "--command", help="Shell command over SSH."),
    reimage: bool = typer.Option(False, "--reimage", help="Reimage through the BMC."),
    mig: bool = typer.Option(False, "--mig", help="Apply the target baseline's MIG layout "
                             "(nvidia-smi; the commands are shown)."),
    rollback_playbook: str | None = typer.Option(None, "--rollback-playbook"),
    canary: int = typer.Option(1, "--canary", help="Hosts in the canary wave."),
    waves: str = typer.Option("10%,25%,100%", "--waves", help="Cumulative shares or counts."),
    max_failures: int = typer.Option(1, "--max-failures", help="Failed hosts tolerated."),
    ticket: str = typer.Option(..., "--ticket", help="Change ticket / CI build carried by "
                               "every change."),
    require_approval: bool = typer.Option(False, "--require-approval",
                                          help="Stop after the canary until approved."),
    auto_rollback: bool = typer.Option(False, "--auto-rollback",
                                       help="Roll failed hosts back (needs --rollback-playbook)."),
    allocated: AllocatedPolicy = typer.Option(AllocatedPolicy.WAIT, "--allocated",
                                              help="Allocated hosts: wait (last wave) or skip."),
    max_rack_share: str = typer.Option("50%", "--max-rack-share",
                                       help="Most of one rack a wave may take."),
    pool_floor: str = typer.Option("50%", "--pool-floor",
                                   help="Share of a pool that stays in service during a wave."),
    change_kind: DeclaredChangeKind = typer.Option(DeclaredChangeKind.DRIVER_UPGRADE,
                                                   "--change-kind",
                                                   help="Kind of the recorded change."),
    forks: int = typer.Option(10, "--forks", "-f", help="Hosts acted on at once."),
    timeout: float = typer.Option(1800.0, "--timeout", help="Seconds for one wave's action."),
    advance_baseline: bool = typer.Option(
        False, "--advance-baseline",
        help="On completion, make the target baseline the baseline of the moved hosts' pools.",
    ),
    unit: CampaignUnit = typer.Option(
        CampaignUnit.HOST, "--unit",
        help="rack: waves of whole racks, each rack's trays one by one in one maintenance "
        "window of the rack, ending on the same versions.",
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show the plan, store nothing."),
    as_json: bool = typer.Option(False, "--json", help="Print the plan as JSON."),
) -> None:
    """Plan a change campaign and show the plan (nothing runs until 'campaign run')."""
    given = [x for x in (playbook, command) if x is not None] + (["reimage"] if reimage else [])
    given += ["mig"] if mig else []
    if len(given) != 1:
        raise ConfigError("give exactly one of --playbook, --command, --reimage or --mig")
    kind = (ActionKind.PLAYBOOK if playbook is not None
            else ActionKind.COMMAND if command is not None
            else ActionKind.MIG if mig else ActionKind.REIMAGE)
    if forks < 1 or timeout <= 0:
        raise ConfigError("--forks must be >= 1 and --timeout > 0")
    spec = CampaignSpec(
        name=name, target_baseline=target_baseline, selector=selector, action_kind=kind,
        action=playbook or command or given[0], ticket=ticket, rollback=rollback_playbook,
        canary=canary, waves=waves, max_failures=max_failures,
        require_approval=require_approval, auto_rollback=auto_rollback, allocated=allocated,
        max_rack_share=max_rack_share, pool_floor=pool_floor, change_kind=change_kind,
        forks=forks, timeout_s=timeout, advance_baseline=advance_baseline, unit=unit,
    )
    v = create_campaign(open_fleet(), spec, dry_run=dry_run)
    if as_json:
        print_json(_json(v) | {"dry_run": dry_run})
        return
    show_plan(v)
    if dry_run:
        console.print("[dim]" + _("dry run: nothing stored") + "[/]")


def show_finished(v: CampaignView, as_json: bool) -> None:
    """Print where ``campaign run``/``resume`` left the campaign (local and remote mode);
    exit 1 when it halted."""
    if as_json:
        print_json(_json(v))
    else:
        show_plan(v)
    if v.status == CampaignStatus.HALTED:
        raise typer.Exit(EXIT_HALTED)


@boundary
def run_cmd(
    name: str = typer.Argument(..., help="Campaign name."),
    advance_baseline: bool = typer.Option(
        False, "--advance-baseline",
        help="On completion, make the target baseline the baseline of the moved hosts' pools.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    no_drain: bool = typer.Option(
        False, "--no-drain",
        help="Act without draining first: Slurm jobs, Kubernetes pods (recorded).",
    ),
    drain_timeout: str | None = typer.Option(
        None, "--drain-timeout", help="Slurm: how long to wait for running jobs (default 30m)."
    ),
) -> None:
    """Run a campaign wave by wave (resumes one that was interrupted). Exit 0 when it
    completed, waits for approval or was paused; 1 when it halted. On completion, a pool of
    the moved hosts still on another baseline is advanced (--advance-baseline) or the
    command that would is printed. Where work runs in Slurm (GPUFLEET_SYNC_TARGETS has
    slurm) each host's node is drained and its jobs waited for before the action; a host
    whose jobs outlast --drain-timeout fails with the jobs that blocked. Where a Kubernetes
    cluster is configured each host's pods are evicted too (a host that cannot be drained
    fails, untouched)."""
    from gpufleet.domain.leases import parse_duration

    timeout = parse_duration(drain_timeout, "--drain-timeout") if drain_timeout else None
    show_finished(run_campaign(open_fleet(), name, None if as_json else _say,
                         advance_baseline=advance_baseline,
                         no_drain=no_drain if no_drain or timeout else None,
                         drain_timeout=timeout), as_json)


def drain_seconds(_api: object, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """``campaign run`` in remote mode, before the call: --drain-timeout as seconds (the
    route's ``drain_timeout_s``)."""
    from gpufleet.domain.leases import parse_duration

    given = kwargs["drain_timeout"]
    return {"drain_timeout": parse_duration(given, "--drain-timeout").total_seconds()
            if given else None}


def follow_run(api: Client, queued: Mapping[str, Any], kwargs: Mapping[str, Any]) -> Any:
    """``campaign run``/``resume`` in remote mode: the route queued the run as a worker job
    (``CampaignJobOut``); follow the campaign (``GET campaigns/{name}``) until the job left
    it: no longer ``running`` once it ran, or changed, or once no job of the runs queue is
    waiting or running (``GET jobs``). Its status changes are shown on stderr (not under
    --json); the campaign as it ended is returned."""
    import time
    import urllib.parse

    from gpufleet.cli.remote import POLL_S
    from gpufleet.errors import GpufleetError

    name, was, job = queued["campaign"], queued["status"], queued["job"]
    quiet = bool(kwargs.get("as_json"))
    if not quiet:
        _say(_("campaign {name}: queued on the server's workers (job {job})").format(
            name=name, job=job))
    path = "campaigns/" + urllib.parse.quote(name, safe="")
    ran, shown = False, None
    while True:
        time.sleep(POLL_S)
        v = api.get(path)
        status = v["status"]
        counts = ", ".join(f"{k} {n}" for k, n in sorted(v["counts"].items()))
        if not quiet and (status, counts) != shown:
            shown = (status, counts)
            _say(_("campaign {name}: {status} ({counts})").format(
                name=name, status=status, counts=counts))
        if status == CampaignStatus.RUNNING:
            ran = True
            continue
        if ran or status != was:
            return v
        if not any(q["queue"] == "runs" and q["jobs"] for q in api.get("jobs")):
            if status == CampaignStatus.PLANNED:  # a run never ends planned: it did not run
                raise GpufleetError(f"campaign {name}: job {job} ended without running it; "
                                    "see the server's log")
            return v


@boundary
def resume_cmd(
    name: str = typer.Argument(..., help="Campaign name."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Continue a paused, approved or interrupted campaign (finished hosts are not run again;
    an interrupted host is re-checked first)."""
    show_finished(run_campaign(open_fleet(), name, None if as_json else _say), as_json)


@boundary
def approve_cmd(
    name: str = typer.Argument(..., help="Campaign name."),
    as_json: bool = typer.Option(False, "--json", help="Print the campaign as JSON."),
) -> None:
    """Approve the waves after the canary (who approved is recorded: GPUFLEET_ACTOR)."""
    show_approved(approve_campaign(open_fleet(), name), as_json)


def show_approved(v: CampaignView, as_json: bool) -> None:
    """Print ``campaign approve`` (local and remote mode)."""
    if as_json:
        print_json(_json(v))
    else:
        console.print(_("campaign {name} approved by {who}; continue with 'gpufleet campaign "
                        "resume {name}'").format(name=lit(v.name), who=lit(v.approved_by)))


@boundary
def status_cmd(
    name: str = typer.Argument(..., help="Campaign name."),
    as_json: bool = typer.Option(False, "--json", help="Print the campaign as JSON."),
) -> None:
    """Where a campaign is: progress per wave, every host's step."""
    show_status(show_campaign(open_fleet(), name), as_json)


def show_status(v: CampaignView, as_json: bool) -> None:
    """Print ``campaign status`` (local and remote mode)."""
    print_json(_json(v)) if as_json else show_plan(v)


@boundary
def report_cmd(
    name: str = typer.Argument(..., help="Campaign name."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Outcome per host (done, failed with reason, rolled back, skipped and why), counts."""
    show_report(show_campaign(open_fleet(), name), as_json)


def show_report(v: CampaignView, as_json: bool) -> None:
    """Print ``campaign report`` (local and remote mode)."""
    if as_json:
        print_json(_json(v))
        return
    show_plan(v)
    counts = ", ".join(f"{k} {n}" for k, n in sorted(v.counts().items()))
    console.print(_("hosts: {counts}; skipped before the run: {n}").format(
        counts=lit(counts), n=len(v.skipped)))


@boundary
def pause_cmd(
    name: str = typer.Argument(..., help="Campaign name."),
    as_json: bool = typer.Option(False, "--json", help="Print the campaign as JSON."),
) -> None:
    """Pause after the wave in progress."""
    show_changed(pause_campaign(open_fleet(), name), as_json)


@boundary
def abort_cmd(
    name: str = typer.Argument(..., help="Campaign name."),
    as_json: bool = typer.Option(False, "--json", help="Print the campaign as JSON."),
) -> None:
    """Stop for good; hosts the campaign holds and has not acted on are released."""
    show_changed(abort_campaign(open_fleet(), name, None if as_json else _say), as_json)


def show_changed(v: CampaignView, as_json: bool) -> None:
    """Print ``campaign pause`` and ``abort`` (local and remote mode)."""
    if as_json:
        print_json(_json(v))
        return
    console.print(_("campaign {name}: {status}").format(name=lit(v.name), status=lit(v.status)))


@boundary
def list_cmd(
    as_json: bool = typer.Option(False, "--json", help="Print the campaigns as JSON."),
    wide: bool = typer.Option(False, "--wide", help=WIDE_HELP),
) -> None:
    """Every campaign, newest first."""
    show_campaigns(list_campaigns(open_fleet()), as_json)


def show_campaigns(vs: list[CampaignView], as_json: bool) -> None:
    """Print ``campaign list`` (local and remote mode)."""
    if as_json:
        print_json([_json(v) for v in vs])
        return
    from gpufleet.cli.tables import Col, show

    cols = [Col("campaign", ident=True), Col("status", ident=True), Col("ticket", 2, ident=True),
            Col("progress", 3, ident=True), Col("done", ident=True, justify="right"),
            Col("target baseline", 1, ident=True)]
    cells = []
    for v in vs:
        done = sum(1 for h in v.hosts if h.step in _FINISHED)
        cells.append([lit(v.name), lit(v.status), lit(v.ticket),
                      escape(progress_bar(done, len(v.hosts))), f"{done}/{len(v.hosts)}",
                      lit(v.target_baseline)])
    show(cols, cells, title=_("campaigns"), box=None)


app.command("create")(create_cmd)
app.command("run")(run_cmd)
app.command("resume")(resume_cmd)
app.command("approve")(approve_cmd)
app.command("status")(status_cmd)
app.command("report")(report_cmd)
app.command("pause")(pause_cmd)
app.command("abort")(abort_cmd)
app.command("list")(list_cmd)
