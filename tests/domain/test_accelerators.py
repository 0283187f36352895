"""Vendor-neutral accelerator checks on hand-built records (the parsers' tests use captures)."""

from __future__ import annotations

from gpufleet.domain.accelerators import (
    PCI_VENDOR_IDS,
    Accelerator,
    AcceleratorInventory,
    Health,
    LinkState,
    Vendor,
    count_check,
    health_check,
    links_check,
    pci_count_check,
)


def _inv(*health: Health, vendor: Vendor = Vendor.AMD) -> AcceleratorInventory:
    accs = tuple(
        Accelerator(vendor=vendor, index=i, model="Instinct MI100", health=h)
        for i, h in enumerate(health)
    )
    return AcceleratorInventory(vendor=vendor, accelerators=accs)


def test_pci_vendor_ids() -> None:
    assert PCI_VENDOR_IDS[Vendor.HUAWEI] == "19e5"
    assert PCI_VENDOR_IDS[Vendor.AMD] == "1002"


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
