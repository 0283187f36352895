"""``gpufleet labels``' output, and its lean start (issue 8, start-up).

Importing this module imports neither Typer nor Rich: :func:`lean_labels` prints the labels
straight from the entry point (:mod:`gpufleet.cli.entry`), before Typer is imported; the
command itself (:func:`gpufleet.cli.summary.labels_cmd`) and the remote mode print through
:func:`print_labels` / :func:`render_labels` too, so the output is one code path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gpufleet.cli.common import current_settings, lit, print_json
from gpufleet.cli.entry import imports_done

if TYPE_CHECKING:
    from gpufleet.service.hosts.labels import HostLabels


def print_labels(rows: Sequence[HostLabels], *, as_json: bool) -> None:
    """The labels of ``rows``: JSON (the API's ``LabelsOut`` list), else one table per host."""
    if as_json:
        print_json(
            [
                {
                    "host": r.host,
                    "labels": r.labels,
                    "taints": [
                        {"key": t.key, "value": t.value, "effect": t.effect} for t in r.taints
                    ],
                }
                for r in rows
            ]
        )
        return
    render_labels(rows)


def render_labels(rows: Sequence[Any]) -> None:
    """One table per host: its labels, then its taints (``rows``: :class:`HostLabels`, or
    the same fields rebuilt from the API in remote mode)."""
    from gpufleet.cli.tables import Col, show

    for r in rows:
        cells = [[lit(k), lit(v)] for k, v in sorted(r.labels.items())]
        cells += [["[red]taint[/]", lit(taint)] for taint in r.taints]
        show([Col("key", ident=True), Col("value", ident=True)], cells, title=lit(r.host),
             show_header=False)


def lean_labels(selector: str | None, *, as_json: bool) -> int | None:
    """Print ``gpufleet labels [SELECTOR] [--json]`` as the command does and return its exit
    code (0): one host named plainly is read lean
    (:func:`gpufleet.service.hosts.labels.lean_host_labels`: no SQLAlchemy; the settings read
    by :func:`gpufleet.config_lean.lean_store`: no pydantic), any other selector through the
    service (:func:`gpufleet.service.views.summary.host_labels`).

    Only the plain successful read is answered here; None (nothing printed, nothing kept)
    whenever the ordinary command must run, which then reports what there is to report in
    its one way: invalid settings, unknown ``GPUFLEET_*`` variables (its warnings), remote
    mode (``GPUFLEET_URL``), a selector that matches nothing, or any failure while reading.
    """
    from gpufleet.cli.common import OPTIONS
    from gpufleet.config_lean import lean_store
    from gpufleet.service.hosts.labels import lean_host_labels

    try:
        store = lean_store(OPTIONS.home, OPTIONS.db_url)  # no pydantic (issue 30 item 3)
        rows = None if store is None else lean_host_labels(store.db_url(), selector)
        if rows is None:
            from gpufleet.cli.common import close_fleets, open_fleet
            from gpufleet.config import unknown_variables

            if unknown_variables() or current_settings().url is not None:
                return None
            from gpufleet.service.views.summary import host_labels

            imports_done()
            try:
                rows = host_labels(open_fleet(), selector)
            finally:
                close_fleets()
    except Exception:  # reported by the ordinary command, through the error boundary
        return None
    print_labels(rows, as_json=as_json)
    return 0
