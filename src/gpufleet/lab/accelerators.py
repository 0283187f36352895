"""Lab hosts of other accelerator vendors (issue 15): their answers to the vendor sections.

Every host answers every vendor section of the collection (each vendor plugin's collector,
:func:`gpufleet.domain.vendors.collectors`): a vendor's own hosts as its lab model renders them
(:mod:`gpufleet.lab.vendors`: its real captures, its faults applied), all others as the script
does where the tool is not installed (rc 127). No vendor is named here.
"""

from __future__ import annotations

from gpufleet.domain.vendors import collectors
from gpufleet.lab.catalogue import ModelSpec
from gpufleet.lab.fleet import LabHost
from gpufleet.lab.vendors import Answer, lab_vendor

_NOT_FOUND_RC = 127


def vendor_answers_names() -> tuple[str, ...]:
    """The vendor sections of the collection, in script order."""
    return tuple(s.name for c in collectors() for s in c.sections)


def _not_installed() -> dict[str, Answer]:
    """What the script prints where no vendor tool is installed (fails at the tool)."""
    out: dict[str, Answer] = {}
    for c in collectors():
        for s in c.sections:
            out[s.name] = (
                ("", "", _NOT_FOUND_RC)
                if s.files
                else ("", f"sh: 1: {c.tool}: not found", _NOT_FOUND_RC)
            )
    return out


def vendor_answers(host: LabHost, spec: ModelSpec) -> dict[str, Answer]:
    """Every vendor section as ``host`` answers it."""
    out = _not_installed()
    lab = lab_vendor(spec.vendor)
    if lab is not None:
        out.update(lab.render(host, spec))
    return out


def vendor_lspci(spec: ModelSpec) -> list[str]:
    """``lspci -nn -D`` lines of the host's accelerators (every one, seen by the tool or not)."""
    lab = lab_vendor(spec.vendor)
    if lab is None:
        raise ValueError(f"lab model {spec.name}: no lab model of vendor {spec.vendor!r}")
    return [f"{b.lower()} {spec.pci_gpu}" for b in lab.bus_ids(spec)]
