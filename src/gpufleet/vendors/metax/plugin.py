"""The MetaX GPU vendor plugin: ``mx-smi`` (+ ``mx-smi topo -m``) -> records and labels.

What each tool gives (real captures, tests/fixtures/captured/metax/PROVENANCE.md):

* ``mx-smi`` (primary; two captured layouts, :mod:`gpufleet.vendors.metax.mx_smi`): per GPU
  its index, product name, PCI bus id, utilisation, temperature, power (and its cap from
  2.2), memory used/total, and from 2.2 the board index, persistence, performance state,
  sGPU mode and ``GPU-State``; the kernel mode driver, MACA and BIOS versions on the banner.
* ``mx-smi topo -m`` (optional: an answer that cannot be read is a named problem, never the
  host's error): the GPU x GPU link matrix; a MetaXLink (``MX``) pair becomes a ``metaxlink``
  link of both GPUs (no state: the matrix states none). ``topo -n`` (the same matrix with
  the NICs) is parsed too, not collected.

Health: ``GPU-State`` (2.2) ``Available`` is OK; any other word is an alarm naming the state
(fail closed: no capture shows another word, so none is taken for healthy); 2.1 states none
(unknown). One GPU row is one logical device; 2.2 prints the board index apart, and
:func:`physical_cards` counts distinct boards (bus ids before 2.2): every capture shows one
GPU per board.

Not shipped, for want of a real capture: ``mx-smi -L`` (no capture), the 2.2.4 layout
(named by NOTES.md, its capture is not in the fixtures: a 2.2.4 header is refused as
unknown), process rows, ECC/RAS counters, a ``GPU-State`` other than ``Available``.

Exports, following MetaX's Kubernetes conventions:

* extended resource ``metax-tech.com/gpu`` (Project-HAMi/HAMi ``pkg/device/metax/config.go``:
  the ``metax-name`` default, with ``metax-tech.com/sgpu``/``vcore``/``vmemory`` for shares;
  gpustack/runtime's manufacturer table names the same resource for PCI vendor ``9999``);
* node labels ``metax-tech.com/gpu.installed`` and ``metax-tech.com/gpu.product`` (the keys
  MetaX's GPU operator labels nodes with, as a public cluster check script reads them next to
  ``metax-tech.com/gpu``; no repository of the operator is in the index, so the product
  value is mx-smi's name, sanitised, a guess at its form);
* Slurm GRES ``gpu`` (MetaX GPUs are GPUs; containers get ``/dev/dri`` and ``/dev/mxcd``, not
  one file per GPU, so no ``File=``);
* runtime ``maca``; Ansible group ``gpu_<model>`` (``MetaX C500`` -> ``gpu_c500``,
  ``MXC550`` -> ``gpu_c550``).
"""

from __future__ import annotations

from collections.abc import Mapping

from gpufleet.domain.accelerator_exports import VendorExport
from gpufleet.domain.accelerators import (
    UNKNOWN_MODEL,
    Accelerator,
    AcceleratorInventory,
    Health,
    Link,
    SoftwareVersions,
)
from gpufleet.domain.labels import sanitize_label_value
from gpufleet.domain.vendors import (
    Vendor,
    VendorCollector,
    VendorInspector,
    VendorPlugin,
    VendorSection,
)
from gpufleet.errors import ParseError
from gpufleet.vendors.metax.mx_smi import (
    MX_SMI,
    MX_SMI_TOPO,
    MxSmi,
    MxTopo,
    parse_mx_smi,
    parse_mx_smi_topo,
)

METAX = Vendor("metax")
PCI_VENDOR_ID = "9999"  # gpustack/runtime's manufacturer -> PCI vendor id table
RESOURCE = "metax-tech.com/gpu"
INSTALLED_LABEL = "metax-tech.com/gpu.installed"
PRODUCT_LABEL = "metax-tech.com/gpu.product"
AVAILABLE = "Available"
LINK_KIND = "metaxlink"

SECTIONS: Mapping[str, tuple[str, str]] = {
    "mx_smi": ("mx-smi", ""),
    "mx_smi_topo": ("mx-smi", "topo -m"),
}


def _model(name: str) -> str:
    """The model without the brand: ``MetaX C500`` -> ``C500``, ``MXC550`` -> ``C550``."""
    rest = name.strip()
    if rest.upper().startswith("METAX "):
        return rest[6:].strip()
    if rest.upper().startswith("MX") and len(rest) > 2 and rest[2].isalpha():
        return rest[2:]
    return rest


def _links(topo: MxTopo | None, index: int) -> tuple[Link, ...]:
    if topo is None:
        return ()
    me = f"GPU{index}"
    return tuple(
        Link(LINK_KIND, str(topo.gpu_index(b)))
        for (a, b), code in sorted(topo.links.items())
        if a == me and code == "MX" and topo.gpu_index(b) is not None
    )


