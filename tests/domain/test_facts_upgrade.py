"""The fact snapshot upgrader registry (pure): stored versions are brought to FACTS_VERSION in
order before validation; the legacy rule is the 1 -> 2 upgrader; a gap is refused."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from gpufleet.domain.facts import FACTS_VERSION, FactsFormat, HostFacts
from gpufleet.domain.facts_upgrade import (
    LEGACY_FACTS_VERSION,
    UPGRADERS,
    stored_version,
    upgrade_facts,
)
from gpufleet.testing import make_facts

LISTS = ("xids", "ib_ports", "pci_devices", "block_devices")


def test_every_older_version_has_an_upgrader_to_the_current_one() -> None:
    assert set(UPGRADERS) == set(range(LEGACY_FACTS_VERSION, FACTS_VERSION))


def test_the_legacy_rule_is_the_one_to_two_upgrader() -> None:
    old: dict[str, Any] = {"collected_at": "2024-11-15T12:00:00Z", "xids": [], "ib_ports": [],
                           "pci_devices": [], "block_devices": [], "problems": [],
                           "modules": []}
    assert stored_version(old) == LEGACY_FACTS_VERSION
    up = upgrade_facts(old, 2)
    assert up["facts_version"] == 2
    assert all(up[k] is None for k in LISTS)
    assert up["modules"] == [] and up["problems"] == []  # only the four "collected?" lists
    assert "facts_version" not in old  # the stored dict is left as it was
    # A non-empty list was a complete parse then too: kept.
    kept = upgrade_facts({**old, "block_devices": [{"name": "nvme0n1"}]}, 2)
    assert kept["block_devices"] == [{"name": "nvme0n1"}] and kept["xids"] is None


def test_upgraders_run_in_order_from_the_stored_version() -> None:
    seen: list[int] = []

    def step(n: int) -> Any:
        def up(d: dict[str, Any]) -> dict[str, Any]:
            assert d.get("facts_version", 1) == n  # each sees the previous one's result
            seen.append(n)
            return {**d, "trail": [*d.get("trail", []), n]}
        return up

    chain = {1: step(1), 2: step(2), 3: step(3)}
    assert upgrade_facts({"facts_version": 2}, 4, chain) == {"facts_version": 4, "trail": [2, 3]}
    assert seen == [2, 3]
    assert upgrade_facts({}, 4, chain)["trail"] == [1, 2, 3]
    current = {"facts_version": 4, "x": 1}
    assert upgrade_facts(current, 4, chain) is current  # nothing to do: unchanged


def test_a_missing_upgrader_or_a_bad_version_is_refused() -> None:
    with pytest.raises(ValueError, match=r"facts_version 2: no upgrader to version 3"):
        upgrade_facts({"facts_version": 2}, 4, {1: dict, 3: dict})
    with pytest.raises(ValueError, match="not a whole number"):
        upgrade_facts({"facts_version": "2"}, 4)
    with pytest.raises(ValidationError, match="facts_version 0: no upgrader"):
        HostFacts.model_validate({"facts_version": 0, "collected_at": "2024-11-15T12:00:00Z"})


def test_host_facts_reads_a_renamed_field_through_a_registered_upgrader() -> None:
    """A simulated next format renames ``hostname`` (stored by the current one as
    ``host_name``)."""
    clean = make_facts()
    stored = clean.model_dump(mode="json")
    stored["host_name"] = stored.pop("hostname")
    cur = FACTS_VERSION
    assert stored["facts_version"] == cur == 3
    with pytest.raises(ValidationError, match=f"facts_version {cur}: no upgrader to version 4"):
        # no upgrader yet: refused, never half-read
        HostFacts.model_validate(stored, context=FactsFormat(cur + 1))

    def rename(d: dict[str, Any]) -> dict[str, Any]:
        if "host_name" in d:
            d["hostname"] = d.pop("host_name")
        return d

    f = HostFacts.model_validate(stored, context=FactsFormat(cur + 1, UPGRADERS | {cur: rename}))
    assert f.hostname == clean.hostname == "gpu-node-01" and f.facts_version == cur + 1
    assert f.gpus == clean.gpus
