"""Detection by bus (issue 28): the vendor registry carries PCI vendor ids and the classes
each vendor's accelerators show as, so a host whose only accelerators are Hygon DCUs
(class Co-processor), Kunlunxin XPUs (Communication controller, vendor unknown to lspci) or
Enflame GCUs is never read as GPU-less. Real plain ``lspci`` lines
(tests/fixtures/captured/lspci/PROVENANCE.md)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpufleet.collect.pci import parse_lspci
from gpufleet.domain.accelerators import Vendor, accelerators_on_bus, unread_on_bus
from gpufleet.domain.checks import CHECKS, ActiveEvidence, CheckContext, CheckStatus
from gpufleet.domain.checks.accelerator import other_vendor_host
from gpufleet.domain.facts import FACTS_VERSION, HostFacts, PciDevice
from gpufleet.domain.spec import ExpectedSpec
from gpufleet.domain.vendors import bus_vendors, is_registered

LSPCI = Path(__file__).resolve().parents[1] / "fixtures" / "captured" / "lspci"
COLLECTED = datetime(2025, 6, 1, tzinfo=UTC)


def _pci(name: str) -> list[PciDevice]:
    return parse_lspci((LSPCI / name).read_text(), name)


def _gpu_count(pci: list[PciDevice]) -> tuple[CheckStatus, str]:
    f = HostFacts(facts_version=FACTS_VERSION, collected_at=COLLECTED, pci_devices=pci)
    ctx = CheckContext(now=COLLECTED, spec=ExpectedSpec(), evidence=ActiveEvidence.from_kinds(None))
    r = CHECKS["gpu_count"](f, ctx, {})
    return r.status, r.message


@pytest.mark.parametrize(
    ("capture", "vendor", "count"),
    [
        ("paddlenlp_dcu_install_lspci_k100ai.txt", "hygon", 2),
        ("paddlenlp_xpu_llama_lspci_r300.txt", "kunlunxin", 8),
        ("paddlenlp_gcu_llama_lspci_s60.txt", "enflame", 2),
    ],
)
def test_a_host_of_only_domestic_accelerators_is_never_gpu_less(
    capture: str, vendor: str, count: int
) -> None:
    pci = _pci(capture)
    read = {v.value: n for v, n in accelerators_on_bus(pci).items()}
    assert {**unread_on_bus(pci), **read} == {vendor: count}
    f = HostFacts(facts_version=FACTS_VERSION, collected_at=COLLECTED, pci_devices=pci)
    assert f.pci_gpus == [] and other_vendor_host(f)
    status, message = _gpu_count(pci)
    assert status is CheckStatus.FAIL
    if is_registered(vendor):  # its plugin installed (issue 28's new plugins): its tool
        assert message.startswith(f"{vendor} tool sees 0 of {count} accelerators")
    else:
        assert message == (
            f"lspci lists {count} {vendor} accelerators and no installed vendor plugin "
            "reads them"
        )
    assert "NVIDIA" not in message


def test_classes_count_only_for_their_vendor() -> None:
    # an Intel MEI and virtio consoles are "Communication controller"s too: not accelerators
    vvv = _pci("gpud_lspci-vvv.txt")
    assert any(d.class_name == "Communication controller" for d in vvv)
    assert unread_on_bus(vvv) == {}
    assert Vendor.NVIDIA in accelerators_on_bus(vvv)
    a10 = _pci("gpud_lspci.nn.a10.txt")
    assert any(d.class_id == "0780" for d in a10)
    assert unread_on_bus(a10) == {} and set(accelerators_on_bus(a10)) == {Vendor.NVIDIA}


def test_the_registry_carries_ids_and_classes() -> None:
    by_name = {v.name: v for v in bus_vendors()}
    assert (by_name["hygon"].pci_vendor_id, by_name["hygon"].classes) == (
        "1d94", ("0b40", "Co-processor"))
    assert by_name["kunlunxin"].pci_vendor_id == "1d22"
    assert by_name["enflame"].pci_vendor_id == "1e36"
    # the installed plugins' own ids stay theirs
    assert (by_name["huawei"].pci_vendor_id, by_name["amd"].pci_vendor_id) == ("19e5", "1002")
