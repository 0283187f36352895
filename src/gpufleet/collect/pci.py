"""Parser for ``lspci`` device lines (``-nn``, ``-D``, plain, or the headers of ``-vvv``).

Only non-indented lines are device headers; the indented detail lines of ``-vvv`` are
skipped. Without ``-nn`` the class and vendor:device ids are absent and stay None.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from gpufleet.collect.fit import build
from gpufleet.domain.accelerators import normalize_pci_address as normalize_pci_address
from gpufleet.domain.facts import PciDevice
from gpufleet.errors import ParseError

NVIDIA_VENDOR_ID = "10de"
MELLANOX_VENDOR_ID = "15b3"

_HEADER = re.compile(
    r"^(?:(?P<domain>[0-9a-fA-F]{4,8}):)?(?P<bdf>[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+"
    r"(?P<class>[^:\[]+?)(?:\s+\[(?P<class_id>[0-9a-fA-F]{4})\])?:\s+(?P<rest>.+)$"
)
# Stripped from the end of the description, in this order (lspci prints them that way).
_PROG_IF = re.compile(r"\s+\(prog-if [0-9a-fA-F]{2}(?: \[[^\]]*\])?\)$")
_REV = re.compile(r"\s+\(rev [0-9a-fA-F]{2}\)$")
_IDS = re.compile(r"\s+\[(?P<vendor>[0-9a-fA-F]{4}):(?P<device>[0-9a-fA-F]{4})\]$")

# Without -nn only names are printed; these fall-backs let the counters work on plain lspci.
_GPU_CLASS_NAMES = {"VGA compatible controller", "3D controller", "Display controller"}
_NIC_CLASS_NAMES = {"Ethernet controller", "Infiniband controller", "Network controller"}


#: A device line as printed -> its (frozen, so shareable) device, for the lines read before:
#: every host of a model prints the same ones. Only lines that parsed are kept; emptied
#: past 4096 entries.
_MEMO: dict[str, PciDevice] = {}


def parse_lspci(text: str, source: str = "lspci -nn") -> list[PciDevice]:
    """Parse ``lspci [-nn] [-D] [-vvv]`` output into one :class:`PciDevice` per function.

    The description keeps vendor and device names but drops ``[vvvv:dddd]``, ``(rev xx)``
    and ``(prog-if ...)``. Empty output gives an empty list.
    """
    devices: list[PciDevice] = []
    memo = _MEMO
    if len(memo) > 4096:
        memo.clear()
    for lineno, raw in enumerate(text.splitlines(), start=1):
        known = memo.get(raw)
        if known is not None:
            devices.append(known)
            continue
        if not raw.strip() or raw[:1].isspace():
            continue  # blank, or a -vvv detail line
        m = _HEADER.match(raw.rstrip())
        if m is None:
            raise ParseError(source, f"not an lspci device line: {raw.strip()[:80]!r}", line=lineno)
        rest = _PROG_IF.sub("", m.group("rest"))
        rest = _REV.sub("", rest)
        ids = _IDS.search(rest)
        if ids:
            rest = rest[: ids.start()]
        domain = m.group("domain") or "0000"
        devices.append(
            memo.setdefault(
                raw,
                build(
                    PciDevice,
                    source,
                    line=lineno,
                    address=normalize_pci_address(f"{domain}:{m.group('bdf')}"),
                    class_name=m.group("class").strip(),
                    class_id=m.group("class_id").lower() if m.group("class_id") else None,
                    vendor_id=ids.group("vendor").lower() if ids else None,
                    device_id=ids.group("device").lower() if ids else None,
                    description=rest.strip(),
                ),
            )
        )
    return devices


def _is_vendor(dev: PciDevice, vendor_id: str, vendor_name: str) -> bool:
    if dev.vendor_id is not None:
        return dev.vendor_id == vendor_id
    return dev.description.startswith(vendor_name)


def count_nvidia_gpus(devices: Iterable[PciDevice]) -> int:
    """NVIDIA display/3D controllers (vendor 10de, class 03xx); NVSwitch bridges excluded."""
    n = 0
    for dev in devices:
        if not _is_vendor(dev, NVIDIA_VENDOR_ID, "NVIDIA"):
            continue
        if dev.class_id is not None:
            n += dev.class_id.startswith("03")
        else:
            n += dev.class_name in _GPU_CLASS_NAMES
    return n


def count_mellanox(devices: Iterable[PciDevice]) -> int:
    """Mellanox/NVIDIA-networking NIC functions (vendor 15b3, class 02xx).

    Counts PCI functions (a dual-port card is 2, each VF is 1); the ConnectX PCIe bridges and
    BlueField management/DMA functions are excluded.
    """
    n = 0
    for dev in devices:
        if not _is_vendor(dev, MELLANOX_VENDOR_ID, "Mellanox"):
            continue
        if dev.class_id is not None:
            n += dev.class_id.startswith("02")
        else:
            n += dev.class_name in _NIC_CLASS_NAMES
    return n
