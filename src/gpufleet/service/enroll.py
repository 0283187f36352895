"""Enroll hosts from an inventory: idempotent, history-preserving."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select

from gpufleet.collect.inventory import Inventory, InventoryHost
from gpufleet.domain.events import EventKind
from gpufleet.domain.health import Health
from gpufleet.domain.states import HostState
from gpufleet.service.fleet import Fleet, record_event
from gpufleet.store.tables import Host, Pool


@dataclass
class EnrollReport:
    """What an enrollment changed."""

    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)


def _wanted(ih: InventoryHost) -> dict[str, Any]:
    spec = ih.expected_spec()
    return {
        "address": ih.address,
        "port": ih.port,
        "user": ih.user,
        "key_file": ih.key_file,
        "groups": list(ih.groups),
        "vars": dict(ih.vars),
        "pool": ih.pool,
        "rack": spec.rack,
        "expected": spec.model_dump(exclude_none=True),
    }


def enroll(fleet: Fleet, inventory: Inventory) -> EnrollReport:
    """Create or update a host per inventory entry; new hosts start ``enrolled``."""
    report = EnrollReport()
    now = fleet.now()
    with fleet.db.session() as s:
        existing = {h.name: h for h in s.scalars(select(Host))}
        pools = {p.name: p for p in s.scalars(select(Pool))}
        for ih in inventory.hosts:
            wanted = _wanted(ih)
            host = existing.get(ih.name)
            if host is None:
                host = Host(
                    name=ih.name,
                    state=HostState.ENROLLED,
                    state_entered_at=now,
                    health=Health.OK,
                    profiles=[],
                    source=inventory.source,
                    created_at=now,
                    updated_at=now,
                    **wanted,
                )
                s.add(host)
                s.flush()
                record_event(
                    s,
                    fleet,
                    EventKind.ENROLLED,
                    f"enrolled from {inventory.source}",
                    host=host,
                    data={"groups": wanted["groups"], "address": ih.address},
                )
                report.added.append(ih.name)
            else:
                changed = {
                    k: (getattr(host, k), v) for k, v in wanted.items() if getattr(host, k) != v
                }
                if changed:
                    for k, (_, v) in changed.items():
                        setattr(host, k, v)
                    host.source = inventory.source
                    host.updated_at = now
                    record_event(
                        s,
                        fleet,
                        EventKind.UPDATED,
                        "inventory changed: " + ", ".join(sorted(changed)),
                        host=host,
                        data={k: {"before": b, "after": a} for k, (b, a) in changed.items()},
                    )
                    report.updated.append(ih.name)
                else:
                    report.unchanged.append(ih.name)
            if ih.pool and ih.pool not in pools:
                pool = Pool(name=ih.pool, baseline=ih.baseline, expected=wanted["expected"])
                s.add(pool)
                pools[ih.pool] = pool
            elif ih.pool and ih.baseline and pools[ih.pool].baseline is None:
                pools[ih.pool].baseline = ih.baseline
    return report
