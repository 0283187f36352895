"""Vendor-neutral accelerator checks on hand-built records (the parsers' tests use captures)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.collect.pci import parse_lspci
from gpufleet.domain.accelerators import (
    PCI_VENDOR_IDS,
    UNKNOWN_MODEL,
    Accelerator,
    AcceleratorInventory,
    Health,
    LinkState,
    Vendor,
    accelerators_on_bus,
    count_check,
    health_check,
    inventory_group,
    links_check,
    pci_count_check,
    temperature_check,
)


def _inv(*health: Health, vendor: Vendor = Vendor("amd")) -> AcceleratorInventory:
    accs = tuple(
        Accelerator(vendor=vendor, index=i, model="Instinct MI100", health=h)
        for i, h in enumerate(health)
    )
    return AcceleratorInventory(vendor=vendor, accelerators=accs)


def test_pci_vendor_ids() -> None:
    assert PCI_VENDOR_IDS[Vendor("huawei")] == "19e5"
    assert PCI_VENDOR_IDS[Vendor("amd")] == "1002"


def test_unknown_health_is_not_ok() -> None:
    result = health_check(_inv(Health.OK, Health.UNKNOWN))
    assert (result.ok, result.reason) == (False, "#1 unknown")
    assert health_check(_inv(Health.OK, Health.OK)).ok
    assert health_check(_inv()).ok  # nothing to judge; the count check catches "none"


def test_count_checks_name_vendor_and_numbers() -> None:
    inv = _inv(Health.OK, Health.OK)
    assert count_check(inv, 2).ok
    assert count_check(_inv(), 8).reason == "amd tool reports 0, expected 8"
    r = pci_count_check(inv, 3)
    assert (r.ok, r.reason) == (False, "lspci lists 3 1002 devices, the vendor tool reports 2")
    assert pci_count_check(inv, 2).ok


def test_links_unknown_counts_as_not_up() -> None:
    r = links_check({0: LinkState.UP, 1: LinkState.UNKNOWN})
    assert (r.ok, r.reason) == (False, "port of #1 unknown")
    assert links_check({}).ok


LSPCI = Path(__file__).resolve().parents[1] / "fixtures" / "captured" / "lspci"
ASCEND = Path(__file__).resolve().parents[1] / "fixtures" / "captured" / "ascend"


def test_vendor_from_lspci_captures() -> None:
    # 8x H100 with NVSwitch bridges (class 0680, not counted) and ConnectX NICs
    assert accelerators_on_bus(parse_lspci((LSPCI / "gpud_lspci-vvv.txt").read_text())) == {
        Vendor.NVIDIA: 8
    }
    # plain lspci (no ids) of a GB200 tray: 4 "3D controller" functions by NVIDIA's name
    gb200 = parse_lspci((LSPCI / "gpud_lspci.gb200.txt").read_text())
    assert accelerators_on_bus(gb200) == {Vendor.NVIDIA: 4}
    # the Ascend bundle's "lspci | grep acce": 8 Huawei processing accelerators
    text = (ASCEND / "mind-cluster_kg_parse_npu_info_before.txt").read_text()
    lines = [ln for ln in text.splitlines() if "Processing accelerators" in ln]
    assert accelerators_on_bus(parse_lspci("\n".join(lines))) == {Vendor("huawei"): 8}
    assert accelerators_on_bus([]) == {}


@pytest.mark.parametrize(
    ("vendor", "models", "group"),
    [
        (Vendor("huawei"), ["910B3"], "npu_910b"),
        (Vendor("huawei"), ["910A"], "npu_910a"),
        (Vendor("huawei"), ["310P3"], "npu_310p"),
        (Vendor("huawei"), ["xxx"], None),
        (Vendor("amd"), ["Instinct MI100"], "gpu_mi100"),
        (Vendor("amd"), ["AMD Instinct MI300X"], "gpu_mi300x"),
        (Vendor.NVIDIA, ["NVIDIA H800"], "gpu_h800"),
        (Vendor("amd"), ["Instinct MI100", "INSTINCT MI250"], None),
        (Vendor("amd"), [UNKNOWN_MODEL], None),
        (Vendor("amd"), [], None),
    ],
)
def test_inventory_group(vendor: Vendor, models: list[str], group: str | None) -> None:
    accs = tuple(Accelerator(vendor=vendor, index=i, model=m) for i, m in enumerate(models))
    assert inventory_group(AcceleratorInventory(vendor=vendor, accelerators=accs)) == group


def test_temperature_check_names_hot_devices() -> None:
    accs = tuple(
        Accelerator(vendor=Vendor("huawei"), index=i, model="910B3", temperature_c=t)
        for i, t in enumerate([43.0, 91.5, None])
    )
    inv = AcceleratorInventory(vendor=Vendor("huawei"), accelerators=accs)
    r = temperature_check(inv, 85)
    assert (r.ok, r.reason) == (False, "#1 91.5 C > 85 C")
    assert temperature_check(inv, 95).ok
