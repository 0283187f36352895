"""``gpufleet leases show``' output, and its lean start (issue 30 item 3, start-up).

Importing this module imports no Typer: :func:`lean_leases_show` prints the lease straight
from the entry point (:mod:`gpufleet.cli.entry`), and the command itself
(:func:`gpufleet.cli.alloc.leases_show_cmd`) and remote mode print through
:func:`show_lease` too: one read (the fast read layer's
:func:`gpufleet.service.core.fastread.lease`, which the service's
:func:`~gpufleet.service.allocation.leases.show_lease` reads through too), one presenter, two
start-ups.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from gpufleet.cli.common import (
    cell,
    lean_read,
    lean_shown,
    lit,
    local_time,
    print_json,
)
from gpufleet.i18n import _

if TYPE_CHECKING:
    from gpufleet.service.core.fastread import LeaseView
    from gpufleet.service.core.fleet import Fleet


def lease_table(rows: list[LeaseView], title: str) -> None:
    """The leases as one table (``leases list``, ``leases show``)."""
    from gpufleet.cli.tables import Col, show

    cols = [Col("id", ident=True), Col("owner", 2, ident=True), Col("state", ident=True),
            Col("hosts", words=True), Col("GPUs", 3, ident=True, justify="right"),
            Col("from", 4, words=True), Col("until", 1, words=True), Col("purpose", 5)]
    show(cols, [
        [
            str(v.id),
            lit(v.owner),
            _(v.state),
            lit(", ".join(v.hosts)),
            str(v.gpus),
            local_time(v.starts_at),
            local_time(v.ends_at),
            lit(v.purpose),
        ]
        for v in rows
    ], title=title)


def show_lease(v: LeaseView, as_json: bool) -> None:
    """Print one lease (``leases show``)."""
    if as_json:
        print_json(v.as_dict())
        return
    from gpufleet.cli.common import console  # Rich: not for --json

    lease_table([v], _("lease {id}").format(id=v.id))
    console.print(_("asked by {actor} at {at}; request {request}").format(
        actor=lit(v.actor), at=local_time(v.created_at), request=cell(v.request)))
    users = ", ".join(v.users) if v.users else _("none recorded (reclaim: any UID >= 1000)")
    console.print(_("lessee users: {users}").format(users=lit(users)))
    for host, uuids in v.gpu_uuids.items():
        console.print(f"  {lit(host)}: {lit(', '.join(uuids))}")
    if v.reason:
        console.print("  " + _("why: {reason}").format(reason=lit(v.reason)))


def lean_leases_show(lease_id: str, *, as_json: bool) -> int | None:
    """Print ``gpufleet leases show ID [--json]`` and return its exit code (0), or None
    when the command must run instead (:func:`~gpufleet.cli.common.lean_read`; an ID that
    is not a number is the command's to refuse)."""
    if not lease_id.isdigit():
        return None
    from gpufleet.cli.entry import fast_read
    from gpufleet.service.core.fastread import lease

    done = fast_read(lambda read: lease(read, int(lease_id)), lambda v: show_lease(v, as_json))
    if done is not None:
        return done
    from gpufleet.service.allocation.leases import show_lease as read_lease

    def read(fleet: Fleet) -> Callable[[], int]:
        v = read_lease(fleet, int(lease_id))
        return lean_shown(lambda x: show_lease(x, as_json), v)

    return lean_read(read)
