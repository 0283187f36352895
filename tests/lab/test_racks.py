"""Lab racks (issue 27 item 8): GB200 NVL72 racks of 18 trays rendered from the real GB200
tray capture (EDITED per rack and tray: tests/fixtures/captured/nvidia-smi-xml/PROVENANCE.md)
that the real collection parsers read back to the right rack, NVLink domain, partition and
tray, and whose faults give the decision table's outcome."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpufleet.collect.assemble import assemble_facts
from gpufleet.collect.bundle import split_bundle
from gpufleet.collect.transport import Outcome, Target
from gpufleet.domain.checks import CHECKS, CheckContext, CheckStatus
from gpufleet.domain.fabric import FabricOutcome, TrayPosition, host_fabric
from gpufleet.domain.facts import HostFacts
from gpufleet.domain.health import Fault
from gpufleet.errors import ConfigError
from gpufleet.lab.fleet import LabFleet, LabHost, write_inventory
from gpufleet.lab.racks import create_racks, rack_identity, tray_position
from gpufleet.lab.renderers import render_output
from gpufleet.lab.transport import SimTransport

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def facts(h: LabHost) -> HostFacts:
    return assemble_facts(split_bundle(render_output(h)), NOW, h.name)


def test_two_racks_of_eighteen_trays_parse_back_to_their_rack_domain_and_tray() -> None:
    fl = create_racks("gb200-nvl72", 2)
    assert len(fl.hosts) == 36
    assert {h.rack for h in fl.hosts} == {"nvl01", "nvl02"}
    seen: dict[str, set[str | None]] = {"nvl01": set(), "nvl02": set()}
    uuids: set[str | None] = set()
    guids: set[str | None] = set()
    positions: dict[str, list[TrayPosition | None]] = {"nvl01": [], "nvl02": []}
    for h in fl.hosts:
        f = facts(h)
        assert f.problems == [] and len(f.gpus) == 4
        hf = host_fabric(f)
        ident = rack_identity(h.rack)
        assert hf.outcome is FabricOutcome.OK, (h.name, hf.message)
        assert (hf.rack_id, hf.nvl_domain) == (ident.chassis_serial, ident.cluster_uuid)
        assert hf.partition == f"{ident.cluster_uuid}.2"
        assert h.tray is not None and hf.tray == TrayPosition(*tray_position(h.tray))
        seen[h.rack].add(hf.nvl_domain)
        positions[h.rack].append(hf.tray)
        uuids |= {g.uuid for g in f.gpus}
        guids |= {g.platform.gpu_fabric_guid for g in f.gpus if g.platform}
        assert len({g.serial for g in f.gpus}) == 4
    # one domain per rack, two racks, two domains; 144 distinct GPUs and fabric GUIDs
    assert all(len(d) == 1 for d in seen.values()) and seen["nvl01"] != seen["nvl02"]
    assert len(uuids) == 144 and len(guids) == 144
    for trays in positions.values():
        assert len(set(trays)) == 18
        # the capture's own pair: tray index 4 sits in slot 14
        assert TrayPosition(14, 4, 1) in trays


def test_a_tray_outside_a_rack_keeps_the_capture() -> None:
    f = facts(LabHost(name="solo", model="gb200-4x", serial_salt=3))
    hf = host_fabric(f)
    assert (hf.rack_id, hf.tray) == ("1820000000001", TrayPosition(14, 4, 1))
    assert hf.partition == "00000001-0000-0000-0000-000000000001.2"


@pytest.mark.parametrize("fault,outcome,reason,fault_code", [
    ("fabric-route-unhealthy", FabricOutcome.FAILS, "unhealthy", Fault.NVL_FABRIC_RACK),
    ("fabric-not-started", FabricOutcome.FAILS, "not_ready", Fault.NVL_FABRIC_FAILED),
    ("fabric-insufficient-resources", FabricOutcome.FAILS, "status", Fault.NVL_FABRIC_FAILED),
])
def test_each_fabric_fault_gives_its_decision_table_row(
    fault: str, outcome: FabricOutcome, reason: str, fault_code: Fault
) -> None:
    fl = create_racks("gb200-nvl72", 1, faults={"nvl01-t07": [fault]})
    bad = facts(fl.host("nvl01-t07"))
    hf = host_fabric(bad)
    assert (hf.outcome, hf.reasons) == (outcome, (reason,))
    assert hf.rack_scoped is (fault == "fabric-route-unhealthy")
    # still placed in its rack and tray: the rack sees which tray is at fault
    assert hf.rack_id == rack_identity("nvl01").chassis_serial
    assert hf.tray == TrayPosition(*tray_position(6))
    r = CHECKS["nvl_fabric"](bad, CheckContext(now=NOW), {})
    assert (r.status, r.fault) == (CheckStatus.FAIL, fault_code)
    good = host_fabric(facts(fl.host("nvl01-t08")))
    assert good.outcome is FabricOutcome.OK  # the other trays are untouched


def test_tray_missing_does_not_answer(tmp_path: Path) -> None:
    fl = create_racks("gb200-nvl72", 1, faults={"nvl01-t18": ["tray-missing"]})
    fl.save(tmp_path)
    sim = SimTransport(tmp_path)

    async def run(name: str) -> Outcome:
        result = await sim.run(Target(name=name, address=name), "true", 5)
        return result.outcome

    assert asyncio.run(run("nvl01-t18")) is Outcome.UNREACHABLE
    assert asyncio.run(run("nvl01-t17")) is not Outcome.UNREACHABLE


def test_rack_faults_only_on_rack_trays() -> None:
    with pytest.raises(ConfigError, match="not a rack's compute tray"):
        LabHost(name="x", model="h100-8x", faults=["fabric-route-unhealthy"], serial_salt=1)
    with pytest.raises(ConfigError, match="unknown lab rack"):
        create_racks("gb300-nvl36", 1)
    with pytest.raises(ValueError, match="one rack tray"):
        LabFleet(hosts=[LabHost(name=n, model="gb200-4x", serial_salt=s, rack="nvl01", tray=0)
                        for n, s in (("a", 1), ("b", 2))])


def test_inventory_groups_rack_trays_with_their_rack(tmp_path: Path) -> None:
    fl = create_racks("gb200-nvl72", 2)
    text = write_inventory(fl, tmp_path / "inventory.ini").read_text()
    assert "[gpu_gb200]" in text and "gpufleet_gpu_model=GB200" in text
    assert text.count("gpufleet_rack=nvl01") == 18 and text.count("gpufleet_rack=nvl02") == 18
