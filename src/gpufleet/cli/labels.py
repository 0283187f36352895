"""``gpufleet labels``' output, and its lean start (issue 8, start-up).

Importing this module imports neither Typer nor Rich: :func:`lean_labels` prints the labels of
one host named plainly straight from the entry point (:mod:`gpufleet.cli.entry`), before
Typer is imported; the command itself (:func:`gpufleet.cli.summary.labels_cmd`) and the remote
mode print through :func:`print_labels` / :func:`render_labels` too, so the output is one
code path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gpufleet.cli.common import current_settings, lit, print_json

if TYPE_CHECKING:
    from gpufleet.service.labels import HostLabels


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
    from rich.table import Table

    from gpufleet.cli.common import console

    for r in rows:
        t = Table(title=lit(r.host), show_header=False)
        t.add_column("key", no_wrap=True)
        t.add_column("value", overflow="fold")
        for k, v in sorted(r.labels.items()):
            t.add_row(lit(k), lit(v))
        for taint in r.taints:
            t.add_row("[red]taint[/]", lit(taint))
        console.print(t)


def lean_labels(selector: str, *, as_json: bool) -> bool:
    """Print ``gpufleet labels SELECTOR [--json]`` when SELECTOR is one plain host name the
    lean read answers (:func:`gpufleet.service.labels.lean_host_labels`), and return True.

    Only the plain successful read is answered here; False (nothing printed, nothing kept)
    whenever the ordinary command must run, which then reports what there is to report in
    its one way: invalid settings, unknown ``GPUFLEET_*`` variables (its warnings), remote
    mode (``GPUFLEET_URL``), a selector or a database the lean read does not answer, or any
    failure while reading.
    """
    from gpufleet.config import unknown_variables
    from gpufleet.service.labels import lean_host_labels

    try:
        if unknown_variables():
            return False
        settings = current_settings()
        if settings.url is not None:
            return False
        rows = lean_host_labels(settings.db_url(), selector)
    except Exception:  # reported by the ordinary command, through the error boundary
        return False
    if rows is None:
        return False
    print_labels(rows, as_json=as_json)
    return True
