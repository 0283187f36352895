"""Lab models of accelerator vendors (issue 15): one module per vendor, found, not listed.

Each module ``gpufleet.lab.vendors.<name>`` (or an entry point of the group
``gpufleet.lab.vendors`` that another distribution installs, named after the vendor) has a
``LAB`` :class:`LabVendor`: the lab models of its hosts (``ModelSpec``, served by
``gpufleet lab create --model``), how such a host answers the vendor's sections of the
collection (its real captures, with the vendor's faults applied), its accelerators' PCI
addresses, the faults only its hosts show, and the hosts it adds to the mixed demo fleet.
The catalogue, the fault check, the renderers and the demo loop over these; none of them
names a vendor. A module is imported when the lab first needs the vendors (never at import).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache, partial
from typing import TYPE_CHECKING

from gpufleet.errors import ConfigError

if TYPE_CHECKING:
    from gpufleet.lab.catalogue import ModelSpec
    from gpufleet.lab.fleet import LabHost

#: An answer to one section: (stdout, stderr, exit status).
Answer = tuple[str, str, int]
ENTRY_POINT_GROUP = "gpufleet.lab.vendors"
#: The demo fleet's size from which issue 28's vendors (Hygon ... Enflame) add their hosts: one
#: each, so the 32-host ``make demo`` shows every vendor and the 8-host demo stays as it was.
DEMO_FROM = 16


def _any_argument(spec: ModelSpec, kind: str, arg: str | None) -> str | None:
    return None


@dataclass(frozen=True)
class LabVendor:
    """One vendor's lab hosts (see the module docstring).

    ``vendor``: the vendor plugin's name; ``models``: its lab models (``ModelSpec.vendor`` is
    ``vendor``); ``render``: every section of the vendor's collector as ``host`` answers it;
    ``bus_ids``: the PCI addresses of a model's accelerators, every one (lspci lists them
    even when a fault hides one from the tool); ``faults``: fault kind -> what it does, the
    kinds its hosts show; ``check_fault``: why a fault of ``faults`` with its argument does
    not apply to a model (None: it does); ``demo``: the (model, faults) hosts it adds to the
    end of the mixed demo fleet; ``demo_from``: the demo fleet's size from which they join
    (issue 28's vendors join the 32-host ``make demo``, not the 8-host one);
    ``rank``: where its models and demo hosts go among the vendors' (lower first, then by
    vendor name).
    """

    vendor: str
    models: tuple[ModelSpec, ...]
    render: Callable[[LabHost, ModelSpec], Mapping[str, Answer]]
    bus_ids: Callable[[ModelSpec], tuple[str, ...]]
    faults: Mapping[str, str] = field(default_factory=dict)
    check_fault: Callable[[ModelSpec, str, str | None], str | None] = _any_argument
    demo: tuple[tuple[str, tuple[str, ...]], ...] = ()
    demo_from: int = 8
    rank: int = 100


def _module_lab(module: str) -> object:
    return getattr(importlib.import_module(module), "LAB", None)


def _sources() -> dict[str, tuple[str, Callable[[], object]]]:
    """Vendor -> (where, loader) of its lab model: the built-in modules, then the installed
    entry points (a built-in one wins)."""
    import pkgutil
    from importlib.metadata import entry_points

    out: dict[str, tuple[str, Callable[[], object]]] = {
        m.name: (f"{__name__}.{m.name}", partial(_module_lab, f"{__name__}.{m.name}"))
        for m in pkgutil.iter_modules(__path__)
        if not m.name.startswith("_")
    }
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        out.setdefault(ep.name, (f"{ep.name} = {ep.value}", ep.load))
    return out


def _load(name: str, where: str, load: Callable[[], object]) -> LabVendor:
    try:
        found = load()
    except Exception as exc:  # a broken lab model is a configuration error naming it
        raise ConfigError(f"lab vendor {where}: cannot load: {type(exc).__name__}: {exc}") from exc
    if not isinstance(found, LabVendor):
        raise ConfigError(f"lab vendor {where}: is a {type(found).__name__}, expected LabVendor")
    if found.vendor != name:
        raise ConfigError(f"lab vendor {where}: declares vendor {found.vendor!r}, not {name!r}")
    return found


@cache
def lab_vendors() -> tuple[LabVendor, ...]:
    """Every vendor's lab model, in ``rank`` order (:class:`LabVendor`)."""
    labs = (_load(n, *src) for n, src in _sources().items())
    return tuple(sorted(labs, key=lambda lab: (lab.rank, lab.vendor)))


def lab_vendor(vendor: str) -> LabVendor | None:
    """The lab model of ``vendor`` (None: NVIDIA, the lab's own, or a vendor without one)."""
    return next((lv for lv in lab_vendors() if lv.vendor == vendor), None)


def reset() -> None:
    """Forget the lab vendors found (after one is installed at run time, in tests)."""
    lab_vendors.cache_clear()
    from gpufleet.lab import catalogue

    catalogue.vendor_specs.cache_clear()


# --------------------------------------------------------------------------- helpers


def replace_driver(text: str, pattern: str, host: LabHost) -> str:
    """The captured driver version (group 2 of ``pattern``, after group 1) replaced by the
    one a lab change installed (``LabHost.driver``, ``gpufleet lab change --driver``)."""
    import re

    if host.driver is None:
        return text
    out, n = re.subn(pattern, lambda m: m[1] + str(host.driver), text, count=1)
    if n != 1:
        raise ValueError(f"{host.name}: no driver version in the capture to replace")
    return out
