"""``gpufleet db status`` and ``gpufleet db upgrade``: the schema, explicitly."""

from __future__ import annotations

from dataclasses import asdict

import typer

from gpufleet.cli.common import boundary, console, current_settings, lit, open_fleet, print_json
from gpufleet.i18n import _
from gpufleet.service.core.prune import prune
from gpufleet.service.core.schema import schema_status, upgrade

app = typer.Typer(no_args_is_help=True)

JSON = typer.Option(False, "--json", help="Print JSON.")


@app.command("status")
@boundary
def status_cmd(as_json: bool = JSON) -> None:
    """Show the database's schema revision against this gpufleet's, and the job queue's
    schema (PostgreSQL); exit 1 unless both are current."""
    st = schema_status(current_settings())
    if as_json:
        print_json(asdict(st))
    else:
        console.print(
            f"{lit(st.url)} ({st.dialect}): revision {st.revision or 'none'}, "
            f"this gpufleet {st.head}: {st.state}"
        )
        if st.state != "current" or st.queue == "missing":
            console.print(lit(st.message), soft_wrap=True)
        console.print(_("job queue: ") + st.queue)
    if st.state != "current" or st.queue == "missing":
        raise typer.Exit(1)


@app.command("upgrade")
@boundary
def upgrade_cmd(as_json: bool = JSON) -> None:
    """Migrate the database to this gpufleet's schema (run once, before servers/workers)."""
    before, after = upgrade(current_settings())
    if as_json:
        print_json(
            {
                "before": before.revision,
                "after": after.revision,
                "url": after.url,
                "queue": after.queue,
            }
        )
    elif before.revision == after.revision and before.queue == after.queue:
        console.print(_("{url}: schema {revision} is already current").format(
            url=lit(after.url), revision=after.revision))
    else:
        console.print(
            f"{lit(after.url)}: schema {before.revision or 'none'} -> {after.revision}, "
            f"job queue {after.queue}"
        )


@boundary
def prune_cmd(
    keep_days: float = typer.Option(..., "--keep-days", help="Keep snapshots newer than N days."),
    keep_last: int = typer.Option(..., "--keep-last", help="Keep each host's K newest."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Count only; remove nothing."),
    as_json: bool = JSON,
) -> None:
    """Remove old fact snapshots; never a host's latest, nor one a validation or a detected
    change points at."""
    rep = prune(open_fleet(), keep_days=keep_days, keep_last=keep_last, dry_run=dry_run)
    if as_json:
        print_json(asdict(rep))
    else:
        line = (_("would remove {removed} snapshot(s); {kept} kept") if rep.dry_run
                else _("removed {removed} snapshot(s); {kept} kept"))
        console.print(line.format(removed=rep.removed, kept=rep.kept))
