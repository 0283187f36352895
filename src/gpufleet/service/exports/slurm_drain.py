"""``maintenance on`` where work runs in Slurm (issue 26): the selected hosts' nodes drained
and their jobs waited for (:mod:`gpufleet.service.hosts.slurm_drain`), then maintenance for
those whose drain is done."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timedelta

from gpufleet.collect.slurm import SlurmClient
from gpufleet.errors import Conflict
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.operations import HostOutcome, each_change, each_name, maintenance_on
from gpufleet.service.hosts.slurm_drain import DrainReport, drain_and_wait


def maintenance_drained(
    fleet: Fleet,
    selector: str,
    reason: str,
    until: datetime | None = None,
    eta: datetime | None = None,
    *,
    confirm_all: bool = False,
    no_drain: bool = False,
    timeout: timedelta = timedelta(minutes=30),
    client: SlurmClient | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[list[HostOutcome], DrainReport]:
    """``maintenance on`` where work runs in Slurm: drain the selected hosts' nodes and wait
    for their jobs (:func:`drain_and_wait`), then put in maintenance those whose drain is
    done; a host whose jobs did not end in time (or whose drain failed) is refused with what
    blocked (Conflict, exit 6) and left as it was. The drain (or ``--no-drain``) is recorded
    on the maintenance event."""
    names = [o.host for o in each_change(fleet, selector, lambda n: n, verb="maintenance on",
                                         reason=reason, confirm_all=confirm_all)]
    report = drain_and_wait(fleet, names, reason, client=client, timeout=timeout,
                            no_drain=no_drain, sleep=sleep)
    drains = report.by_host()
    out: list[HostOutcome] = []
    for name in names:
        d = drains[name]
        if not d.ok:
            out.append(HostOutcome(name, error=Conflict(f"host {name}: not drained, "
                                                        f"maintenance not started: "
                                                        f"{d.describe()}")))
            continue
        record = d.as_json() | {"no_drain": no_drain}
        out += each_name([name], lambda n, r=record: maintenance_on(  # type: ignore[misc]
            fleet, n, reason, until, eta, drain=r, no_drain=no_drain))
    return out, report
