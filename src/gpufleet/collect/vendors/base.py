"""What a vendor plugin hands the collection: its sections and how to read them (pure).

A :class:`VendorCollector` names the vendor, the sections the collection script runs for it
(each a :class:`VendorSection`: its ``sh`` command and what a lab host fakes to serve it),
the section that must answer for the vendor's tool to count as present, and the reader that
turns the sections' outputs into an :class:`~gpufleet.domain.accelerators.AcceleratorInventory`
(raising :class:`~gpufleet.errors.ParseError` naming the command). The collection registry
(``collect/sections.py``) derives its entries from :data:`gpufleet.collect.vendors.registry.
COLLECTORS`; nothing else in the collection names a vendor.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gpufleet.domain.accelerators import AcceleratorInventory, Vendor


@dataclass(frozen=True, slots=True)
class VendorSection:
    """One section of a vendor: ``command`` follows ``sec NAME`` in the script."""

    name: str
    command: str
    tool: str | None = None  # the program run (what a lab host fakes)
    args: str = ""
    files: tuple[str, ...] = ()  # files read under the sysroot (what a lab host writes)
    functions: str = ""  # sh function definitions the command needs (once per vendor)


@dataclass(frozen=True, slots=True)
class VendorCollector:
    """A vendor's part of the collection (see the module docstring)."""

    vendor: Vendor
    tool: str  # the vendor's tool, named when it is missing on a host that has the hardware
    primary: str  # section whose answer (rc 0, output) means the tool is there
    sections: tuple[VendorSection, ...]
    read: Callable[[Mapping[str, str]], AcceleratorInventory]
