"""AMD values a held-out check found wrong (issue 28): ROCm 6.x's current socket power, and
the node labeller's product name and VRAM rounding (ROCm/k8s-device-plugin
``cmd/k8s-node-labeller/main.go``)."""

from __future__ import annotations

from pathlib import Path

from gpufleet.domain.accelerators import Accelerator, AcceleratorInventory
from gpufleet.vendors.amd import plugin as amd
from gpufleet.vendors.amd.rocm_smi import parse_rocm_smi_json

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "captured" / "amd"


def _inventory(name: str) -> AcceleratorInventory:
    return amd.parse_sections({"rocm_smi_json": (FIX / name).read_text()})


def test_rocm6_current_socket_power_is_the_power() -> None:
    # EDITED copy of the gpustack ROCm 6.2.4 capture: the one power key renamed to the
    # label rocm-smi 6.x prints for a card reporting its current socket power
    name = "gpustack_amd-gpu-6.2.4-rocm-smi.current-socket-power.EDITED.json"
    smi = parse_rocm_smi_json((FIX / name).read_text(), source=name)
    assert smi.cards[0].power_average_w == 53.0
    acc = _inventory(name).accelerators[0]
    assert acc.power_w == 53.0
    # the unedited capture reads the same through the older key
    assert _inventory("gpustack_amd-gpu-6.2.4-rocm-smi.json").accelerators[0].power_w == 53.0


def test_product_name_is_the_full_name_the_labeller_reads() -> None:
    r6 = _inventory("wandb_gpu_amd_test_rocm-smi_rocm6_mi250.json")
    assert r6.accelerators[0].product_name == "AMD INSTINCT MI250 (MCM) OAM AC MBA"
    assert amd.labels(r6)["amd.com/gpu.product-name"] == "AMD_INSTINCT_MI250_MCM_OAM_AC_MBA"
    r5 = _inventory("wandb_gpu_amd_test_rocm-smi_rocm5_mi250.json")
    assert amd.labels(r5)["amd.com/gpu.product-name"] == "AMD_INSTINCT_MI250_MCM_OAM_AC_MBA"
    # the model (groups, GRES) keeps its short form
    assert r6.accelerators[0].model == "INSTINCT MI250"


def test_pci_ids_series_uses_libdrm_name_like_the_labeller() -> None:
    # "Arcturus GL-XL [Instinct MI100]" is the pci.ids name: the board exposes no
    # product_name, so the labeller reads libdrm's amdgpu.ids entry for 738c
    for name in ("telegraf_mi100_rocm571.json", "telegraf_mi100_rocm602.json"):
        labels = amd.labels(_inventory(name))
        assert labels["amd.com/gpu.product-name"] == "AMD_Instinct_MI100"
    # a consumer card whose id is not in the table: no guess, no label
    navi = amd.labels(_inventory("telegraf_rx6700xt_rocm602.json"))
    assert "amd.com/gpu.product-name" not in navi
    assert navi["amd.com/gpu.vram"] == "12G"  # 12868124672 B = 12272 MiB


def test_vram_rounds_half_up_as_go_does() -> None:
    base = _inventory("telegraf_mi100_rocm602.json").accelerators[0]

    def vram(mib: int) -> str:
        acc = Accelerator(vendor=base.vendor, index=0, model=base.model, memory_total_mib=mib)
        inv = AcceleratorInventory(vendor=base.vendor, accelerators=(acc,))
        return amd.labels(inv)["amd.com/gpu.vram"]

    assert vram(512) == "1G"  # Python's round(0.5) is 0
    assert vram(2560) == "3G"  # round(2.5) is 2 in Python, 3 in Go
    assert vram(511) == "0G"
    assert vram(32752) == "32G"  # the MI100's 34342961152 B


def test_a_hygon_dcu_in_dtk_rocm_smi_is_not_an_amd_gpu() -> None:
    """DTK's rocm-smi on a Hygon host lists the DCUs as ``cardN`` with ``Card Vendor``
    ``Chengdu Haiguang IC Design Co., Ltd.`` (the real gpustack capture): AMD's plugin must not
    count them (before: one AMD GPU 'DCU xxxx' on a Hygon host); AMD's own cards still count,
    whether rocm-smi names the vendor or prints its raw id (0x1002, ROCm 4.3)."""
    hygon = FIX.parent / "hygon" / "gpustack_hygon-gpu-24.04.3-rocm-smi.json"
    assert '"Chengdu Haiguang IC Design Co., Ltd."' in hygon.read_text()
    assert parse_rocm_smi_json(hygon.read_text()).cards == ()
    assert len(parse_rocm_smi_json((FIX / "telegraf_rx6700xt_rocm430.json").read_text()).cards) == 1
