"""Pure BMC decisions: SEL since the last read, identity and health cross-checks, the
NotReady runbook's first step. Readings are mapped from the DMTF public-tower mockup files."""

from __future__ import annotations

import json

from tests.bmc.redfishlab import TOWER

from gpufleet.domain.bmc import (
    BmcGpu,
    BmcIdentity,
    BmcOutcome,
    BmcReading,
    InBand,
    SelEntry,
    diagnose,
    health_findings,
    identity_findings,
    new_sel_entries,
)
from gpufleet.domain.events import AlarmKind, CollectionOutcome

SYSTEM = json.loads((TOWER / "Systems" / "437XR1238R2" / "index.json").read_text())


def tower(**changes: object) -> BmcReading:
    data = {
        "system_id": SYSTEM["Id"],
        "identity": BmcIdentity(manufacturer=SYSTEM["Manufacturer"], model=SYSTEM["Model"],
                                serial=SYSTEM["SerialNumber"], uuid=SYSTEM["UUID"],
                                bios_version=SYSTEM["BiosVersion"]),
        "power_state": SYSTEM["PowerState"],
        "health": SYSTEM["Status"]["Health"],
        "health_rollup": SYSTEM["Status"]["HealthRollup"],
        "gpus": [BmcGpu(id="GPU1", serial="1320221012345")],
        "sel": [],
    }
    data.update(changes)
    return BmcReading.model_validate(data)


def entry(key: str, severity: str = "Critical") -> SelEntry:
    return SelEntry(key=key, severity=severity, message="Temperature threshold exceeded")


def test_sel_since_the_last_read() -> None:
    entries = [entry("System:1:Log1/1"), entry("System:1:Log1/2")]
    assert new_sel_entries(entries, []) == entries
    assert new_sel_entries(entries, ["System:1:Log1/1"]) == entries[1:]
    assert new_sel_entries(entries, ["System:1:Log1/1", "System:1:Log1/2"]) == []


def test_identity_matches_or_names_both_sides() -> None:
    ok = identity_findings("gpu-01", tower(), InBand(serial="437xr1238r2", uuid=SYSTEM["UUID"]))
    assert [(f.kind, f.open) for f in ok] == [(AlarmKind.BMC_IDENTITY, False)]
    bad = identity_findings("gpu-07", tower(), InBand(serial="SN-7"))
    assert bad[0].open and "inventory says serial SN-7, the BMC says 437XR1238R2" in bad[0].message
    moved = identity_findings("gpu-01", tower(), InBand(pinned=BmcIdentity(serial="OTHER")))
    assert moved[0].open and "was OTHER, it is now 437XR1238R2" in moved[0].message
    gpus = identity_findings("gpu-01", tower(), InBand(gpu_serials=frozenset({"999"})))
    assert gpus[0].open and "GPU serials" in gpus[0].message
    # nothing to compare: no alarm (and no pretend match from missing data either side)
    blind = identity_findings("gpu-01", tower(identity=BmcIdentity()), InBand(serial="SN-7"))
    assert not blind[0].open


def test_health_critical_and_new_critical_sel_open_alarms() -> None:
    crit = health_findings("h", tower(health_rollup="Critical"), [])
    assert [(f.kind, f.open) for f in crit] == [(AlarmKind.BMC_HEALTH, True)]
    ok = health_findings("h", tower(), [entry("a", "OK"), entry("b", "Warning")])
    assert [(f.kind, f.open) for f in ok] == [(AlarmKind.BMC_HEALTH, False)]
    sel = health_findings("h", tower(), [entry("a"), entry("b")])
    assert sel[-1].kind is AlarmKind.BMC_SEL and "(+1 more)" in sel[-1].message
    unknown = health_findings("h", tower(health=None, health_rollup=None), [])
    assert unknown == []  # the BMC said nothing: the alarm is neither opened nor closed


def test_ssh_down_described_by_the_bmc() -> None:
    down = CollectionOutcome.UNREACHABLE
    assert diagnose(CollectionOutcome.OK, BmcOutcome.OK, tower()) is None
    assert "On, health OK" in (diagnose(down, BmcOutcome.OK, tower()) or "")
    assert "power Off" in (diagnose(down, BmcOutcome.OK, tower(power_state="Off")) or "")
    assert "hardware fault" in (
        diagnose(CollectionOutcome.TIMEOUT, BmcOutcome.OK, tower(health_rollup="Critical")) or "")
    assert "BMC unreachable" in (diagnose(down, BmcOutcome.UNREACHABLE, None) or "")
