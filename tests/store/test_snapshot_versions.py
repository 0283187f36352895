"""Fact snapshots stored in an older format stay readable through the store, on SQLite and
PostgreSQL: the upgraders (domain/facts_upgrade.py) run on read, the stored JSON is never
rewritten. A version-1 snapshot (before ``facts_version``) is read fail closed; a simulated
format 3 that renames a field reads version-2 history through a registered upgrader."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import select

from gpufleet.domain.facts import FACTS_VERSION, FactsFormat, HostFacts
from gpufleet.domain.facts_upgrade import UPGRADERS
from gpufleet.lab.demo import enroll_lab
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.collect import collect
from gpufleet.service.hosts.validate import validate
from gpufleet.service.views.hosts import show_host
from gpufleet.store.repo import host_by_name
from gpufleet.store.tables import FactSnapshot


def _collected(fleet: Fleet, tmp_path: Path) -> None:
    enroll_lab(fleet, tmp_path / "lab", 2, models=["a100-8x"], faults={})
    assert {r.outcome.value for r in collect(fleet).results} == {"ok"}


def _store_as_old_code(fleet: Fleet, host: str, old: dict[str, Any]) -> None:
    """Replace the host's latest snapshot JSON with what an older gpufleet wrote."""
    with fleet.db.session() as s:
        h = host_by_name(s, host)
        snap = s.get_one(FactSnapshot, h.latest_snapshot_id)
        snap.facts = old


def _stored(fleet: Fleet, host: str) -> dict[str, Any]:
    with fleet.db.session() as s:
        h = host_by_name(s, host)
        return dict(s.scalars(select(FactSnapshot.facts).where(
            FactSnapshot.id == h.latest_snapshot_id)).one())


def test_a_version_one_snapshot_is_read_fail_closed(fleet: Fleet, tmp_path: Path) -> None:
    _collected(fleet, tmp_path)
    good = show_host(fleet, "gpu-01").facts
    assert good is not None and good.xids == [] and good.facts_version == FACTS_VERSION
    # As gpufleet wrote it before facts_version: no version key, a failed dmesg stored as [].
    old = _stored(fleet, "gpu-01")
    del old["facts_version"]
    _store_as_old_code(fleet, "gpu-01", old)

    read = show_host(fleet, "gpu-01").facts
    assert read is not None and read.facts_version == FACTS_VERSION
    assert read.xids is None  # [] may have been a failed dmesg: not collected
    assert read.gpus == good.gpus and read.hostname == good.hostname
    assert "facts_version" not in _stored(fleet, "gpu-01")  # history is not rewritten
    # Validation reads the same snapshot: no Xid evidence, so the host is not made available.
    verdicts = {v.host: v for v in validate(fleet, collect_first=False).verdicts}
    assert verdicts["gpu-02"].state == "available"
    assert verdicts["gpu-01"].state != "available"


def test_a_renamed_field_is_read_through_its_upgrader(fleet: Fleet, tmp_path: Path) -> None:
    _collected(fleet, tmp_path)
    before = show_host(fleet, "gpu-02").facts
    assert before is not None and before.hostname
    version2 = _stored(fleet, "gpu-02")
    # Simulated: the next format calls the current one's ``host_name`` ``hostname``. Current
    # history, as this gpufleet would have written it under the old name:
    version2["host_name"] = version2.pop("hostname")
    _store_as_old_code(fleet, "gpu-02", version2)

    def rename(d: dict[str, Any]) -> dict[str, Any]:
        if "host_name" in d:
            d["hostname"] = d.pop("host_name")
        return d

    # The next format, injected as the read's validation context (FactsFormat): the stored
    # history, as the database gives it back, is read through the registered upgrader.
    following = FactsFormat(FACTS_VERSION + 1, UPGRADERS | {FACTS_VERSION: rename})
    read = HostFacts.model_validate(_stored(fleet, "gpu-02"), context=following)
    assert read.facts_version == FACTS_VERSION + 1
    assert read.hostname == before.hostname and read.gpus == before.gpus
    assert _stored(fleet, "gpu-02")["host_name"] == before.hostname  # stored as it was
    untouched = HostFacts.model_validate(_stored(fleet, "gpu-01"), context=following)
    assert untouched.hostname == show_host(fleet, "gpu-01").facts.hostname  # type: ignore[union-attr]
