"""``gpufleet hosts list``'s output, and its lean start (issue 8, start-up).

Importing this module imports no Typer: :func:`lean_hosts_list` prints the list straight from
the entry point (:mod:`gpufleet.cli.entry`) before Typer is imported; the command itself
(:func:`gpufleet.cli.hosts.list_cmd`) and the remote mode print through
:func:`print_host_list` / :func:`render_host_list` too, so the output is one code path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gpufleet.cli.common import current_settings, lit, print_json
from gpufleet.cli.entry import imports_done

if TYPE_CHECKING:
    from gpufleet.api.schemas import HostOut
    from gpufleet.service.hosts import HostView

#: Profile names shortened for narrow tables (``--json`` keeps the full names).
PROFILE_SHORT = {"training-multinode": "M", "training-single": "S", "inference": "I", "test": "T"}


def _profile_order(name: str) -> tuple[int, str]:
    order = list(PROFILE_SHORT)
    return (order.index(name) if name in order else len(order), name)


STATE_STYLE = {
    "available": "green",
    "allocated": "cyan",
    "validating": "yellow",
    "enrolled": "white",
    "quarantined": "bold red",
    "maintenance": "magenta",
    "reclaiming": "yellow",
    "retired": "dim",
}


def host_list_json(rows: Sequence[HostView]) -> list[dict[str, Any]]:
    """The hosts as plain data: the API's ``HostOut`` list."""
    from gpufleet.api.schemas import HostOut

    return [HostOut.of(r).json_dict() for r in rows]


def print_host_list(rows: Sequence[HostView], *, as_json: bool) -> None:
    """The hosts of ``rows``: JSON (:func:`host_list_json`), else :func:`render_host_list`."""
    if as_json:
        print_json(host_list_json(rows))
        return
    render_host_list(rows)


def render_host_list(rows: Sequence[HostView | HostOut]) -> None:
    """The ``hosts list`` table (rows from the service, or from the API in remote mode)."""
    from rich import box
    from rich.table import Table

    from gpufleet.cli.common import console

    t = Table(
        title=f"{len(rows)} hosts",
        box=box.SIMPLE_HEAD,
        caption="profiles: " + ", ".join(f"{v}={k}" for k, v in PROFILE_SHORT.items()),
    )
    for col in ("host", "state", "pool", "GPUs", "driver", "prof.", "collect"):
        t.add_column(col, no_wrap=col in ("host", "state", "driver", "prof."), overflow="fold")
    for r in rows:
        gpus = (
            f"{r.gpu_count}x {lit((r.gpu_model or '?').removeprefix('NVIDIA '))}"
            if r.gpu_count
            else ("-" if r.gpu_model is None else "0")
        )
        st = f"[{STATE_STYLE.get(r.state, 'white')}]{r.state}[/]"
        if r.fault:
            st += f"\n[dim]{lit(r.fault)}[/]"
        t.add_row(
            lit(r.name),
            st,
            lit(r.pool or ""),
            gpus,
            lit(r.driver or ""),
            ",".join(PROFILE_SHORT.get(p, p) for p in sorted(r.profiles, key=_profile_order)),
            r.last_outcome or "never",
        )
    console.print(t)


def lean_hosts_list(selector: str | None, *, as_json: bool) -> int | None:
    """Print ``gpufleet hosts list [SELECTOR] [--json]`` and return its exit code (0), or
    return None (nothing printed) whenever the command must run instead and report in its
    one way: invalid settings, unknown ``GPUFLEET_*`` variables (its warnings), remote mode
    (``GPUFLEET_URL``), a selector that matches nothing, any failure while reading."""
    from gpufleet.cli.common import close_fleets, open_fleet
    from gpufleet.config import unknown_variables
    from gpufleet.service.hosts import list_hosts

    imports_done()
    try:
        try:
            if unknown_variables() or current_settings().url is not None:
                return None
            rows = list_hosts(open_fleet(), selector)
            data = host_list_json(rows) if as_json else None
        except Exception:  # reported by the command, through the error boundary
            return None
        if data is not None:
            print_json(data)
        else:
            render_host_list(rows)
        return 0
    finally:
        close_fleets()
