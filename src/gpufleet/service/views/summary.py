"""The fleet summary a person reads at a glance, and Kubernetes labels per host."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import Text, cast, select

from gpufleet.domain.labels import LeaseTag
from gpufleet.domain.leases import LeaseState
from gpufleet.domain.roles import HostRole
from gpufleet.domain.states import HostState
from gpufleet.service.core.alarms import open_alarms
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.core.select import is_explicit, nothing_matches, select_hosts
from gpufleet.service.hosts.baselines import DriftHost, DriftReport, drift_of
from gpufleet.service.hosts.labels import FleetLabels, HostLabels, with_lease
from gpufleet.store.repo import (
    OWN_BASELINE,
    Baselines,
    label_set_texts,
    latest_columns,
    latest_facts,
)
from gpufleet.store.tables import FactSnapshot, Host, Lease, LeaseHost


@dataclass
class FleetSummary:
    """Hosts per state, usable GPUs per profile and model, faults, drift, collection trouble."""

    hosts: int
    per_state: dict[str, int]
    gpus_per_profile_model: dict[str, dict[str, int]]  # profile -> model -> GPUs
    hosts_per_profile: dict[str, int]
    quarantined: list[dict[str, str | None]]
    validating: list[dict[str, str | None]]
    unreachable: list[dict[str, str | None]]
    warnings: list[dict[str, str | None]]
    drift: DriftReport
    gpus_total: int = 0
    gpus_available: int = 0
    alarms: list[dict[str, str | None]] = field(default_factory=list)  # open, oldest first
    extra: dict[str, object] = field(default_factory=dict)
    #: Hosts in maintenance or quarantine with their expected-back time (``--eta``).
    back: list[dict[str, str | None]] = field(default_factory=list)
    #: issue 15: per vendor and model, hosts, accelerators and those on available hosts
    #: (NVIDIA GPUs, Ascend NPUs, AMD Instinct GPUs side by side; vendor then model order).
    accelerators: list[dict[str, object]] = field(default_factory=list)
    #: issue 15: per vendor, what its accelerators are called (``noun``: ``GPUs``, ``NPUs``),
    #: how many and how many on available hosts; the most first (``gpus_total``: their sum).
    per_vendor: list[dict[str, object]] = field(default_factory=list)
    #: issue 26 item 9: the nodes that are not GPU nodes, counted apart (never in the GPU
    #: counts, profiles' GPUs or models): role -> {"hosts": n, "available": n}.
    nodes_by_role: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def noun(self) -> str:
        """What the counts are of: ``GPUs`` (NVIDIA, AMD), ``NPUs`` (an Ascend fleet), or
        ``accelerators`` when the fleet mixes kinds
        (:func:`~gpufleet.service.hosts.accelerator_counts.fleet_noun`)."""
        from gpufleet.service.hosts.accelerator_counts import fleet_noun

        return fleet_noun(self.per_vendor)

    @property
    def gpus_only(self) -> bool:
        """Every accelerator is a GPU (or there are none): the counts say GPUs."""
        return self.noun == "GPUs"

    def counts_line(self) -> str:
        """The first line: ``32 hosts, 256 GPUs, 200 GPUs available`` for an NVIDIA fleet,
        ``32 hosts, 214 accelerators (198 GPUs, 16 NPUs), 200 available`` for a mixed one
        (:func:`~gpufleet.service.hosts.accelerator_counts.fleet_counts_line`)."""
        from gpufleet.service.hosts.accelerator_counts import fleet_counts_line

        return fleet_counts_line(self.hosts, self.gpus_total, self.gpus_available, self.per_vendor)


class _SummaryHost(NamedTuple):
    """A row of :data:`_SUMMARY_COLUMNS` as a plain tuple (a SQLAlchemy ``Row``'s attribute
    lookup by name costs more than the rest of the summary's work per host)."""

    id: int
    name: str
    state: Any  # HostState
    health: Any  # Health
    fault: Any  # Fault | None
    fault_reason: str | None
    status_reason: str | None
    last_outcome: Any  # CollectionOutcome | None
    last_reason: str | None
    profiles: str  # the JSON text (decoded once per distinct text)
    eta: datetime | None
    pool: str | None
    own_baseline: str | None
    snapshot: int | None
    gpu_count: Any  # int; None before the first collection (snapshot None)
    gpu_model: str | None
    beside_gpus: Any  # bool: accelerators beside nvidia-smi's GPUs (BESIDE_GPUS)
    role: str


#: What :func:`fleet_summary` reads of each host and its latest snapshot: what it shows and
#: what drift needs (:class:`~gpufleet.service.hosts.baselines.DriftHost`), read once for both;
#: the snapshot columns from their index (:func:`~gpufleet.store.repo.latest_columns`).
_SUMMARY_COLUMNS = (
    Host.id,
    Host.name,
    Host.state,
    Host.health,
    Host.fault,
    Host.fault_reason,
    Host.status_reason,
    Host.last_outcome,
    Host.last_reason,
    cast(Host.profiles, Text).label("profiles"),
    Host.eta,
    Host.pool,
    OWN_BASELINE,
    FactSnapshot.id.label("snapshot"),
    FactSnapshot.gpu_count,
    FactSnapshot.gpu_model,
)  # and accelerator_counts.BESIDE_GPUS (imported when used)


def fleet_summary(fleet: Fleet, selector: str | None = None) -> FleetSummary:
    """Summarise the selected hosts (all by default)."""
    from gpufleet.service.hosts.accelerator_counts import (
        BESIDE_GPUS,
        accelerators_of_snapshots,
        display_model,
        vendor_rows,
        vendor_totals,
    )

    with fleet.db.session() as s:
        # The columns the summary shows (issue 8): no ORM row, no facts, no labels document.
        rows = list(
            map(
                _SummaryHost._make,
                latest_columns(
                    s, select_hosts(selector), *_SUMMARY_COLUMNS, BESIDE_GPUS, Host.role
                ),
            )
        )
        explicit = is_explicit(selector)
        if not rows and explicit:
            raise nothing_matches(selector, s)
        alarms: list[dict[str, str | None]] = [
            {"host": a.host, "fault": f"{a.kind} ({a.severity})", "reason": a.message}
            # every host selected: no list of ids to send
            for a in open_alarms(s, [h.id for h in rows] if explicit else None)
        ]
        decoded = accelerators_of_snapshots(
            s, {h.snapshot: h.id for h in rows if h.snapshot is not None and h.beside_gpus}
        )
        drifted = drift_of(
            s, [DriftHost(h.name, h.state, h.own_baseline, h.pool, h.snapshot) for h in rows]
        )
    per_state = Counter(h.state.value for h in rows)
    by_profile: dict[str, Counter[str]] = {}
    hosts_per_profile: Counter[str] = Counter()
    gpus_total = gpus_avail = 0
    quarantined, validating, unreachable, warnings = [], [], [], []
    per_model: list[tuple[str, str, int, bool]] = []  # (vendor, model, count, available)
    profiles: dict[str, list[str]] = {}  # JSON text -> the list (a fleet has a few)
    nodes: dict[str, Counter[str]] = {}
    for h in rows:
        if h.role != HostRole.GPU.value:
            per_role = nodes.setdefault(h.role, Counter(hosts=0, available=0))
            per_role["hosts"] += 1
            per_role["available"] += h.state == HostState.AVAILABLE.value
        n = h.gpu_count if h.snapshot is not None and h.role == HostRole.GPU.value else 0
        gpus_total += n
        model = h.gpu_model or "unknown"
        available = h.state == HostState.AVAILABLE.value
        # NVIDIA only: the snapshot's columns; other vendors' too: each (vendor, model)
        # from the facts (gpu_count counts every vendor's, gpu_model joins their models).
        groups = decoded.get(h.id) or [("nvidia", model, n)]
        if h.role != HostRole.GPU.value:
            groups = []  # a cpu/storage node's accelerators (none expected) are no capacity
        per_model += [(v, name, c, available) for v, name, c in groups if c > 0]
        if available and h.role == HostRole.GPU.value:
            gpus_avail += n
            names = profiles.get(h.profiles)
            if names is None:
                names = profiles[h.profiles] = json.loads(h.profiles) if h.profiles else []
            for p in names:
                per = by_profile.get(p)
                if per is None:
                    per = by_profile[p] = Counter()
                for vendor, name, count in groups:
                    per[name if vendor == "nvidia" else display_model(vendor, name)] += count
                hosts_per_profile[p] += 1
        if h.state == HostState.QUARANTINED.value:
            quarantined.append({"host": h.name, "fault": h.fault, "reason": h.fault_reason})
        elif h.state == HostState.VALIDATING.value:
            validating.append({"host": h.name, "fault": None, "reason": h.status_reason})
        if h.state == HostState.AVAILABLE.value and h.health == "warning":
            warnings.append({"host": h.name, "fault": None, "reason": h.status_reason})
        if h.last_outcome and h.last_outcome != "ok":
            unreachable.append({"host": h.name, "fault": h.last_outcome, "reason": h.last_reason})
    return FleetSummary(
        hosts=len(rows),
        per_state=dict(per_state),
        gpus_per_profile_model={p: dict(c) for p, c in sorted(by_profile.items())},
        hosts_per_profile=dict(hosts_per_profile),
        quarantined=quarantined,
        validating=validating,
        unreachable=unreachable,
        warnings=warnings,
        drift=drifted,
        gpus_total=gpus_total,
        gpus_available=gpus_avail,
        alarms=alarms,
        back=[
            {"host": h.name, "state": h.state.value, "eta": h.eta.isoformat()}
            for h in rows
            if h.eta is not None and h.state in (HostState.MAINTENANCE, HostState.QUARANTINED)
        ],
        accelerators=vendor_rows(per_model),
        per_vendor=vendor_totals(per_model),
        nodes_by_role={r: dict(c) for r, c in sorted(nodes.items())},
    )


def host_labels(fleet: Fleet, selector: str | None = None) -> list[HostLabels]:
    """Scheduling labels (GFD-compatible + gpufleet.io) and taints per selected host.

    The hosts are read as the columns labels take, without their facts (issue 8): each
    latest snapshot's ``fact_labels`` (what the labels take from the facts: its shared
    ``fact_label_sets`` row, by the id the snapshots' read index holds, migration 0017; the
    few sets read once) is enough, and it and the host's expected spec are read as their
    JSON text, decoded and derived once per distinct text
    (:class:`~gpufleet.service.hosts.labels.FleetLabels`). Only a snapshot without a usable one
    (written before migration 0015, or by another version of the rules) has its facts
    decoded, a batch at a time, dropped once the host's labels are derived."""
    with fleet.db.session() as s:
        decoded: dict[str, Any] = {}  # JSON text -> its value (shared: read only)

        def value(text: str | None) -> Any:
            if text is None:
                return None
            got = decoded.get(text, decoded)
            if got is decoded:
                got = decoded[text] = json.loads(text)
            return got

        read = latest_columns(s, select_hosts(selector), *_LABEL_COLUMNS)
        sets = label_set_texts(s, {r[11] for r in read})
        rows = [
            _LabelHost(r[0], r[1], r[2], r[3], r[4], value(r[5]), r[6], r[7], value(r[8]), r[9],
                       r[10], sets.get(r[11]), r[12])
            for r in read
        ]  # fmt: skip
        lookup = Baselines(s)
        labeller = FleetLabels()
        by_snapshot: dict[int, _LabelHost] = {}
        derived: dict[str, HostLabels] = {}
        for h in rows:
            if h.snapshot is None:
                continue
            if labeller.stored(h.fact_labels) is None:
                by_snapshot[h.snapshot] = h
            else:
                derived[h.name] = labeller.labels(
                    h, h.expected, h.fact_labels, lookup.name_from(h.own_baseline, h.pool)
                )
        for sid, facts in latest_facts(s, list(by_snapshot)):
            h = by_snapshot[sid]
            baseline = lookup.name_from(h.own_baseline, h.pool)
            derived[h.name] = labeller.from_facts(h, h.expected, facts, baseline)
        out = [
            derived.get(h.name)
            or labeller.from_facts(h, h.expected, None, lookup.name_from(h.own_baseline, h.pool))
            for h in rows
        ]
        if any(h.state == HostState.ALLOCATED for h in rows):
            tags = active_lease_tags(s)
            out = [
                with_lease(hl, tags.get(h.name, LeaseTag(None)))
                if h.state == HostState.ALLOCATED else hl
                for h, hl in zip(rows, out, strict=True)
            ]
    if not rows and is_explicit(selector):
        raise nothing_matches(selector)
    return out


def active_lease_tags(s: Any) -> dict[str, LeaseTag]:
    """Issue 26: host name -> the active lease holding it (id, owner, the host's end)."""
    rows = s.execute(
        select(LeaseHost.host_name, Lease.id, Lease.owner, LeaseHost.ends_at)
        .join(Lease, Lease.id == LeaseHost.lease_id)
        .where(LeaseHost.holding, Lease.state == LeaseState.ACTIVE)
    )
    return {name: LeaseTag(lid, owner, ends) for name, lid, owner, ends in rows}


class _LabelHost(NamedTuple):
    """A row of :data:`_LABEL_COLUMNS` as a plain tuple (see :class:`_SummaryHost`); a
    :class:`~gpufleet.service.hosts.labels.LabelledHost` but for ``expected``, its JSON text
    here."""

    name: str
    state: Any  # HostState
    fault: Any  # Fault | None
    pool: str | None
    rack: str | None
    profiles: list[str]  # shared by the hosts with the same list: read only
    own_baseline: str | None  # its gpufleet_baseline variable (store.repo.OWN_BASELINE)
    usable_gpus: int | None
    unusable_gpus: list[dict[str, Any]] | None  # shared, as profiles
    expected: Any  # str | None: the JSON text
    snapshot: int | None
    fact_labels: str | None
    role: str


#: What :func:`host_labels` reads of each host and its latest snapshot: the
#: :class:`~gpufleet.service.hosts.labels.LabelledHost` attributes, its own baseline variable, and
#: the JSON documents as their text (decoded, or derived, once per distinct text: issue 8).
_LABEL_COLUMNS = (
    Host.name,
    Host.state,
    Host.fault,
    Host.pool,
    Host.rack,
    cast(Host.profiles, Text).label("profiles"),
    OWN_BASELINE,
    Host.usable_gpus,
    cast(Host.unusable_gpus, Text).label("unusable_gpus"),
    cast(Host.expected, Text).label("expected"),
    FactSnapshot.id.label("snapshot"),
    FactSnapshot.fact_labels_id,  # its FactLabelSet: the JSON text read once per set
    Host.role,
)
