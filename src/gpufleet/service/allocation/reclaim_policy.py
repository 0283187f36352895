"""A pool's reclaim cleanup (``gpufleet reclaim policy POOL --clean processes,mounts,...``).

Stored with the pool's lease rules (``pools.lease_policy``, key ``reclaim_clean``: what
happens when a lease of the pool ends), so no schema change. The reclaim of a host of the pool
runs the cleanup before every check (:data:`gpufleet.collect.reclaim.CLEANUP`): the lessee's
processes killed, data mounts unmounted, their crontabs removed, scratch emptied; each action
is recorded (a ``reclaim-cleanup`` event per action, and the reclaim evidence). What the
cleanup could not remove still fails the reclaim, GPU memory in use included.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.domain.events import EventKind
from gpufleet.domain.reclaim import CleanupAction, parse_clean
from gpufleet.errors import ConfigError
from gpufleet.service.core.fleet import Fleet, record_event
from gpufleet.store.repo import no_pool
from gpufleet.store.tables import Host, Pool

KEY = "reclaim_clean"


def check_clean(text: str) -> tuple[str, ...]:
    """``--clean`` as actions; :class:`ConfigError` (exit 2) naming the valid ones."""
    try:
        return parse_clean(text)
    except ValueError as exc:
        raise ConfigError(f"--clean: {exc}") from None


def pool_clean(s: Session, pool: str | None) -> tuple[str, ...]:
    """The cleanup actions of ``pool`` (none when unset, or no pool)."""
    if pool is None:
        return ()
    raw = s.scalar(select(Pool.lease_policy).where(Pool.name == pool)) or {}
    return tuple(raw.get(KEY) or ())


def clean_by_host(s: Session, names: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """Each named host's pool cleanup."""
    pools = dict(s.execute(select(Host.name, Host.pool).where(Host.name.in_(list(names)))).all())
    by_pool = {p: pool_clean(s, p) for p in set(pools.values())}
    return {name: by_pool[p] for name, p in pools.items()}


def set_pool_clean(fleet: Fleet, pool: str, actions: tuple[str, ...]) -> tuple[str, ...]:
    """Set ``pool``'s reclaim cleanup (the pool must exist), recorded as a ``pool`` event."""
    with fleet.db.session() as s:
        row = s.scalar(select(Pool).where(Pool.name == pool).with_for_update())
        if row is None:
            raise no_pool(s, pool)
        row.lease_policy = {**(row.lease_policy or {}), KEY: list(actions)}
        record_event(
            s,
            fleet,
            EventKind.POOL,
            f"pool {pool}: reclaim cleans "
            + (", ".join(actions) if actions else "nothing (checks only)"),
            data={"pool": pool, KEY: list(actions)},
        )
        return actions


def get_pool_clean(fleet: Fleet, pool: str) -> tuple[str, ...]:
    with fleet.db.session() as s:
        if s.scalar(select(Pool.id).where(Pool.name == pool)) is None:
            raise no_pool(s, pool)
        return pool_clean(s, pool)


def record_cleanup(s: Session, fleet: Fleet, host: Host, actions: list[CleanupAction]) -> None:
    """One ``reclaim-cleanup`` event per action the host reported (inside the caller's
    transaction)."""
    for a in actions:
        record_event(
            s,
            fleet,
            EventKind.RECLAIM_CLEANUP,
            f"reclaim cleanup: {a.describe()}",
            host=host,
            data={"action": a.action, "target": a.target, "rc": a.rc},
        )
