"""Tests for ``lspci`` parsing and the GPU / Mellanox counters."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.collect.pci import (
    count_mellanox,
    count_nvidia_gpus,
    normalize_pci_address,
    parse_lspci,
)
from gpufleet.domain.facts import PciDevice
from gpufleet.errors import ParseError

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "captured" / "lspci"


def _read(name: str) -> str:
    return (FIX / name).read_text()


def test_nn_with_domains_a100_vm() -> None:
    devs = parse_lspci(_read("gpud_lspci.nn.a100.txt"))
    assert len(devs) == 31
    assert devs[0] == PciDevice(
        address="0001:00:00.0",
        class_name="3D controller",
        class_id="0302",
        vendor_id="10de",
        device_id="20b2",
        description="NVIDIA Corporation GA100 [A100 SXM4 80GB]",
    )
    gpus = [d for d in devs if (d.vendor_id, d.device_id) == ("10de", "20b2")]
    assert [d.address for d in gpus] == [
        "0001:00:00.0", "0002:00:00.0", "0003:00:00.0", "0004:00:00.0",
        "000b:00:00.0", "000c:00:00.0", "000d:00:00.0", "000e:00:00.0",
    ]
    assert count_nvidia_gpus(devs) == 8
    # 8 ConnectX-6 VFs (Infiniband, 15b3:101c) + 1 ConnectX-4 Lx VF (Ethernet, 15b3:1016).
    assert count_mellanox(devs) == 9
    bridges = [d for d in devs if d.device_id == "1af1"]
    assert len(bridges) == 6 and all(d.class_id == "0680" for d in bridges)
    cx4 = next(d for d in devs if d.device_id == "1016")
    assert cx4.address == "c941:00:02.0"
    assert cx4.description == (
        "Mellanox Technologies MT27710 Family [ConnectX-4 Lx Virtual Function]"
    )


def test_nn_without_domain_a10_vm() -> None:
    devs = parse_lspci(_read("gpud_lspci.nn.a10.txt"))
    assert len(devs) == 20
    assert all(d.address.startswith("0000:") for d in devs)
    a10 = next(d for d in devs if d.vendor_id == "10de")
    assert (a10.address, a10.device_id, a10.class_id) == ("0000:06:00.0", "2236", "0302")
    assert a10.description == "NVIDIA Corporation GA102GL [A10]"
    assert count_nvidia_gpus(devs) == 1
    assert count_mellanox(devs) == 1  # the mlx5Gen VF, class 0200
    virtio_gpu = devs[1]
    assert (virtio_gpu.class_name, virtio_gpu.vendor_id) == ("VGA compatible controller", "1af4")


def test_plain_lspci_with_domains_gb200() -> None:
    devs = parse_lspci(_read("gpud_lspci.gb200.txt"))
    assert len(devs) == 87
    assert all(d.class_id is None and d.vendor_id is None for d in devs)
    gpus = [d for d in devs if d.class_name == "3D controller"]
    assert len(gpus) == 4
    assert all(d.description == "NVIDIA Corporation Device 2941" for d in gpus)
    assert count_nvidia_gpus(devs) == 4
    # 4 ConnectX-7 Infiniband + 2x2 BlueField-3 Ethernet functions; DMA/bridges excluded.
    assert count_mellanox(devs) == 8
    assert devs[0].address == "0000:00:00.0"
    assert devs[0].description == "NVIDIA Corporation Device 22b2"


def test_vvv_headers_only() -> None:
    devs = parse_lspci(_read("gpud_lspci-vvv.txt"), "lspci -vvv")
    assert len(devs) == 517
    h100 = [d for d in devs if d.class_name == "3D controller"]
    assert [d.address for d in h100] == [
        "0000:19:00.0", "0000:3b:00.0", "0000:4c:00.0", "0000:5d:00.0",
        "0000:9b:00.0", "0000:bb:00.0", "0000:cb:00.0", "0000:db:00.0",
    ]
    assert h100[0].description == "NVIDIA Corporation Device 2330"
    assert h100[0].vendor_id is None and h100[0].device_id is None
    assert count_nvidia_gpus(devs) == 8
    # 8 ConnectX-7 + 2 dual-port ConnectX-6 Dx (4 functions).
    assert count_mellanox(devs) == 12
    nvswitch = [d for d in devs if d.description == "NVIDIA Corporation Device 22a3"]
    assert len(nvswitch) == 4 and all(d.class_name == "Bridge" for d in nvswitch)
    # (prog-if ...) and (rev ...) are not part of the description.
    xhci = next(d for d in devs if d.address == "0000:00:14.0")
    assert (xhci.class_name, xhci.description) == (
        "USB controller", "Intel Corporation Device 1bcd"
    )
    # A class printed with its id even without -nn.
    generic = next(d for d in devs if d.address == "0000:00:00.4")
    assert (generic.class_name, generic.class_id) == ("Generic system peripheral", "0807")


def test_address_normalisation() -> None:
    assert normalize_pci_address("19:00.0") == "0000:19:00.0"
    assert normalize_pci_address("0000:19:00.0") == "0000:19:00.0"
    assert normalize_pci_address("00000000:9B:00.0") == "0000:9b:00.0"
    assert normalize_pci_address("10000:e0:17.0") == "10000:e0:17.0"
    line = (
        "0000:19:00.0 3D controller [0302]: NVIDIA Corporation GH100 [H100 SXM5 80GB] "
        "[10de:2330] (rev a1)"
    )
    dev = parse_lspci(line)[0]
    assert (dev.address, dev.device_id, dev.description) == (
        "0000:19:00.0", "2330", "NVIDIA Corporation GH100 [H100 SXM5 80GB]",
    )


def test_garbage_raises_with_source_and_line() -> None:
    text = _read("gpud_lspci.nn.a10.txt").splitlines()
    text.insert(3, "pcilib: Cannot open /sys/bus/pci/devices")
    with pytest.raises(ParseError) as err:
        parse_lspci("\n".join(text), "h1:lspci-nn")
    assert (err.value.source, err.value.line) == ("h1:lspci-nn", 4)


def test_truncated_line_raises() -> None:
    with pytest.raises(ParseError) as err:
        parse_lspci("00:00.0 Host bridge [0600]: Intel\n06:00.0 3D contr")
    assert err.value.line == 2


def test_empty_output_is_no_devices() -> None:
    assert parse_lspci("") == []
