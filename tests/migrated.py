"""What a finished campaign leaves behind, for tests where a campaign cannot run on the lab
(issue 26): the hosts run a new driver (the lab's ``driver-drift:<version>`` fault, set when
the lab is made) and follow the campaign's target baseline through their own
``gpufleet_baseline`` variable (what ``campaign_run.Runner.action_done`` writes)."""

from __future__ import annotations

from collections.abc import Iterable

from gpufleet.domain.spec import BaselineStatus
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.baselines import baseline_from_host, save_baseline
from gpufleet.store.repo import host_by_name


def migrate(fleet: Fleet, hosts: Iterable[str], target: str, *, reference: str) -> None:
    """A validated baseline ``target`` copied from ``reference``'s collected facts, and every
    host of ``hosts`` pointed at it as a campaign's ``action-done`` step does."""
    b = baseline_from_host(fleet, reference, target, purpose="campaign target")
    save_baseline(fleet, b.model_copy(update={"status": BaselineStatus.VALIDATED}), replace=True)
    with fleet.db.session() as s:
        for name in hosts:
            h = host_by_name(s, name, for_update=True)
            h.vars = {**h.vars, "gpufleet_baseline": target}
