"""A collection's facts as the host's latest snapshot: the content hash (:func:`facts_digest`)
and the write of a snapshot with its GPU and NIC rows, or of its new readings only (moved out
of :mod:`gpufleet.service.hosts.collect`, which stores every collected host's facts with it),
and what the duplicate-machine check reads of the other hosts' latest snapshots
(:class:`Duplicates`)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from sqlalchemy import insert, select, update
from sqlalchemy.orm import Session

from gpufleet.domain.events import AlarmKind
from gpufleet.domain.fabric import host_fabric
from gpufleet.domain.facts import HostFacts
from gpufleet.domain.identity import machine_ids, system_uuid
from gpufleet.domain.labels import fact_labels
from gpufleet.domain.snapshot_columns import derived_columns
from gpufleet.domain.states import HostState
from gpufleet.domain.telemetry import stable_view
from gpufleet.store.repo import label_set_id
from gpufleet.store.table_types import EncodedJson
from gpufleet.store.tables import Alarm, FactSnapshot, GpuRow, Host, NicRow


def facts_digest(doc: dict[str, Any]) -> str:
    """Content hash of a facts document (``model_dump(mode="json")``) without its readings
    (``collected_at``, temperatures, power, utilization ...: :mod:`gpufleet.domain.telemetry`):
    equal digests, same facts apart from what moves by itself. (Migration 0006 backfilled
    with the whole document but ``collected_at``, the digest before issue 8's telemetry
    change: such a host writes one new snapshot at its next collection.)

    The text hashed is ``json.dumps(..., sort_keys=True, separators=(",", ":"),
    ensure_ascii=False)`` as UTF-8, the digests stored snapshots have; orjson makes the same
    bytes in C, about 10x sooner (issue 30), for every value but a float under 1e-4 (``1e-05``
    is ``0.00001`` there: such a host stores one more snapshot, once) and an integer past 64
    bits (orjson refuses it: the standard library encodes that document)."""
    view = stable_view(doc)
    try:
        text = orjson.dumps(view, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:
        text = json.dumps(view, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    return hashlib.sha256(text).hexdigest()


def encode_facts(doc: dict[str, Any]) -> EncodedJson:
    """``doc`` with its JSON text, encoded once (orjson): the snapshot's ``facts`` value,
    written as that text by the store (:func:`~gpufleet.store.table_types.json_serializer`)
    rather than encoded again by the standard library."""
    try:
        return EncodedJson(doc, orjson.dumps(doc).decode())
    except orjson.JSONEncodeError:  # an integer past 64 bits: as the store always wrote it
        return EncodedJson(doc, json.dumps(doc))


def content_hashes(s: Session, ids: Iterable[int | None]) -> dict[int, str | None]:
    """The content hash of each snapshot of ``ids`` (None ignored), by id."""
    wanted = sorted({i for i in ids if i is not None})
    out: dict[int, str | None] = {}
    for k in range(0, len(wanted), 500):
        rows = s.execute(
            select(FactSnapshot.id, FactSnapshot.content_hash).where(
                FactSnapshot.id.in_(wanted[k : k + 500])
            )
        )
        out.update((i, h) for i, h in rows)
    return out


def store_facts(
    s: Session,
    host: Host,
    run_id: int,
    facts: HostFacts,
    hashes: Mapping[int, str | None] | None = None,
) -> tuple[int, HostFacts | None]:
    """Record ``facts`` as ``host``'s latest; returns (its snapshot id, the previous facts
    when they differ, for change detection).

    A host whose facts are the same as its latest snapshot's apart from their readings
    (content hash, :func:`facts_digest`) writes no new snapshot, GPU or NIC rows: that
    snapshot stays the latest and its facts document becomes this collection's (one UPDATE),
    so every reader of the latest facts sees the latest readings, never stale ones; the
    collection result row and ``hosts.last_collected_at`` record the collection. The
    snapshot's columns (derived columns, labels' set, DMI UUID, ``collected_at``: when these
    facts were first seen) and its GPU/NIC rows read no reading, so they stay right.
    ``hashes``: the content hash of snapshots by id, when read already.
    Otherwise one snapshot row and its
    GPU and NIC rows are inserted in bulk (Core ``executemany``, no ORM unit of work); its
    labels' facts are referenced by their shared set (:func:`~gpufleet.store.repo.label_set_id`).
    """
    hf = host_fabric(facts)  # issue 27: the host's rack and NVLink domain, for placement
    host.nvl_rack, host.nvl_domain = hf.rack_id, hf.nvl_domain
    # Core statements on the session's connection: no ORM bulk-insert nor update
    # synchronisation (no snapshot, GPU or NIC row is loaded as an object here).
    conn = s.connection()
    raw_doc = facts.model_dump(mode="json")
    digest = facts_digest(raw_doc)
    doc = encode_facts(raw_doc)
    prev_id = host.latest_snapshot_id
    if prev_id is not None:
        if hashes is not None and prev_id in hashes:  # read for a whole group (issue 30)
            prev_hash = hashes[prev_id]
        else:
            prev_hash = s.scalar(
                select(FactSnapshot.content_hash).where(FactSnapshot.id == prev_id)
            )
        if prev_hash == digest:
            conn.execute(update(FactSnapshot).where(FactSnapshot.id == prev_id).values(facts=doc))
            return prev_id, None
    gpus = facts.gpus
    derived = derived_columns(facts)
    dmi_uuid = facts.dmi.uuid if facts.dmi is not None else None
    snap_id = conn.execute(
        insert(FactSnapshot).returning(FactSnapshot.id),
        {
            "host_id": host.id,
            "run_id": run_id,
            "collected_at": facts.collected_at,
            "facts": doc,
            **derived,
            "cuda": facts.cuda_version,
            "kernel": facts.kernel,
            "os": facts.os.pretty_name if facts.os else None,
            "content_hash": digest,
            "dmi_uuid": dmi_uuid.upper() if dmi_uuid else None,
            "fact_labels_id": label_set_id(s, fact_labels(facts)),
        },
    ).scalar_one()
    if gpus:
        conn.execute(
            insert(GpuRow),
            [
                {
                    "snapshot_id": snap_id,
                    "host_id": host.id,
                    "index": g.index,
                    "uuid": g.uuid,
                    "serial": g.serial,
                    "product_name": g.product_name,
                    "pci_bus_id": g.pci_bus_id,
                    "memory_total_mib": g.memory_total_mib,
                    "vbios": g.vbios_version,
                }
                for g in gpus
            ],
        )
    if facts.ib_ports:  # None: ibstat not collected, no rows
        conn.execute(
            insert(NicRow),
            [
                {
                    "snapshot_id": snap_id,
                    "host_id": host.id,
                    "ca": p.ca,
                    "port": p.port,
                    "state": p.state,
                    "physical_state": p.physical_state,
                    "rate_gbps": p.rate_gbps,
                    "link_layer": p.link_layer,
                }
                for p in facts.ib_ports
            ],
        )
    prev: HostFacts | None = None
    if prev_id is not None:
        prev_doc = s.scalar(select(FactSnapshot.facts).where(FactSnapshot.id == prev_id))
        prev = HostFacts.model_validate(prev_doc) if prev_doc is not None else None
    host.latest_snapshot_id = snap_id
    return snap_id, prev


@dataclass
class Duplicates:
    """What the duplicate-machine check of a group of collected hosts reads (issue 30: two
    or three queries per group instead of three per host): the enrolled hosts (not retired)
    whose latest facts hold one of the group's GPU UUIDs or DMI system UUIDs, and which of
    the group's hosts have an open ``duplicate_host`` alarm.

    Kept right while the group is stored in one transaction: what one host of it stores
    (:meth:`stored`, :meth:`alarm`) is staged, then :meth:`keep` (its savepoint was released)
    or :meth:`drop` (rolled back); a later host of the group sees the kept facts, as it would
    have read them back in the same transaction."""

    #: stored GPU UUID -> {host id: name} of the hosts whose latest snapshot has that GPU
    gpus: dict[str, dict[int, str]]
    #: DMI UUID as stored (``fact_snapshots.dmi_uuid``) -> {host id: name}
    systems: dict[str, dict[int, str]]
    #: hosts of the group with an open ``duplicate_host`` alarm
    alarmed: set[int]
    _staged: list[tuple[int, str, HostFacts | None, bool | None]] = field(default_factory=list)

    @classmethod
    def load(cls, s: Session, group: Sequence[tuple[int, HostFacts]]) -> Duplicates:
        """The index for ``group`` (host id, its fresh facts)."""
        uuids = sorted({g.uuid for _, f in group for g in f.gpus if g.uuid})
        systems = sorted({u for _, f in group if (u := system_uuid(f)) is not None})
        dup = cls({}, {}, set())
        live = (Host.state != HostState.RETIRED,)
        for k in range(0, len(uuids), 500):
            for host_id, name, uuid in s.execute(
                select(Host.id, Host.name, GpuRow.uuid)
                .join(GpuRow, GpuRow.snapshot_id == Host.latest_snapshot_id)
                .where(*live, GpuRow.uuid.in_(uuids[k : k + 500]))
            ):
                if uuid is not None:
                    dup.gpus.setdefault(uuid, {})[host_id] = name
        for k in range(0, len(systems), 500):
            for host_id, name, uuid in s.execute(
                select(Host.id, Host.name, FactSnapshot.dmi_uuid)
                .join(FactSnapshot, FactSnapshot.id == Host.latest_snapshot_id)
                .where(*live, FactSnapshot.dmi_uuid.in_(systems[k : k + 500]))
            ):
                if uuid is not None:
                    dup.systems.setdefault(uuid, {})[host_id] = name
        ids = sorted({i for i, _ in group})
        for k in range(0, len(ids), 500):
            dup.alarmed.update(
                s.scalars(
                    select(Alarm.host_id).where(
                        Alarm.host_id.in_(ids[k : k + 500]),
                        Alarm.kind == AlarmKind.DUPLICATE_HOST,
                        Alarm.closed_at.is_(None),
                    )
                )
            )
        return dup

    def gpu_duplicate_of(self, host_id: int, facts: HostFacts) -> tuple[str, list[str]] | None:
        """The earlier-enrolled host whose latest facts share GPU UUIDs with ``facts`` (the
        first enrolled when several do), and the shared UUIDs; None when there is none."""
        mine = machine_ids(facts)
        if not mine:
            return None
        shared: dict[int, tuple[str, list[str]]] = {}
        for u in {g.uuid for g in facts.gpus if g.uuid}:
            if u.strip().upper() not in mine:
                continue
            for other, name in self.gpus.get(u, {}).items():
                if other < host_id:
                    shared.setdefault(other, (name, []))[1].append(u)
        if not shared:
            return None
        name, found = shared[min(shared)]
        return name, sorted(found)

    def system_duplicate_of(self, host_id: int, facts: HostFacts) -> tuple[str, str] | None:
        """The earlier-enrolled host whose latest facts report the same DMI system UUID as
        ``facts`` (when it was collected and is no placeholder), and that UUID."""
        mine = system_uuid(facts)
        if mine is None:
            return None
        older = [i for i in self.systems.get(mine, {}) if i < host_id]
        return (self.systems[mine][min(older)], mine) if older else None

    def stored(self, host_id: int, name: str, facts: HostFacts) -> None:
        """``facts`` are the host's latest now (staged)."""
        self._staged.append((host_id, name, facts, None))

    def alarm(self, host_id: int, is_open: bool) -> None:
        """The host's duplicate alarm was raised (``is_open``) or closed (staged)."""
        self._staged.append((host_id, "", None, is_open))

    def keep(self) -> None:
        """What was staged since the last keep/drop is in the store now."""
        for host_id, name, facts, is_open in self._staged:
            if facts is not None:
                for index in (self.gpus, self.systems):
                    for holders in index.values():
                        holders.pop(host_id, None)
                for g in facts.gpus:
                    if g.uuid:
                        self.gpus.setdefault(g.uuid, {})[host_id] = name
                dmi = facts.dmi.uuid if facts.dmi is not None else None
                if dmi:
                    self.systems.setdefault(dmi.upper(), {})[host_id] = name
            elif is_open:
                self.alarmed.add(host_id)
            else:
                self.alarmed.discard(host_id)
        self._staged.clear()

    def drop(self) -> None:
        """What was staged was rolled back."""
        self._staged.clear()
