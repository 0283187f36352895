"""Baselines, pools and drift: which validated combination each pool runs, who differs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpufleet.domain.drift import (
    DriftItem,
    DriftSummary,
    PoolDrift,
    diff_against_baseline,
    pool_drift,
    summarize_drift,
)
from gpufleet.domain.events import EventKind
from gpufleet.domain.facts import HostFacts
from gpufleet.domain.mig import pin_from_file
from gpufleet.domain.pins import baseline_values
from gpufleet.domain.spec import Baseline, BaselineStatus
from gpufleet.errors import ConfigError, NotFound
from gpufleet.service.core.fleet import Fleet, record_event
from gpufleet.service.core.select import is_explicit, nothing_matches, select_hosts
from gpufleet.store.repo import (
    OWN_BASELINE,
    Baselines,
    known_pools,
    latest_columns,
    latest_facts,
    no_baseline,
    no_pool,
)
from gpufleet.store.tables import BaselineRow, FactSnapshot, Host, Pool


def _to_domain(row: BaselineRow) -> Baseline:
    return Baseline.model_validate(row.spec | {"name": row.name, "status": row.status})


def save_baseline(fleet: Fleet, baseline: Baseline, *, replace: bool = False) -> Baseline:
    """Create (or, with ``replace``, overwrite) a baseline."""
    now = fleet.now()
    spec = baseline.model_dump(mode="json", exclude={"name", "status"})
    with fleet.db.session() as s:
        row = s.scalar(select(BaselineRow).where(BaselineRow.name == baseline.name))
        if row is not None and not replace:
            raise ConfigError(f"baseline '{baseline.name}' exists (use --replace)")
        if row is None:
            row = BaselineRow(
                name=baseline.name,
                status=baseline.status,
                spec=spec,
                created_at=now,
                updated_at=now,
            )
            s.add(row)
        else:
            row.spec, row.status, row.updated_at = spec, baseline.status, now
        record_event(
            s,
            fleet,
            EventKind.BASELINE,
            f"baseline {baseline.name} saved ({baseline.status})",
            data=baseline.model_dump(mode="json"),
        )
    return baseline


def baseline_from_host(fleet: Fleet, host_name: str, name: str, purpose: str = "") -> Baseline:
    """A candidate baseline copied from the latest facts of a known-good host."""
    with fleet.db.session() as s:
        host = s.scalar(select(Host).where(Host.name == host_name))
        if host is None or host.latest_snapshot_id is None:
            raise NotFound(f"host '{host_name}' has no collected facts")
        snap = s.get(FactSnapshot, host.latest_snapshot_id)
        assert snap is not None
        facts = HostFacts.model_validate(snap.facts)
    # Every pin of the table, as the host has it (gpufleet.domain.pins).
    return Baseline.model_validate(
        {"name": name, "purpose": purpose, "status": BaselineStatus.CANDIDATE}
        | baseline_values(facts)
    )


def mig_config_pin(spec: str) -> dict[str, str]:
    """Issue 26 item 7: the MIG pin of ``FILE:NAME``, config ``NAME`` of the mig-parted file
    ``FILE`` (:func:`gpufleet.domain.mig.pin_from_file`); a :class:`ConfigError` naming the
    file when it cannot be read or has no such config."""
    path, sep, name = spec.rpartition(":")
    if not sep or not path or not name:
        raise ConfigError(setting="--mig-config", cause=f"{spec!r}: expected FILE:NAME")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(setting="--mig-config", cause=f"{path}: {exc.strerror}") from None
    return pin_from_file(text, path, name)


def get_baseline(fleet: Fleet, name: str) -> Baseline:
    """One baseline by name."""
    with fleet.db.session() as s:
        row = s.scalar(select(BaselineRow).where(BaselineRow.name == name))
        if row is None:
            raise no_baseline(s, name)
        return _to_domain(row)


def list_baselines(fleet: Fleet) -> list[tuple[Baseline, list[str]]]:
    """Every baseline with the pools that point at it."""
    with fleet.db.session() as s:
        pools = list(s.scalars(select(Pool)))
        return [
            (_to_domain(r), sorted(p.name for p in pools if p.baseline == r.name))
            for r in s.scalars(select(BaselineRow).order_by(BaselineRow.name))
        ]


def check_pools(fleet: Fleet, pools: Sequence[str], *, create: bool) -> None:
    """Refuse (NotFound, exit 4, "did you mean") a pool no inventory or host names unless
    ``create``: asked before anything is written (``baseline create --pool``)."""
    if create or not pools:
        return
    with fleet.db.session() as s:
        known = known_pools(s)
        for pool in pools:
            if pool not in known:
                raise NotFound(f"{no_pool(s, pool, known)}; use --create to make a new one")


def set_pool_baseline(
    fleet: Fleet, pool: str, baseline: str | None, *, create: bool = False
) -> None:
    """Point a pool at a baseline. A pool no inventory or host names is :class:`NotFound`
    (a typo must not create a pool) unless ``create``."""
    if baseline is not None:
        get_baseline(fleet, baseline)
    with fleet.db.session() as s:
        row = s.scalar(select(Pool).where(Pool.name == pool))
        if row is None and not create:
            used = s.scalar(select(Host.id).where(Host.pool == pool).limit(1))
            if used is None:
                raise NotFound(f"{no_pool(s, pool)}; use --create to make a new one")
        if row is None:
            row = Pool(name=pool, expected={})
            s.add(row)
        before = row.baseline
        row.baseline = baseline
        record_event(
            s,
            fleet,
            EventKind.POOL,
            f"pool {pool}: baseline {before or '(none)'} -> {baseline or '(none)'}",
        )


@dataclass
class PoolView:
    """A pool, its baseline and size."""

    name: str
    baseline: str | None
    hosts: int


def list_pools(fleet: Fleet) -> list[PoolView]:
    """Pools with baseline and host count."""
    with fleet.db.session() as s:
        # one count per pool (issue 8: not every host's row)
        sizes: dict[str | None, int] = {
            pool: n
            for pool, n in s.execute(
                select(Host.pool, func.count()).where(Host.pool.is_not(None)).group_by(Host.pool)
            )
        }
        return [
            PoolView(p.name, p.baseline, sizes.get(p.name, 0))
            for p in s.scalars(select(Pool).order_by(Pool.name))
        ]


def diff_baselines(a: Baseline, b: Baseline) -> list[tuple[str, object, object]]:
    """Fields where two baselines differ: (field, a, b)."""
    da, db_ = a.model_dump(exclude={"name"}), b.model_dump(exclude={"name"})
    return [(k, da[k], db_[k]) for k in da if da[k] != db_[k]]


@dataclass
class DriftReport:
    """Per-host drift and fleet-wide summary."""

    by_host: dict[str, list[DriftItem]]
    summary: list[DriftSummary]
    baselines: dict[str, str]  # host -> baseline name
    no_baseline: list[str]
    no_facts: list[str]
    #: issue 26: each pool with a baseline, its hosts compared with it (see
    #: :class:`~gpufleet.domain.drift.PoolDrift`), by pool name
    pools: list[PoolDrift] = field(default_factory=list)

    @property
    def drifts(self) -> bool:
        """A host differs from its own baseline, or a pool from its baseline."""
        return bool(self.by_host) or any(p.drifts for p in self.pools)


class DriftHost(NamedTuple):
    """What drift reads of a host: its name, state, baseline inputs (its own
    ``gpufleet_baseline`` variable, :data:`~gpufleet.store.repo.OWN_BASELINE`, and its pool)
    and latest snapshot id (None before the first collection)."""

    name: str
    state: Any  # HostState
    own_baseline: str | None
    pool: str | None
    snapshot: int | None


#: The columns of :class:`DriftHost` (issue 8: no ORM row, no JSON document).
DRIFT_COLUMNS = (Host.name, Host.state, OWN_BASELINE, Host.pool, FactSnapshot.id)


def drift(fleet: Fleet, selector: str | None = None) -> DriftReport:
    """Every selected host compared with its pool's baseline, field by field."""
    with fleet.db.session() as s:
        hosts = [
            DriftHost._make(r)  # a plain tuple: a Row's lookup by name costs more than the rest
            for r in latest_columns(s, select_hosts(selector), *DRIFT_COLUMNS)
        ]
        if not hosts and is_explicit(selector):
            raise nothing_matches(selector)
        return drift_of(s, hosts)


