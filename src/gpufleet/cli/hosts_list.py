"""``gpufleet hosts list``'s output, and its lean start (issue 8, start-up).

Importing this module imports no Typer: :func:`lean_hosts_list` prints the list straight from
the entry point (:mod:`gpufleet.cli.entry`) before Typer is imported; the command itself
(:func:`gpufleet.cli.hosts.list_cmd`) and the remote mode print through
:func:`print_host_list` / :func:`render_host_list` too, so the output is one code path.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from gpufleet.cli.common import lean_read, lean_shown, lit, print_json
from gpufleet.i18n import N_, _, ngettext, state_name

if TYPE_CHECKING:
    from gpufleet.api.schemas import HostOut
    from gpufleet.service.core.fastread import HostView
    from gpufleet.service.core.fleet import Fleet

#: Profile names shortened for narrow tables (``--json`` keeps the full names).
PROFILE_SHORT = {"training-multinode": "M", "training-single": "S", "inference": "I", "test": "T"}


def _profile_order(name: str) -> tuple[int, str]:
    order = list(PROFILE_SHORT)
    return (order.index(name) if name in order else len(order), name)


#: What ``hosts list`` says under the empty table of a fleet with no hosts (exit 0).
EMPTY_FLEET = N_(
    "no hosts yet: enroll them from an inventory with 'gpufleet enroll -i INVENTORY', "
    "or try a simulated fleet: 'gpufleet lab create' (it prints the enroll command)"
)

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
    """The hosts as plain data: the API's ``HostOut`` list (:func:`host_json`)."""
    return [host_json(r) for r in rows]


def host_json(v: HostView) -> dict[str, Any]:
    """``HostOut.of(v).json_dict()`` (the API's host, in its field order), made without
    pydantic: importing the API's schemas costs ``hosts list --json`` ~100 ms of start-up
    (issue 30 item 3). A test keeps the two equal, key by key."""
    return {
        "name": v.name,
        "address": v.address,
        "state": str(v.state),
        "health": str(v.health),
        "fault": None if v.fault is None else str(v.fault),
        "pool": v.pool,
        "groups": list(v.groups),
        "gpu_count": v.gpu_count,
        "gpu_model": v.gpu_model,
        "driver": v.driver,
        "cuda": v.cuda,
        "profiles": list(v.profiles),
        "last_collected_at": _iso(v.last_collected_at),
        "last_outcome": None if v.last_outcome is None else str(v.last_outcome),
        "last_reason": v.last_reason,
        "status_reason": v.status_reason,
        "eta": _iso(v.eta),
    }


def _iso(dt: datetime | None) -> str | None:
    """A time as the API's ``Time`` writes it (ISO 8601 with the zone; naive is UTC)."""
    if dt is None:
        return None
    from gpufleet.domain.times import as_utc

    return as_utc(dt).isoformat()


def print_host_list(rows: Sequence[HostView], *, as_json: bool) -> None:
    """The hosts of ``rows``: JSON (:func:`host_list_json`), else :func:`render_host_list`."""
    if as_json:
        print_json(host_list_json(rows))
        return
    render_host_list(rows)


def render_host_list(rows: Sequence[HostView | HostOut]) -> None:
    """The ``hosts list`` table (rows from the service, or from the API in remote mode)."""
    from rich import box

    from gpufleet.cli.tables import Col, show

    cols = [
        Col("host", ident=True),
        Col("state", words=True),  # the state, and its fault under it
        Col("pool", 2, ident=True),
        Col("GPUs", 1, words=True),
        Col("driver", 4, ident=True),
        Col("prof.", 5, ident=True),
        Col("collect", 3, ident=True),
    ]
    cells = []
    for r in rows:
        gpus = (
            f"{r.gpu_count}x {lit((r.gpu_model or '?').removeprefix('NVIDIA '))}"
            if r.gpu_count
            else ("-" if r.gpu_model is None else "0")
        )
        st = f"[{STATE_STYLE.get(r.state, 'white')}]{state_name(r.state)}[/]"
        if r.fault:
            st += f"\n[dim]{lit(r.fault)}[/]"
        cells.append(
            [
                lit(r.name),
                st,
                lit(r.pool or ""),
                gpus,
                lit(r.driver or ""),
                ",".join(PROFILE_SHORT.get(p, p) for p in sorted(r.profiles, key=_profile_order)),
                _(r.last_outcome) if r.last_outcome else _("never"),
            ]
        )
    show(
        cols,
        cells,
        title=ngettext("{n} host", "{n} hosts", len(rows)).format(n=len(rows)),
        box=box.SIMPLE_HEAD,
        caption=_("profiles: ") + ", ".join(f"{v}={k}" for k, v in PROFILE_SHORT.items()),
    )
    from gpufleet.cli.common import console

    if not rows:  # a selector matching nothing is refused (exit 4): this is an empty fleet
        console.print(_(EMPTY_FLEET), markup=False, highlight=False)


def lean_hosts_list(selector: str | None, *, as_json: bool) -> int | None:
    """Print ``gpufleet hosts list [SELECTOR] [--json]`` and return its exit code (0), or
    None when the command must run instead: read by the fast read layer
    (:func:`gpufleet.service.core.fastread.host_list`, :func:`~gpufleet.cli.entry.fast_read`),
    else through the service (:func:`~gpufleet.cli.common.lean_read`)."""
    from gpufleet.cli.entry import fast_read
    from gpufleet.service.core.fastread import host_list

    done = fast_read(
        lambda read: host_list(read, selector),
        lambda rows: print_host_list(rows, as_json=as_json),
    )
    if done is not None:
        return done
    from gpufleet.service.views.hosts import list_hosts  # what the fast read declined

    def read(fleet: Fleet) -> Callable[[], int]:
        rows = list_hosts(fleet, selector)
        if as_json:
            data = host_list_json(rows)
            return lean_shown(print_json, data)
        return lean_shown(render_host_list, rows)

    return lean_read(read)
