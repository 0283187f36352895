"""Accelerator vendors and their plugins (issue 15): all gpufleet knows of a vendor is one
:class:`VendorPlugin`, found by discovery; no module of the product names a vendor.

A plugin declares its vendor's name, PCI vendor id and ``lspci`` vendor name, its part of the
collection (:class:`VendorCollector`: the sections the collection script runs, the section
that tells the tool is there, the reader turning their outputs into an
:class:`~gpufleet.domain.accelerators.AcceleratorInventory`), the Ansible group of a model
(``npu_910b``, ``gpu_mi100``) and its conventions for the exports
(:class:`~gpufleet.domain.accelerator_exports.VendorExport`: node labels, extended resource,
Slurm GRES name and ``File=``, runtime name). Everything in it is pure.

Plugins are discovered, never listed:

* built in: every module or package ``gpufleet.vendors.<name>`` (``nvidia``, ``huawei``,
  ``amd``), whose ``PLUGIN`` is the vendor called ``<name>``;
* installed by another distribution: an entry point of the group ``gpufleet.vendors``, named
  after the vendor, naming its plugin (``acme = "acme_gpufleet.plugin:PLUGIN"``).

Names are discovered without importing a plugin (a directory listing; the entry points'
metadata only when a name is not built in), and a plugin is imported on its first lookup, so a
host of one vendor loads only that vendor's plugin. :class:`Vendor` is such a name: making one
of a name no plugin registers raises :class:`ValueError` (stored facts naming a vendor whose
plugin is gone do not load: fail closed). NVIDIA's plugin describes it like the others; its
GPUs still come from ``nvidia-smi`` (``HostFacts.gpus``), so it brings no collector.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from gpufleet.errors import ConfigError, ParseError

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

    from pydantic import GetCoreSchemaHandler
    from pydantic_core import CoreSchema

    from gpufleet.domain.accelerator_exports import VendorExport
    from gpufleet.domain.accelerators import AcceleratorInventory
    from gpufleet.domain.fault_catalogue import FaultCatalogue

#: The package whose modules are the built-in plugins (one per vendor, named after it).
BUILTIN_PACKAGE = "gpufleet.vendors"
#: The entry point group of the plugins other distributions install.
ENTRY_POINT_GROUP = "gpufleet.vendors"
_NVIDIA = "nvidia"


class Vendor(str):
    """An accelerator vendor: the name its plugin registers (``nvidia``, ``huawei``, ``amd``).

    A string (facts store it as one); made only of a registered name (:class:`ValueError`
    otherwise), one instance per name. ``Vendor.NVIDIA`` is the vendor of ``nvidia-smi``'s
    GPUs, the one the core special-cases."""

    __slots__ = ()
    NVIDIA: ClassVar[Vendor]
    _interned: ClassVar[dict[str, Vendor]] = {}

    def __new__(cls, name: str) -> Vendor:
        known = cls._interned.get(name)
        if known is not None:
            return known
        if not isinstance(name, str) or not is_registered(name):
            raise ValueError(
                f"{name!r} is not an accelerator vendor of an installed plugin "
                f"(known: {', '.join(vendor_names())})"
            )
        made = super().__new__(cls, name)
        cls._interned[str(name)] = made
        return made

    @property
    def value(self) -> str:
        """The name as a plain string."""
        return str.__str__(self)

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        """Facts validate a stored vendor name into a :class:`Vendor` and store the string."""
        from pydantic_core import core_schema

        return core_schema.no_info_after_validator_function(
            cls, core_schema.str_schema(), serialization=core_schema.to_string_ser_schema()
        )


@dataclass(frozen=True, slots=True)
class VendorSection:
    """One section of a vendor: ``command`` follows ``sec NAME`` in the collection script."""

    name: str
    command: str
    tool: str | None = None  # the program run (what a lab host fakes)
    args: str = ""
    files: tuple[str, ...] = ()  # files read under the sysroot (what a lab host writes)
    functions: str = ""  # sh function definitions the command needs (once per vendor)


@dataclass(frozen=True, slots=True)
class VendorCollector:
    """A vendor's part of the collection: the sections the script runs for it, the section
    whose answer (rc 0, output) means its tool is there, and the reader of their outputs
    (raising :class:`~gpufleet.errors.ParseError` naming the command)."""

    vendor: Vendor
    tool: str  # the vendor's tool, named when it is missing on a host that has the hardware
    primary: str
    sections: tuple[VendorSection, ...]
    read: Callable[[Mapping[str, str]], AcceleratorInventory]
    #: Sections whose answer only adds detail (ports, counters, topology): one the reader
    #: cannot read is a named problem and the inventory is read without it
    #: (:func:`read_sections`), never the vendor's error.
    optional: tuple[str, ...] = ()


def read_sections(
    collector: VendorCollector, outputs: Mapping[str, str]
) -> tuple[AcceleratorInventory, list[str]]:
    """``collector.read(outputs)``; when that raises, the required sections are read alone
    (their :class:`~gpufleet.errors.ParseError` is the vendor's error) and each optional
    section is added back in turn: one that makes the reader fail is left out and named in the
    problems returned (``hccn_link_stat: unreadable, left out: <the reader's error>``)."""
    try:
        return collector.read(outputs), []
    except ParseError:
        optional = [s for s in collector.optional if s in outputs]
        if not optional:
            raise
    kept = {k: v for k, v in outputs.items() if k not in optional}
    inventory = collector.read(kept)
    problems: list[str] = []
    for name in optional:
        try:
            inventory = collector.read({**kept, name: outputs[name]})
        except ParseError as exc:
            problems.append(f"{name}: unreadable, left out: {exc}")
        else:
            kept[name] = outputs[name]
    return inventory, problems


@dataclass(frozen=True, slots=True)
class VendorInspector:
    """A vendor's part of the inspection probe (``gpufleet inspect``, issue 24): the sections
    the probe runs on the vendor's hosts (``inspect_sections``, each framed
    ``@@probe <vendor>.<name>`` with its exit status), the one whose failure means the tool
    cannot be asked at all (``primary``), and the reader of their outputs (``parse_inspect``:
    the outputs of the sections that exited 0, by name -> the vendor's records, raising
    :class:`~gpufleet.errors.ParseError` naming the command). What the records mean for
    health is vendor-neutral (:mod:`gpufleet.domain.device_health`)."""

    vendor: Vendor
    primary: str
    inspect_sections: tuple[VendorSection, ...]
    parse_inspect: Callable[[Mapping[str, str]], AcceleratorInventory]


def gpu_group(model: str) -> str | None:
    """The Ansible group of a GPU model: ``gpu_<model>`` (``gpu_h800``, ``gpu_mi300x``)."""
    from gpufleet.domain.ansible import gpu_model, group_name  # ansible imports the facts

    short = gpu_model(model)
    return None if short is None else group_name("gpu", short)


@dataclass(frozen=True)
class VendorPlugin:
    """Everything gpufleet knows of one accelerator vendor (see the module docstring).

    ``name``: the vendor (the plugin module's / entry point's name); ``pci_vendor_id``: its PCI
    vendor id as ``lspci -nn`` prints it (lower-case hex, ``19e5``); ``lspci_name``: the start
    of its vendor name in plain ``lspci`` (``Huawei Technologies``); ``exports``: its
    conventions for labels, resources, GRES and runtime; ``collector``: its part of the
    collection (None: collected by the core, NVIDIA); ``group``: the Ansible group of a host
    whose accelerators are all of one model (None: no group for that model);
    ``description``: what the vendor's accelerators are, for people (``Ascend NPUs``);
    ``inspector``: its part of the inspection probe (None: inspected by the core, NVIDIA);
    ``pci_classes``: the other PCI classes its accelerators show as (:class:`PciVendor`);
    ``faults``: the loader of its fault catalogue (:mod:`gpufleet.domain.fault_catalogue`:
    the vendor's error codes -> handling level, severity, action and the vendor's text; called
    on first use, never at import; None: its codes are judged by the health rules alone).
    """

    name: Vendor
    pci_vendor_id: str
    lspci_name: str
    exports: VendorExport
    collector: VendorCollector | None = None
    group: Callable[[str], str | None] = gpu_group
    description: str = ""
    inspector: VendorInspector | None = None
    #: PCI classes its accelerators show as besides the display / 3D / processing-accelerator
    #: ones, by id (``0b40``) and lspci name (``Co-processor``): Hygon DCUs are co-processors.
    pci_classes: tuple[str, ...] = ()
    faults: Callable[[], FaultCatalogue] | None = None

    def __post_init__(self) -> None:
        if self.collector is not None and self.collector.vendor != self.name:
            theirs = self.collector.vendor
            raise ValueError(f"vendor plugin {self.name}: its collector is {theirs}'s")
        if self.inspector is not None and self.inspector.vendor != self.name:
            theirs = self.inspector.vendor
            raise ValueError(f"vendor plugin {self.name}: its inspector is {theirs}'s")


# --------------------------------------------------------------------------- discovery

_loaded: dict[str, VendorPlugin] = {}


@cache
def _builtin_names() -> frozenset[str]:
    """The built-in plugins' names: the modules and packages of :data:`BUILTIN_PACKAGE`
    (listed, none imported; a directory listing rather than pkgutil, whose import costs the
    start-up of ``gpufleet labels HOST`` a millisecond)."""
    package = importlib.import_module(BUILTIN_PACKAGE)
    names: set[str] = set()
    for folder in package.__path__:
        with os.scandir(folder) as entries:
            for e in entries:
                if e.name.startswith(("_", ".")):
                    continue
                if e.is_file() and e.name.endswith(".py"):
                    names.add(e.name.removesuffix(".py"))
                elif e.is_dir() and os.path.isfile(os.path.join(e.path, "__init__.py")):
                    names.add(e.name)
    return frozenset(names)


@cache
def _entry_points() -> dict[str, EntryPoint]:
    """The installed plugins' entry points by vendor name (read once, when needed)."""
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def is_registered(name: str) -> bool:
    """``name`` is a vendor a plugin registers (entry points read only when not built in)."""
    return name == _NVIDIA or name in _builtin_names() or name in _entry_points()


def vendor_names() -> tuple[str, ...]:
    """Every registered vendor, sorted (nothing imported)."""
    return tuple(sorted({_NVIDIA} | _builtin_names() | set(_entry_points())))


def _load(name: str) -> VendorPlugin:
    ep = None if name in _builtin_names() else _entry_points()[name]
    where = f"{BUILTIN_PACKAGE}.{name}" if ep is None else f"{ep.name} = {ep.value}"
    try:
        found = getattr(importlib.import_module(where), "PLUGIN", None) if ep is None else ep.load()
    except Exception as exc:  # a broken plugin is a configuration error naming it
        raise ConfigError(
            f"vendor plugin {where}: cannot load: {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(found, VendorPlugin):
        raise ConfigError(
            f"vendor plugin {where}: is a {type(found).__name__}, expected "
            "gpufleet.domain.vendors.VendorPlugin (as PLUGIN)"
        )
    if found.name != name:
        raise ConfigError(f"vendor plugin {where}: declares vendor {found.name!r}, not {name!r}")
    return found


def plugin(name: str) -> VendorPlugin:
    """The plugin of vendor ``name``, imported on first use; :class:`KeyError` for a name no
    plugin registers, :class:`~gpufleet.errors.ConfigError` for a plugin that is broken."""
    found = _loaded.get(name)
    if found is None:
        if not is_registered(name):
            raise KeyError(name)
        found = _loaded[name] = _load(name)
    return found


def plugins() -> tuple[VendorPlugin, ...]:
    """Every registered plugin (all imported), in vendor name order."""
    return tuple(plugin(n) for n in vendor_names())


def collectors() -> tuple[VendorCollector, ...]:
    """The vendors' parts of the collection, in vendor name order (the script's order)."""
    return tuple(p.collector for p in plugins() if p.collector is not None)


def reset() -> None:
    """Forget what discovery found (after a plugin is installed or removed at run time)."""
    _builtin_names.cache_clear()
    _entry_points.cache_clear()
    _loaded.clear()
    for name in [n for n in Vendor._interned if not is_registered(n)]:
        del Vendor._interned[name]  # the vendors still registered keep their one instance


_T = TypeVar("_T")


class PluginView(Mapping[Vendor, _T]):
    """A read-only mapping vendor -> one thing of its plugin (``PCI_VENDOR_IDS``, the exports),
    importing a plugin only when its vendor is looked up."""

    def __init__(self, get: Callable[[VendorPlugin], _T]) -> None:
        self._get = get

    def __getitem__(self, vendor: Vendor) -> _T:
        return self._get(plugin(vendor))

    def __iter__(self) -> Iterator[Vendor]:
        return (Vendor(n) for n in vendor_names())

    def __len__(self) -> int:
        return len(vendor_names())

    def __contains__(self, vendor: object) -> bool:
        return isinstance(vendor, str) and is_registered(vendor)


Vendor.NVIDIA = Vendor(_NVIDIA)


# --------------------------------------------------------------------------- the PCI bus


@dataclass(frozen=True, slots=True)
class PciVendor:
    """An accelerator vendor as ``lspci`` shows it: its PCI vendor id (``lspci -nn``, or
    ``Device 1d22:3684`` when lspci's database lacks the vendor), the start of its name in
    plain ``lspci`` (None: not attested) and the PCI classes its accelerators show as besides
    the display / 3D / processing-accelerator ones (id and lspci name)."""

    name: str
    pci_vendor_id: str
    lspci_name: str | None
    classes: tuple[str, ...] = ()


#: Accelerator vendors recognised on the bus whether or not their plugin is installed, from
#: real ``lspci`` lines (../shared/fixtures/{hygon,kunlunxin,enflame}): a host with only
#: their functions is theirs, never GPU-less. A plugin of the same name supplies its own
#: id and name; its ``pci_classes``, when it declares none, come from here.
PCI_ACCELERATOR_VENDORS: tuple[PciVendor, ...] = (
    # "37:00.0 Co-processor: Chengdu Haiguang IC Design Co., Ltd. Device 6210 (rev 01)"
    PciVendor("hygon", "1d94", "Chengdu Haiguang IC Design", ("0b40", "Co-processor")),
    # "53:00.0 Communication controller: Device 1d22:3684" (R300)
    PciVendor("kunlunxin", "1d22", None, ("0780", "Communication controller")),
    # "01:00.0 Processing accelerators: Shanghai Enflame Technology Co. Ltd S60 [Enflame]"
    PciVendor("enflame", "1e36", "Shanghai Enflame Technology"),
)


def bus_vendors() -> tuple[PciVendor, ...]:
    """Every installed plugin's identity on the bus, then the vendors of
    :data:`PCI_ACCELERATOR_VENDORS` no plugin registers (their names are not
    :class:`Vendor` values: no plugin reads them)."""
    table = {v.name: v for v in PCI_ACCELERATOR_VENDORS}
    out: list[PciVendor] = []
    for p in plugins():
        known = table.pop(p.name.value, None)
        classes = p.pci_classes or (known.classes if known is not None else ())
        out.append(PciVendor(p.name.value, p.pci_vendor_id, p.lspci_name, classes))
    return (*out, *table.values())