def drift_of(s: Session, hosts: Sequence[DriftHost]) -> DriftReport:
    """:func:`drift` of ``hosts`` (read by the caller, by name, in session ``s``): facts
    are decoded only for hosts that have a baseline, a batch at a time. Each host is
    compared with the baseline it follows and, when that is not its pool's (a campaign
    moved it: issue 26), with its pool's baseline too."""
    no_baseline: list[str] = []
    no_facts: list[str] = []
    names: dict[str, str] = {}
    baselines = Baselines(s)
    # snapshot id -> (host, its baseline, its pool's baseline when the pool has one)
    compare: dict[int, tuple[str, Baseline, Baseline | None]] = {}
    pool_of: dict[str, str] = {}
    for h in hosts:
        if h.state == "retired":
            continue
        baseline = baselines.named(baselines.name_from(h.own_baseline, h.pool))
        if baseline is None:
            no_baseline.append(h.name)
            continue
        if h.snapshot is None:
            no_facts.append(h.name)
            continue
        pool_baseline = baselines.named(baselines.name_from(None, h.pool)) if h.pool else None
        if pool_baseline is not None and h.pool:
            pool_of[h.name] = h.pool
        compare[h.snapshot] = (h.name, baseline, pool_baseline)
        names[h.name] = baseline.name
    found: dict[str, list[DriftItem]] = {}
    against_pool: dict[str, dict[str, list[DriftItem]]] = {}  # pool -> host -> items
    pool_names: dict[str, str] = {}
    for sid, facts in latest_facts(s, list(compare)):
        name, baseline, pool_baseline = compare[sid]
        items = diff_against_baseline(facts, baseline)
        if items:
            found[name] = items
        if pool_baseline is not None and name in pool_of:
            pool = pool_of[name]
            pool_names[pool] = pool_baseline.name
            against_pool.setdefault(pool, {})[name] = (
                items if pool_baseline.name == baseline.name
                else diff_against_baseline(facts, pool_baseline)
            )
    by_host = {n: found[n] for h in hosts if (n := h.name) in found}  # by name
    pools = [
        pool_drift(pool, pool_names[pool], per_host, names)
        for pool, per_host in sorted(against_pool.items())
    ]
    return DriftReport(by_host, summarize_drift(by_host), names, no_baseline, no_facts, pools)
