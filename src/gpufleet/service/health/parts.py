"""Parts history (``gpufleet parts list|show``): every GPU, by serial, across hosts and slots.

Where a serial was is read from the ``gpus`` rows of every fact snapshot (one home: the
collection already stores it); what happened to it is its ``part_events`` (marked unusable,
resets, reboots, RMA tickets), the alarms raised on its host that name it, the fatal and other
Xids on its PCI address, and the active-test evidence recorded on its host while it was there.
A card that fails again after moving to another server shows both hosts' records.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import func, select

from gpufleet.domain.facts import HostFacts
from gpufleet.domain.times import as_utc
from gpufleet.errors import NotFound
from gpufleet.service.core.fleet import Fleet
from gpufleet.store.tables import Alarm, EvidenceRow, FactSnapshot, GpuRow, Host, PartEvent


@dataclass
class PartHistory:
    """One GPU's record: where it was (oldest first) and what happened to it (oldest first)."""

    serial: str
    model: str | None
    locations: list[dict[str, Any]]
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def hosts(self) -> list[str]:
        return list(dict.fromkeys(loc["host"] for loc in self.locations))

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> PartHistory:
        """The history back from its JSON (remote mode: the API's answer), times as times."""

        def timed(row: dict[str, Any]) -> dict[str, Any]:
            return {k: datetime.fromisoformat(v) if k in _TIMES and isinstance(v, str) else v
                    for k, v in row.items()}

        return cls(serial=d["serial"], model=d["model"],
                   locations=[timed(x) for x in d["locations"]],
                   events=[timed(x) for x in d["events"]])


_TIMES = frozenset({"first_seen", "last_seen", "at"})


def _bus(addr: str | None) -> str:
    text = (addr or "").lower().removeprefix("pci:")
    dom, _, rest = text.partition(":")
    return f"{dom[-4:].zfill(4)}:{rest}".split(".")[0] if rest else text


def show_part(fleet: Fleet, serial: str) -> PartHistory:
    """The history of the GPU with ``serial``; NotFound when it was never seen nor recorded."""
    with fleet.db.session() as s:
        rows = s.execute(
            select(
                GpuRow.host_id,
                Host.name,
                GpuRow.index,
                GpuRow.uuid,
                GpuRow.pci_bus_id,
                GpuRow.product_name,
                func.min(FactSnapshot.collected_at),
                func.max(FactSnapshot.collected_at),
                func.max(FactSnapshot.id),
            )
            .join(FactSnapshot, FactSnapshot.id == GpuRow.snapshot_id)
            .join(Host, Host.id == GpuRow.host_id)
            .where(GpuRow.serial == serial)
            .group_by(
                GpuRow.host_id,
                Host.name,
                GpuRow.index,
                GpuRow.uuid,
                GpuRow.pci_bus_id,
                GpuRow.product_name,
            )
        ).all()
        recorded = list(
            s.scalars(select(PartEvent).where(PartEvent.serial == serial).order_by(PartEvent.at))
        )
        if not rows and not recorded:
            raise NotFound(f"no GPU with serial '{serial}' was ever seen")
        locations = sorted(
            (
                {
                    "host": name,
                    "index": index,
                    "uuid": uuid,
                    "pci_bus_id": bus,
                    "first_seen": first,
                    "last_seen": last,
                }
                for _, name, index, uuid, bus, _, first, last, _ in rows
            ),
            key=lambda d: (d["first_seen"], d["host"]),
        )
        model = next((r[5] for r in rows if r[5]), None)
        events: list[dict[str, Any]] = [
            {
                "at": e.at,
                "host": e.host_name,
                "index": e.gpu_index,
                "kind": e.kind,
                "message": e.message,
            }
            for e in recorded
        ]
        seen_xids: set[tuple[str, int, str | None]] = set()
        for host_id, name, index, _, bus, _, first, last, snap_id in rows:
            snap = s.get(FactSnapshot, snap_id)
            facts = HostFacts.model_validate(snap.facts) if snap else None
            for x in (facts.xids or []) if facts else []:
                if bus and _bus(x.pci_address) == _bus(bus):
                    key = (name, x.code, x.time_raw)
                    if key not in seen_xids:
                        seen_xids.add(key)
                        events.append(
                            {
                                "at": x.time or last,
                                "host": name,
                                "index": index,
                                "kind": "xid",
                                "message": f"Xid {x.code}: {x.message}"[:300],
                            }
                        )
            for a in s.scalars(select(Alarm).where(Alarm.host_id == host_id)):
                data = a.data or {}
                if data.get("serial") == serial or serial in (data.get("serials") or []):
                    events.append(
                        {
                            "at": a.opened_at,
                            "host": name,
                            "index": index,
                            "kind": "alarm",
                            "message": f"{a.kind} ({a.severity}): {a.message}",
                        }
                    )
            for ev in s.scalars(
                select(EvidenceRow).where(
                    EvidenceRow.host_id == host_id,
                    EvidenceRow.recorded_at >= first,
                    EvidenceRow.recorded_at <= last,
                )
            ):
                events.append(
                    {
                        "at": ev.recorded_at,
                        "host": name,
                        "index": index,
                        "kind": "evidence",
                        "message": f"{ev.kind} {_verdict(ev.passed)}: {ev.summary}"[:300],
                    }
                )
    events.sort(key=lambda e: (_aware(e["at"]), e["kind"]))
    return PartHistory(serial, model, locations, events)


def _verdict(passed: bool | None) -> str:
    return "recorded" if passed is None else "passed" if passed else "failed"


def _aware(dt: datetime) -> datetime:
    return as_utc(dt)  # naive means UTC: gpufleet.domain.times


def list_parts(fleet: Fleet, *, with_history: bool = False) -> list[dict[str, Any]]:
    """Every serial seen: where it is now (its latest sighting), how many hosts it has been
    in, and how many recorded events it has; ``with_history``: only serials with events."""
    with fleet.db.session() as s:
        seen = s.execute(
            select(
                GpuRow.serial,
                func.count(func.distinct(GpuRow.host_id)),
                func.max(GpuRow.snapshot_id),
            )
            .where(GpuRow.serial.is_not(None))
            .group_by(GpuRow.serial)
        ).all()
        counts = dict(
            s.execute(select(PartEvent.serial, func.count()).group_by(PartEvent.serial)).all()
        )
        last_snap = {serial: snap for serial, _, snap in seen}
        where: dict[str, tuple[str, int]] = {}
        for snap_id, host, index, serial in s.execute(
            select(GpuRow.snapshot_id, Host.name, GpuRow.index, GpuRow.serial)
            .join(Host, Host.id == GpuRow.host_id)
            .where(GpuRow.snapshot_id.in_(set(last_snap.values())))
        ):
            if serial is not None and last_snap.get(serial) == snap_id:
                where[serial] = (host, index)
    out: list[dict[str, Any]] = []
    for serial, hosts, _ in seen:
        if serial is None:
            continue
        n = int(counts.get(serial, 0))
        if with_history and not n:
            continue
        loc = where.get(serial)
        out.append(
            {
                "serial": serial,
                "host": loc[0] if loc else None,
                "index": loc[1] if loc else None,
                "hosts": int(hosts),
                "events": n,
            }
        )
    return sorted(out, key=lambda d: d["serial"])
