"""A collection's facts as the host's latest snapshot: the content hash (:func:`facts_digest`)
and the write of a snapshot with its GPU and NIC rows, or of its new readings only (moved out
of :mod:`gpufleet.service.hosts.collect`, which stores every collected host's facts with it)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import orjson
from sqlalchemy import insert, select, update
from sqlalchemy.orm import Session

from gpufleet.domain.facts import HostFacts
from gpufleet.domain.labels import fact_labels
from gpufleet.domain.snapshot_columns import derived_columns
from gpufleet.domain.telemetry import stable_view
from gpufleet.store.repo import label_set_id
from gpufleet.store.table_types import EncodedJson
from gpufleet.store.tables import FactSnapshot, GpuRow, Host, NicRow


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


def store_facts(
    s: Session, host: Host, run_id: int, facts: HostFacts
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
    Otherwise one snapshot row and its
    GPU and NIC rows are inserted in bulk (Core ``executemany``, no ORM unit of work); its
    labels' facts are referenced by their shared set (:func:`~gpufleet.store.repo.label_set_id`).
    """
    raw_doc = facts.model_dump(mode="json")
    digest = facts_digest(raw_doc)
    doc = encode_facts(raw_doc)
    prev_id = host.latest_snapshot_id
    if prev_id is not None:
        prev_hash = s.scalar(select(FactSnapshot.content_hash).where(FactSnapshot.id == prev_id))
        if prev_hash == digest:
            s.execute(update(FactSnapshot).where(FactSnapshot.id == prev_id).values(facts=doc))
            return prev_id, None
    gpus = facts.gpus
    derived = derived_columns(facts)
    dmi_uuid = facts.dmi.uuid if facts.dmi is not None else None
    snap_id = s.execute(
        insert(FactSnapshot).returning(FactSnapshot.id),
        [
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
            }
        ],
    ).scalar_one()
    if gpus:
        s.execute(
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
        s.execute(
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
