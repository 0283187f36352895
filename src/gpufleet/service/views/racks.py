"""The rack read model (issue 27 item 2): ``gpufleet racks list/show``, ``/api/v1/racks`` and
the dashboard's rack page. Each rack (chassis serial) with its NVLink domain, partitions,
manifest and findings, and its trays in slot order with state, health, fabric outcome,
validated profiles, holding lease and open alarms."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.domain.leases import HOLDING
from gpufleet.domain.names import did_you_mean
from gpufleet.domain.racks import Rack
from gpufleet.errors import NotFound
from gpufleet.service.core.alarms import open_alarms
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.racks import manifests, read_racks
from gpufleet.store.tables import Host, Lease, LeaseHost


@dataclass
class TrayRow:
    """One tray of a rack."""

    host: str
    slot: int | None
    tray_index: int | None
    host_id: int | None
    gpus: int
    state: str
    health: str
    reporting: bool
    fabric: str
    fabric_reasons: list[str]
    fabric_message: str
    partition: str | None
    #: why a rack incident keeps it out of NVLink-domain placement (None: none does)
    restricted: str | None = None
    profiles: list[str] = field(default_factory=list)
    lease: dict[str, Any] | None = None
    alarms: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class RackRow:
    """A rack for ``racks list``; ``trays`` filled for ``racks show``."""

    rack: str
    model: str | None
    nvl_domain: str | None
    domains: list[str]
    partitions: list[str]
    trays: int
    expected_trays: int | None
    gpus: int
    free_gpus: int
    state: str  # ok / degraded (a tray not ok) / alarmed (a manifest finding)
    findings: list[dict[str, Any]]
    tray_rows: list[TrayRow] = field(default_factory=list)

    def as_json(self, *, trays: bool) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "tray_rows"}
        if trays:
            out["tray_rows"] = [dict(t.__dict__) for t in self.tray_rows]
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RackRow:
        """The row back from :meth:`as_json` (remote mode: the API's answer)."""
        trays = [TrayRow(**t) for t in d.get("tray_rows") or ()]
        return cls(**{k: v for k, v in d.items() if k != "tray_rows"}, tray_rows=trays)


def _row(rack: Rack) -> RackRow:
    free = sum(m.gpus for m in rack.members if m.state == "available" and m.reporting)
    bad = any(m.fabric.outcome.value not in ("ok",) or not m.reporting for m in rack.members)
    return RackRow(
        rack=rack.rack_id,
        model=rack.manifest.model if rack.manifest else None,
        nvl_domain=rack.nvl_domain,
        domains=list(rack.domains),
        partitions=list(rack.partitions),
        trays=len(rack.members),
        expected_trays=rack.manifest.trays if rack.manifest else None,
        gpus=rack.gpus,
        free_gpus=free,
        state="alarmed" if rack.findings else ("degraded" if bad else "ok"),
        findings=[{"kind": f.kind, "message": f.message} for f in rack.findings],
    )


def list_racks(fleet: Fleet) -> list[RackRow]:
    """Every rack, sorted by rack id."""
    with fleet.db.session() as s:
        racks, _ = read_racks(s, manifests(fleet))
    return [_row(r) for r in racks]


def _find(racks: list[Rack], name: str) -> Rack:
    for r in racks:
        if name in (r.rack_id, r.nvl_domain) or any(m.host == name for m in r.members):
            return r
    raise NotFound(f"no rack {name!r}" + did_you_mean(name, [r.rack_id for r in racks]))


def _leases(s: Session, ids: list[int]) -> dict[int, dict[str, Any]]:
    q = (
        select(LeaseHost.host_id, Lease.id, Lease.owner, Lease.state, Lease.ends_at)
        .join(Lease, Lease.id == LeaseHost.lease_id)
        .where(LeaseHost.host_id.in_(ids), Lease.state.in_(sorted(HOLDING)))
        .order_by(Lease.starts_at, Lease.id)
    )
    out: dict[int, dict[str, Any]] = {}
    for hid, lid, owner, state, ends in s.execute(q):
        out.setdefault(hid, {"id": lid, "owner": owner, "state": str(state),
                             "ends_at": ends.isoformat() if ends else None})
    return out


def show_rack(fleet: Fleet, name: str) -> RackRow:
    """One rack (by rack id, NVLink domain or one of its hosts) with its trays in slot order."""
    with fleet.db.session() as s:
        racks, ids = read_racks(s, manifests(fleet))
        rack = _find(racks, name)
        hids = [ids[m.host] for m in rack.members]
        rows = s.execute(select(Host.id, Host.profiles, Host.nvl_restricted)
                         .where(Host.id.in_(hids))).all()
        profiles = {hid: p for hid, p, _ in rows}
        restricted = {hid: r for hid, _, r in rows}
        leases = _leases(s, hids)
        alarms: dict[str, list[dict[str, Any]]] = {}
        for a in open_alarms(s, hids):
            alarms.setdefault(a.host, []).append(
                {"kind": a.kind, "severity": a.severity, "message": a.message,
                 "opened_at": a.opened_at.isoformat()})
    row = _row(rack)
    for m in rack.members:
        p, hid = m.position, ids[m.host]
        row.tray_rows.append(TrayRow(
            host=m.host, slot=p.slot, tray_index=p.tray_index, host_id=p.host_id, gpus=m.gpus,
            state=m.state, health=m.health, reporting=m.reporting,
            fabric=m.fabric.outcome.value, fabric_reasons=list(m.fabric.reasons),
            fabric_message=m.fabric.message, partition=m.fabric.partition,
            restricted=restricted.get(hid),
            profiles=sorted(profiles.get(hid) or []), lease=leases.get(hid),
            alarms=alarms.get(m.host, []),
        ))
    return row