def to_inventory(smi: MxSmi, topo: MxTopo | None = None) -> AcceleratorInventory:
    """One :class:`Accelerator` per GPU row; the topology's MetaXLink pairs as links
    (:class:`ParseError` when its GPUs are not mx-smi's)."""
    if topo is not None:
        gpus = {i for d in topo.devices if (i := topo.gpu_index(d)) is not None}
        if gpus != {g.index for g in smi.gpus}:
            mine = sorted(g.index for g in smi.gpus)
            raise ParseError(MX_SMI_TOPO, f"lists GPUs {sorted(gpus)}, mx-smi {mine}")
    accs = []
    for g in smi.gpus:
        codes: tuple[str, ...] = ()
        if g.state is None:
            health = Health.UNKNOWN
        elif g.state == AVAILABLE:
            health = Health.OK
        else:
            health, codes = Health.ALARM, (f"GPU-State {g.state}",)
        accs.append(
            Accelerator(
                vendor=METAX,
                index=g.index,
                model=_model(g.name) or UNKNOWN_MODEL,
                bus_id=g.bus_id,
                memory_total_mib=g.memory_total_mib,
                memory_used_mib=g.memory_used_mib,
                health=health,
                error_codes=codes,
                temperature_c=float(g.temperature_c),
                power_w=float(g.power_w),
                power_limit_w=None if g.power_cap_w is None else float(g.power_cap_w),
                firmware={"BIOS": smi.bios},
                links=_links(topo, g.index),
                product_name=g.name,
            )
        )
    return AcceleratorInventory(
        vendor=METAX,
        accelerators=tuple(accs),
        versions=SoftwareVersions(
            driver=smi.driver, firmware=smi.bios, runtime=smi.maca, tool=smi.version
        ),
    )


def parse_sections(outputs: Mapping[str, str]) -> AcceleratorInventory:
    """The inventory from the sections that answered (``mx_smi`` is required)."""
    if "mx_smi" not in outputs:
        raise ParseError(MX_SMI, "section missing from the collection")
    smi = parse_mx_smi(outputs["mx_smi"])
    topo_text = outputs.get("mx_smi_topo")
    topo = None if not topo_text or not topo_text.strip() else parse_mx_smi_topo(topo_text)
    return to_inventory(smi, topo)


def physical_cards(inventory: AcceleratorInventory) -> int:
    """The boards: distinct bus ids (2.2 prints a board index per GPU; one GPU per board in
    every capture, each on its own bus id)."""
    return len({a.bus_id or f"#{a.index}" for a in inventory.accelerators})


def labels(inventory: AcceleratorInventory) -> dict[str, str]:
    """``metax-tech.com/gpu.installed`` and, when the GPUs agree on one name, ``.product``."""
    if not inventory.accelerators:
        return {}
    out = {INSTALLED_LABEL: "true"}
    names = {a.product_name or a.model for a in inventory.accelerators}
    if len(names) == 1:
        out[PRODUCT_LABEL] = sanitize_label_value("_".join(names.pop().split()))
    return out


def group(model: str) -> str | None:
    """``gpu_<model>``: ``C500`` -> ``gpu_c500`` (the brand dropped)."""
    from gpufleet.domain.ansible import group_name  # ansible imports the facts

    rest = _model(model)
    return group_name("gpu", rest) if rest else None


def _resource(_: AcceleratorInventory) -> str:
    return RESOURCE


def _section(name: str) -> VendorSection:
    tool, args = SECTIONS[name]
    return VendorSection(name, f"$TO {tool} {args}".rstrip(), tool=tool, args=args)


COLLECTOR = VendorCollector(
    vendor=METAX,
    tool="mx-smi",
    primary="mx_smi",
    sections=tuple(_section(n) for n in SECTIONS),
    read=parse_sections,
    optional=("mx_smi_topo",),
)

#: The inspection probe asks mx-smi's table (temperature, power, memory, GPU-State): the
#: topology adds links, not state.
INSPECTOR = VendorInspector(
    vendor=METAX,
    primary="mx_smi",
    inspect_sections=COLLECTOR.sections[:1],
    parse_inspect=parse_sections,
)

PLUGIN = VendorPlugin(
    name=METAX,
    pci_vendor_id=PCI_VENDOR_ID,
    lspci_name="MetaX Integrated Circuits",
    exports=VendorExport(labels=labels, resource=_resource, gres_name="gpu", runtime="maca"),
    collector=COLLECTOR,
    group=group,
    description="MetaX GPUs",
    inspector=INSPECTOR,
)
