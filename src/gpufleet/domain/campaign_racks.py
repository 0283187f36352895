"""Campaign plans whose unit is the rack (issue 27 item 7, ``campaign create --unit rack``).

Pure. An NVL72 rack is one NVLink domain: its trays must run the same driver and firmware,
so a change goes rack by rack, every tray of a rack inside one maintenance window of the
whole rack, acted on tray by tray (the service,
:mod:`gpufleet.service.campaigns.campaign_racks`).

The plan (:func:`plan_racks`) is the host plan of :func:`gpufleet.domain.campaign.plan_campaign`
made over racks: the canary is ``canary`` racks, ``--waves`` are shares (or counts) of the
racks, ``--pool-floor`` counts racks of a pool; ``--max-rack-share`` does not apply (a rack is
taken whole). A tray is left out for the same reasons as a host (quarantined, in maintenance
by someone else, held ...): the rest of its rack still goes. A rack with an allocated tray
waits in the last wave (``--allocated wait``: at its window, a tray still allocated defers the
whole rack) or is left out whole (``--allocated skip``). A host that is in no rack (no chassis
serial in its facts) is left out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from gpufleet.domain.campaign import (
    AllocatedPolicy,
    Candidate,
    Limits,
    Plan,
    Skip,
    WaveSize,
    plan_campaign,
    skip_reason,
)
from gpufleet.domain.states import HostState


def plan_racks(
    candidates: Sequence[Candidate],
    racks: Mapping[str, Sequence[str]],
    *,
    canary: int,
    waves: Sequence[WaveSize],
    policy: AllocatedPolicy = AllocatedPolicy.WAIT,
    limits: Limits = Limits(),
    marker: str = "",
) -> Plan:
    """The plan of ``candidates`` whose racks (rack id -> trays in slot order) are
    ``racks``; waves hold trays, a rack's trays together in slot order (module docstring)."""
    by_name = {c.name: c for c in candidates}
    rack_of = {t: r for r, trays in racks.items() for t in trays}
    skipped: list[Skip] = []
    ready: dict[str, list[str]] = {}
    allocated: dict[str, list[str]] = {}
    for c in sorted(candidates, key=lambda c: c.name):
        if c.name not in rack_of:
            skipped.append(Skip(c.name, "in no rack (no chassis serial in its facts): "
                                "--unit rack changes whole racks only"))
            continue
        why = skip_reason(c, policy, marker or "\0")
        if why is not None:
            skipped.append(Skip(c.name, why))
        elif c.state is HostState.ALLOCATED:
            allocated.setdefault(rack_of[c.name], []).append(c.name)
        else:
            ready.setdefault(rack_of[c.name], []).append(c.name)
    if policy is AllocatedPolicy.SKIP:  # a rack with a leased tray cannot open its window
        busy = {rack_of[c.name]: c.name for c in candidates
                if c.name in rack_of and c.state is HostState.ALLOCATED}
        for rack, tray in sorted(busy.items()):
            skipped += [Skip(t, f"rack {rack}: tray {tray} allocated: the rack is skipped by "
                             "policy") for t in ready.pop(rack, [])]
    units: list[Candidate] = []
    for rack in sorted(set(ready) | set(allocated)):
        pools = Counter(by_name[t].pool for t in racks[rack] if t in by_name)
        units.append(Candidate(
            rack, HostState.ALLOCATED if rack in allocated else HostState.AVAILABLE, rack,
            pools.most_common(1)[0][0] if pools else None,
        ))
    plan = plan_campaign(units, canary=canary, waves=waves, policy=policy,
                         limits=Limits(1.0, limits.pool_floor), marker=marker)
    taken = {n for ns in list(ready.values()) + list(allocated.values()) for n in ns}
    out = Plan(skipped=skipped, notes=[n.replace("host(s)", "rack(s)") for n in plan.notes])
    for wave in plan.waves:
        out.waves.append([t for rack in wave for t in racks[rack] if t in taken])
    for rack in sorted(set(ready) | set(allocated)):
        out.racks[rack] = [t for t in racks[rack] if t in taken]
    out.waiting = [t for rack in plan.waiting for t in out.racks[rack]]
    out.skipped.sort(key=lambda k: k.host)
    return out
