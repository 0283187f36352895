"""Issue 30: a facts document is encoded once, in C (orjson), and read back the same.

The content hash keeps the bytes it always hashed (the standard library's sorted, compact
text): stored snapshots' hashes still match the same facts. The snapshot's ``facts`` is
written as the text encoded once, on both databases, and reads back equal to the facts
collected; every other JSON value is written by the standard library as before.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from gpufleet.collect.assemble import assemble_facts
from gpufleet.collect.bundle import render_bundle, split_bundle
from gpufleet.domain.facts import HostFacts
from gpufleet.domain.telemetry import stable_view
from gpufleet.lab.catalogue import MODELS
from gpufleet.lab.demo import enroll_lab
from gpufleet.lab.fleet import LabHost
from gpufleet.lab.renderers import render_sections
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.collect import collect
from gpufleet.service.hosts.fact_snapshots import encode_facts, facts_digest
from gpufleet.store.table_types import EncodedJson, json_serializer
from gpufleet.store.tables import FactSnapshot, Host

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def _stdlib_digest(doc: dict[str, Any]) -> str:
    """The content hash as every stored snapshot has it (the standard library's text)."""
    text = json.dumps(stable_view(doc), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def _facts(model: str) -> HostFacts:
    secs = render_sections(LabHost(name="h", model=model, serial_salt=3))
    return assemble_facts(split_bundle(render_bundle(list(secs.values()))), NOW, "h")


@pytest.mark.parametrize("model", sorted(MODELS))
def test_digest_and_text_of_every_lab_model(model: str) -> None:
    doc = _facts(model).model_dump(mode="json")
    assert facts_digest(doc) == _stdlib_digest(doc)
    encoded = encode_facts(doc)
    assert json_serializer(encoded) == encoded.text
    assert json.loads(encoded.text) == doc == dict(encoded)


def test_unicode_and_escapes_hash_as_the_standard_library() -> None:
    doc = {"b": "\x00\x1f\x7f\u2028é😀\"\\/", "a": [1, 2.5, -0.0, 1e16, None, True], "c": {}}
    assert facts_digest(doc) == _stdlib_digest(doc)
    big = {"count": 2**70}  # orjson refuses it: the standard library encodes that document
    assert facts_digest(big) == _stdlib_digest(big)
    assert json.loads(json_serializer(encode_facts(big))) == big


def test_other_values_are_written_by_the_standard_library() -> None:
    value = {"x": [1, "é"], "y": None}
    assert json_serializer(value) == json.dumps(value)
    assert json_serializer(EncodedJson(value, '{"x":[1,"é"],"y":null}')) == '{"x":[1,"é"],"y":null}'


def test_collected_facts_read_back_as_collected(fleet: Fleet, tmp_path: Path) -> None:
    enroll_lab(fleet, tmp_path / "lab", 2, models=["a100-8x", "h100-8x"], faults={})
    for _ in range(2):  # a first collection (insert), then an unchanged one (update)
        rep = collect(fleet)
        assert rep.counts == {"ok": 2}
        with fleet.db.session() as s:
            rows = s.execute(
                select(FactSnapshot.facts, FactSnapshot.content_hash).join(
                    Host, Host.latest_snapshot_id == FactSnapshot.id
                )
            ).all()
        assert len(rows) == 2
        for doc, digest in rows:
            facts = HostFacts.model_validate(doc)
            assert facts.model_dump(mode="json") == doc
            assert len(facts.gpus) == 8
            assert digest == _stdlib_digest(doc)
