"""``gpufleet summary``'s output, and its lean start (issue 8, start-up).

Importing this module imports no Typer: :func:`lean_summary` prints the summary straight from
the entry point (:mod:`gpufleet.cli.entry`) before Typer is imported; the command itself
(:func:`gpufleet.cli.summary.summary_cmd`), the remote mode and the lab print through
:func:`summary_json` / :func:`render_summary` too, so the output is one code path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from gpufleet.cli.common import lean_read, lean_shown, lit, print_json
from gpufleet.i18n import N_, _, joined, language, reason_text, state_name

if TYPE_CHECKING:
    from gpufleet.service.core.fleet import Fleet
    from gpufleet.service.views.summary import FleetSummary

STATE_ORDER = [
    "available",
    "allocated",
    "validating",
    "enrolled",
    "reclaiming",
    "maintenance",
    "quarantined",
    "retired",
]


def print_summary(sm: FleetSummary, as_json: bool) -> None:
    """The summary, as JSON (:func:`summary_json`) or the tables (:func:`render_summary`)."""
    if as_json:
        print_json(summary_json(sm))
    else:
        render_summary(sm)


def summary_json(sm: FleetSummary) -> dict[str, object]:
    """The summary as plain data: the API's ``SummaryOut`` (``GET /api/v1/summary``)."""
    from gpufleet.api.schemas_summary import SummaryOut

    return SummaryOut.of(sm).json_dict()


def counts_line(sm: FleetSummary) -> str:
    """The summary's first line (:meth:`FleetSummary.counts_line`) in the language of the
    messages (:mod:`gpufleet.i18n`); the API and ``--json`` keep the English one."""
    if language() == "en":
        return sm.counts_line()
    if sm.noun != "accelerators":
        return _("{hosts} hosts, {total} {noun}, {available} {noun} available").format(
            hosts=sm.hosts, total=sm.gpus_total, available=sm.gpus_available, noun=_(sm.noun)
        )
    from gpufleet.service.hosts.accelerator_counts import vendor_parts

    parts = joined(f"{n} {brand} {_(kind)}" for brand, kind, n in vendor_parts(sm.per_vendor))
    return _("{hosts} hosts, {total} accelerators ({parts}), {available} available").format(
        hosts=sm.hosts, total=sm.gpus_total, parts=parts, available=sm.gpus_available
    )


def render_summary(sm: FleetSummary) -> None:
    """Rich rendering of a fleet summary."""
    from gpufleet.cli.common import console
    from gpufleet.cli.tables import Col, num, show

    console.rule(_("fleet summary"))
    console.print(f"[bold]{lit(counts_line(sm))}[/]")
    if sm.nodes_by_role:  # cpu/storage nodes: counted apart, never GPU capacity
        console.print(_("not GPU nodes: ") + ", ".join(
            _("{hosts} {role} ({available} available)").format(
                hosts=c["hosts"], role=role, available=c["available"])
            for role, c in sm.nodes_by_role.items()
        ))
    show([Col("state", ident=True), Col("hosts", ident=True, justify="right")], [
        [state_name(s), str(sm.per_state[s])] for s in STATE_ORDER if sm.per_state.get(s)
    ], title=_("hosts per state"))
    if sm.accelerators:
        show([Col("vendor", ident=True), Col("model", words=True), num("hosts", 2),
              num("total", 1), num("available")], [
            [
                lit(str(r["vendor"])),
                lit(str(r["model"]).removeprefix("NVIDIA ")),
                str(r["hosts"]),
                str(r["accelerators"]),
                str(r["available"]),
            ]
            for r in sm.accelerators
        ], title=_("accelerators per vendor and model"))
    if sm.gpus_per_profile_model:
        profiles = list(sm.gpus_per_profile_model)
        models = sorted({m for per in sm.gpus_per_profile_model.values() for m in per})
        # The model is an identifier: it keeps one line; the profile headers wrap instead
        # ("training-multinode" -> two header lines), and the last profiles hide first.
        cols = [Col(N_("GPU model") if sm.gpus_only else N_("model"), ident=True)] + [
            Col(p.replace("-", "-\n", 1) if len(p) > 10 else p, i + 1, ident=True,
                justify="right")
            for i, p in enumerate(profiles)
        ]
        cells = [
            [lit(m.removeprefix("NVIDIA ")),
             *[str(sm.gpus_per_profile_model[p].get(m, 0)) for p in profiles]]
            for m in models
        ]
        hosts = _("hosts")
        cells.append(
            [f"[dim]{hosts}[/]", *[f"[dim]{sm.hosts_per_profile.get(p, 0)}[/]" for p in profiles]]
        )
        show(cols, cells, title=_("available {noun} per profile and model").format(noun=_(sm.noun)))
    _host_table(_("open alarms"), sm.alarms, N_("alarm"), N_("message"), style="red")
    _host_table(_("quarantined"), sm.quarantined, N_("fault"), N_("reason"), style="red")
    if sm.back:
        console.print(
            "[bold]" + _("expected back:") + "[/] "
            + "; ".join(_("{host} ({state}) by {eta}").format(
                host=lit(b["host"] or ""), state=state_name(b["state"] or ""),
                eta=lit(b["eta"] or ""),
            )
            for b in sm.back)
        )
    _host_table(_("held in validating"), sm.validating, None, N_("why"))
    _host_table(
        _("available, with warnings"), sm.warnings, None, N_("warning"), style="yellow"
    )
    if sm.drift.summary:
        drift = []
        for item in sm.drift.summary:
            names = ", ".join(item.hosts[:6]) + (" ..." if len(item.hosts) > 6 else "")
            drift.append(
                [item.field, lit(item.actual), lit(item.expected),
                 f"{len(item.hosts)}: {lit(names)}"]
            )
        show([Col("field", ident=True), Col("found", words=True), Col("baseline", words=True),
              Col("hosts", 1, words=True)], drift, title=_("drift from pool baselines"))
    _host_table(_("last collection failed"), sm.unreachable, N_("outcome"), N_("reason"))


def _host_table(
    title: str,
    rows: list[dict[str, str | None]],
    fault_col: str | None,
    reason_col: str,
    *,
    style: str | None = None,
) -> None:
    """One row per host: optional fault/outcome column, then the reason (printed if any)."""
    if not rows:
        return
    from gpufleet.cli.tables import Col, show

    cols = [Col("host", ident=True)]
    if fault_col:
        cols.append(Col(fault_col, words=True))
    cols.append(Col(reason_col, floor=16))
    table = []
    for row in rows:
        cells = [lit(row["host"] or "")]
        if fault_col:
            value = row["fault"] or ""  # a fault is an id; an outcome is words, translated
            fault = lit(_(value) if value and fault_col == "outcome" else value)
            cells.append(f"[red]{fault}[/]" if style == "red" else fault)
        reason = lit(reason_text(row["reason"]))
        cells.append(f"[{style}]{reason}[/]" if style and not fault_col else reason)
        table.append(cells)
    show(cols, table, title=title)


def lean_summary(selector: str | None, *, as_json: bool) -> int | None:
    """Print ``gpufleet summary [SELECTOR] [--json]`` and return its exit code (0), or None
    when the command must run instead (:func:`~gpufleet.cli.common.lean_read`)."""
    from gpufleet.service.views.summary import fleet_summary

    def read(fleet: Fleet) -> Callable[[], int]:
        sm = fleet_summary(fleet, selector)
        if as_json:
            data = summary_json(sm)
            return lean_shown(print_json, data)
        return lean_shown(render_summary, sm)

    return lean_read(read)
