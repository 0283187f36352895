"""Reading the vendor sections of a collection into the facts' accelerator section (pure).

For each vendor plugin's collector (:func:`gpufleet.domain.vendors.collectors`): when its
primary section answered (rc 0, output), its reader builds the vendor's records and
versions; a reader's :class:`ParseError` or a tool that is missing or failing is an error
for that vendor *if* ``lspci`` lists the vendor's accelerators (fail closed: the host has the
hardware and nothing vouches for it), and nothing on a host of another vendor (rc 127 is the
normal answer there). An unreadable *optional* section (:attr:`VendorCollector.optional`) is a
problem naming it, and the rest of the vendor's inventory stands. An error is also kept when
the tool answered garbage on a host whose ``lspci`` was not collected.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpufleet.collect.bundle import Section
from gpufleet.domain.accelerators import (
    Accelerator,
    SoftwareVersions,
    Vendor,
    accelerators_on_bus,
)
from gpufleet.domain.facts import PciDevice
from gpufleet.domain.vendors import VendorCollector, collectors, plugin, read_sections
from gpufleet.errors import ParseError

#: The facts fields the accelerator section fills.
FIELDS = ("accelerators", "accelerator_versions", "accelerator_errors")

_NOT_FOUND_RC = 127


def empty() -> dict[str, Any]:
    """The fields when no vendor tool was read."""
    return {"accelerators": (), "accelerator_versions": {}, "accelerator_errors": {}}


def _first_line(text: str) -> str:
    return next((ln.strip()[:200] for ln in text.splitlines() if ln.strip()), "")


def read_accelerators(
    sections: Mapping[str, Section],
    pci_devices: Sequence[PciDevice] | None,
    host: str,
    problems: list[str],
    vendors: Sequence[VendorCollector] | None = None,
) -> dict[str, Any]:
    """The accelerator fields of ``host``'s facts from its vendor sections (module doc);
    ``vendors``: the collectors to read (None: every vendor plugin's)."""
    on_bus = accelerators_on_bus(pci_devices) if pci_devices is not None else None
    accs: list[Accelerator] = []
    versions: dict[Vendor, SoftwareVersions] = {}
    errors: dict[Vendor, str] = {}
    for c in collectors() if vendors is None else vendors:
        bus = (on_bus or {}).get(c.vendor, 0)
        where = f"lspci lists {bus} {plugin(c.vendor).pci_vendor_id} accelerators"
        primary = sections.get(c.primary)
        if primary is None or primary.rc != 0 or not primary.stdout.strip():
            if bus:
                if primary is None:
                    why = f"{c.tool} was not run"
                elif primary.rc == _NOT_FOUND_RC:
                    why = f"{c.tool} not found (driver not installed?)"
                elif primary.rc != 0:
                    detail = _first_line(primary.stderr) or _first_line(primary.stdout)
                    why = f"{c.tool} failed (rc={primary.rc}): {detail or 'no output'}"
                else:
                    why = f"{c.tool} printed nothing"
                errors[c.vendor] = f"{why}; {where}"
            continue
        outputs = {
            s.name: sec.stdout
            for s in c.sections
            if (sec := sections.get(s.name)) is not None and sec.rc == 0
        }
        for s in c.sections:
            sec = sections.get(s.name)
            if sec is None:
                problems.append(f"{s.name}: section missing from collection output")
            elif sec.rc not in (0, _NOT_FOUND_RC):
                problems.append(f"{s.name}: exited {sec.rc}: {_first_line(sec.stderr)}")
        try:
            inventory, unreadable = read_sections(c, outputs)
        except ParseError as exc:
            errors[c.vendor] = f"{host}:{exc}"
            continue
        problems.extend(f"{host}: {p}" for p in unreadable)
        accs.extend(inventory.accelerators)
        versions[c.vendor] = inventory.versions
    return {
        "accelerators": tuple(accs),
        "accelerator_versions": versions,
        "accelerator_errors": errors,
    }
