"""``gpufleet preflight``: judge this node on its own (Slurm prolog, Kubernetes init container)."""

from __future__ import annotations

import json

import typer

from gpufleet.cli.common import boundary, console, current_settings, err_console, lit
from gpufleet.domain.preflight import Verdict
from gpufleet.errors import GpufleetError
from gpufleet.i18n import _
from gpufleet.service.hosts.preflight import post_configured, run_preflight

_COLOURS = {
    Verdict.PASS: "green",
    Verdict.WARNING: "yellow",
    Verdict.CRITICAL: "red",
    Verdict.UNKNOWN: "red",
}


@boundary
def preflight_cmd(
    profile: str | None = typer.Option(
        None, "--profile", help="The profile this node must pass (default: any profile)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the verdict as JSON."),
    post: bool = typer.Option(
        False, "--post", help="Also record the verdict in the store, when one is configured."
    ),
    dcgm: bool = typer.Option(
        False, "--dcgm", help="Also run DCGM level 1 (dcgmi diag -r 1); never under MIG."
    ),
) -> None:
    """Collect this node (no database, no SSH), run the profiles' checks and print one verdict:
    PASS or WARNING exit 0, CRITICAL exit 1, UNKNOWN exit 2 (fail closed). Never calls
    scontrol: a prolog that exits non-zero already drains the node."""
    settings = current_settings()
    report = run_preflight(settings, profile=profile, dcgm=dcgm)
    if as_json:
        console.print_json(json.dumps(report.model_dump(mode="json")))
    else:
        colour = _COLOURS[report.verdict]
        console.print(
            f"[{colour}]{report.verdict.value}[/] {lit(report.host)}: {lit(report.reason)}"
        )
        console.print(_("recommended: ") + ", ".join(a.value for a in report.actions))
        for f in report.findings:
            tag = " (advisory)" if f.advisory else ""
            console.print(
                f"  {lit(f.check)} {f.status.value}{tag}: {lit(f.message)} -> {f.action.value}"
            )
    if post:
        try:
            if not post_configured(settings, report):
                err_console.print(_("warning: --post: no store configured; verdict not posted"))
        except GpufleetError as exc:  # the verdict, not the post, decides the exit status
            err_console.print(_("warning: --post: verdict not posted: ") + lit(str(exc)))
    if report.exit_code:
        raise typer.Exit(report.exit_code)
