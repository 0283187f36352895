"""Vendor-neutral accelerator records and the checks validation runs on them, hand-built (the
parsers' tests use captures)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.vendors.accelerator_judge import judge

from gpufleet.collect.pci import parse_lspci
from gpufleet.domain.accelerators import (
    PCI_VENDOR_IDS,
    UNKNOWN_MODEL,
    Accelerator,
    AcceleratorInventory,
    Health,
    Link,
    LinkState,
    Vendor,
    accelerators_on_bus,
    inventory_group,
)
from gpufleet.domain.spec import ExpectedSpec


def _inv(*health: Health, vendor: Vendor = Vendor("amd")) -> AcceleratorInventory:
    accs = tuple(
        Accelerator(vendor=vendor, index=i, model="Instinct MI100", health=h)
        for i, h in enumerate(health)
    )
    return AcceleratorInventory(vendor=vendor, accelerators=accs)


def test_pci_vendor_ids() -> None:
    assert PCI_VENDOR_IDS[Vendor("huawei")] == "19e5"
    assert PCI_VENDOR_IDS[Vendor("amd")] == "1002"


def test_health_judges_only_what_a_tool_stated() -> None:
    assert judge("accelerator_health", _inv(Health.OK, Health.UNKNOWN).accelerators) == (
        "pass", "1 accelerators report health OK"
    )
    assert judge("accelerator_health", _inv(Health.UNKNOWN).accelerators)[0] == "skip"
    assert judge("accelerator_health", _inv(Health.OK, Health.WARNING).accelerators) == (
        "warn", "amd #1 warning"
    )


def test_the_count_names_vendor_and_numbers() -> None:
    accs = _inv(Health.OK, Health.OK).accelerators
    assert judge("gpu_count", accs, ExpectedSpec(gpu_count=2))[0] == "pass"
    assert judge("gpu_count", accs, ExpectedSpec(gpu_count=3)) == (
        "fail", "amd tool sees 2 accelerators, expected 3"
    )


def test_a_port_in_an_unknown_state_counts_as_not_up() -> None:
    ports = tuple(
        Accelerator(vendor=Vendor("amd"), index=i, model="Instinct MI100",
                    links=(Link("roce", None, s),))
        for i, s in enumerate([LinkState.UP, LinkState.UNKNOWN])
    )
    status, message = judge("accelerator_links", ports)
    assert (status, message) == ("fail", "roce port of amd #1 unknown")
    assert judge("accelerator_links", ports[:1])[0] == "pass"


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


def test_temperature_names_hot_devices() -> None:
    accs = tuple(
        Accelerator(vendor=Vendor("huawei"), index=i, model="910B3", temperature_c=t)
        for i, t in enumerate([43.0, 91.5, None])
    )
    assert judge("accelerator_temperature", accs, max_c=85) == (
        "fail", "huawei #1 91.5 C > 85 C"
    )
    assert judge("accelerator_temperature", accs, max_c=95)[0] == "pass"
