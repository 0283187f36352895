"""The Hygon DCU vendor plugin: ``hy-smi`` (+ DTK ``rocm-smi --json``) -> records and labels.

What each tool gives (real captures, tests/fixtures/captured/hygon/PROVENANCE.md):

* ``hy-smi`` (primary; four header versions, :mod:`gpufleet.vendors.hygon.hy_smi`): the
  logical devices by index, temperature, average power and its cap, VRAM in use (%),
  utilisation (%), ``Perf`` and ``Mode``. No model, serial, bus id, error or version.
* DTK ``rocm-smi --json`` (optional: a host whose rocm-smi fails, is missing or answers what
  cannot be read still reads, the answer named in the problems): per card the PCI device id,
  product name (``Card Series``), serial, unique id and VRAM in MiB, merged onto hy-smi's
  devices by index; the two tools must list the same indices.

One DCU is one PCI function and one logical device (no dual-die or partition layout appears
in any capture), so the count per physical card and per logical device are the same.
Not shipped, for want of a real capture: driver, firmware, VBIOS and DTK versions
(``hy-smi --showdriverversion``, ``--showfwinfo``), bus ids (``--showbus``), ECC/RAS counts,
``hy-smi`` JSON output. hy-smi states no health: the records' health is unknown (as AMD's);
a DCU the tool no longer lists is what the checks see (fewer devices than lspci).

Exports, following the Kubernetes conventions of Hygon DCUs:

* extended resource ``hygon.com/dcu`` (the DCU device plugin's; gpustack/runtime maps
  ``ManufacturerHygon`` to it in its manufacturer -> resource table, and HAMi's vDCU
  scheduler, Project-HAMi/HAMi ``pkg/device/hygon/device.go``, names its own resources
  ``hygon.com/dcunum``/``dcumem``/``dcucores`` beside it); the device plugin hands a container
  ``/dev/kfd``, ``/dev/mkfd`` and the DCU's ``/dev/dri`` nodes
  (Project-HAMi/dcu-vgpu-device-plugin ``internal/pkg/dcu/server.go``);
* node label ``hygon.com/dcu.name`` (the product name; the key schedulers select DCU nodes by,
  next to ``hygon.com/dcu``) when the cards agree on a known name (hy-smi names none);
* Slurm GRES ``dcu`` (``--gres=dcu:4``, typed ``dcu:<model>:8``, as Hygon DCU clusters name
  it), no ``File=`` (the render nodes are not in hy-smi's report);
* runtime ``dtk``; Ansible group ``dcu_<model>`` (``dcu_k100_ai``).
"""

from __future__ import annotations

from collections.abc import Mapping

from gpufleet.domain.accelerator_exports import VendorExport
from gpufleet.domain.accelerators import (
    UNKNOWN_MODEL,
    Accelerator,
    AcceleratorInventory,
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
from gpufleet.vendors.hygon.hy_smi import (
    HY_SMI,
    ROCM_SMI_JSON,
    DtkCard,
    HySmi,
    parse_hy_smi,
    parse_rocm_smi_dtk_json,
)

HYGON = Vendor("hygon")
PCI_VENDOR_ID = "1d94"  # PCI_VENDOR_ID_HYGON in Linux's include/linux/pci_ids.h
RESOURCE = "hygon.com/dcu"
NAME_LABEL = "hygon.com/dcu.name"

#: Section name -> the tool's arguments (gpustack's detector asks DTK's rocm-smi these).
SECTIONS: Mapping[str, tuple[str, str]] = {
    "hy_smi": ("hy-smi", ""),
    "hygon_rocm_smi_json": (
        "rocm-smi",
        "-i --showmeminfo vram --showpower --showserial --showuse --showtemp "
        "--showproductname --showuniqueid --json",
    ),
}


def to_inventory(smi: HySmi, cards: tuple[DtkCard, ...] | None = None) -> AcceleratorInventory:
    """One :class:`Accelerator` per hy-smi row; DTK rocm-smi's cards (when read) add the
    identity and memory (:class:`ParseError` when the two tools list other indices)."""
    by_index = {c.index: c for c in cards or ()}
    if cards is not None and set(by_index) != {d.index for d in smi.devices}:
        raise ParseError(
            ROCM_SMI_JSON,
            f"lists cards {sorted(by_index)}, hy-smi lists {smi.device_word} "
            f"{sorted(d.index for d in smi.devices)}",
        )
    accs = []
    for d in smi.devices:
        c = by_index.get(d.index)
        accs.append(
            Accelerator(
                vendor=HYGON,
                index=d.index,
                model=(c.series if c is not None and c.series else UNKNOWN_MODEL),
                pci_device_id=None if c is None else c.device_id,
                serial=None if c is None else c.serial,
                uuid=None if c is None else c.unique_id,
                memory_total_mib=None if c is None else c.vram_total_mib,
                memory_used_mib=None if c is None else c.vram_used_mib,
                temperature_c=d.temperature_c,
                power_w=d.power_w,
                power_limit_w=d.power_cap_w,
            )
        )
    return AcceleratorInventory(
        vendor=HYGON, accelerators=tuple(accs), versions=SoftwareVersions()
    )


def parse_sections(outputs: Mapping[str, str]) -> AcceleratorInventory:
    """The inventory from the sections that answered (``hy_smi`` is required)."""
    if "hy_smi" not in outputs:
        raise ParseError(HY_SMI, "section missing from the collection")
    smi = parse_hy_smi(outputs["hy_smi"])
    json_text = outputs.get("hygon_rocm_smi_json")
    cards = None if not json_text or not json_text.strip() else parse_rocm_smi_dtk_json(json_text)
    return to_inventory(smi, cards)


def _model_name(inv: AcceleratorInventory) -> str | None:
    models = inv.models()
    if len(models) != 1 or models[0] == UNKNOWN_MODEL:
        return None
    return models[0]


def labels(inventory: AcceleratorInventory) -> dict[str, str]:
    """``hygon.com/dcu.name`` when the cards agree on one known product name."""
    name = _model_name(inventory)
    return {} if name is None else {NAME_LABEL: sanitize_label_value("_".join(name.split()))}


def group(model: str) -> str | None:
    """``dcu_<model>``: ``K100_AI`` -> ``dcu_k100_ai`` (a leading ``DCU`` word dropped)."""
    from gpufleet.domain.ansible import group_name  # ansible imports the facts

    rest = model.strip()
    if rest.upper().startswith("DCU "):
        rest = rest[4:]
    return group_name("dcu", rest) if rest else None


def _resource(_: AcceleratorInventory) -> str:
    return RESOURCE


def _section(name: str) -> VendorSection:
    tool, args = SECTIONS[name]
    return VendorSection(name, f"$TO {tool} {args}".rstrip(), tool=tool, args=args)


COLLECTOR = VendorCollector(
    vendor=HYGON,
    tool="hy-smi",
    primary="hy_smi",
    sections=tuple(_section(n) for n in SECTIONS),
    read=parse_sections,
    optional=("hygon_rocm_smi_json",),
)

#: The inspection probe asks hy-smi's table only (temperature, power and its cap per DCU):
#: DTK rocm-smi's JSON adds identity, not state, and is optional. hy-smi states no health
#: and no error count: a DCU it no longer lists is what the sweep sees (fewer devices).
INSPECTOR = VendorInspector(
    vendor=HYGON,
    primary="hy_smi",
    inspect_sections=COLLECTOR.sections[:1],
    parse_inspect=parse_sections,
)

#: Hygon DCUs (PCI class Co-processor, ``0b40``).
PLUGIN = VendorPlugin(
    name=HYGON,
    pci_vendor_id=PCI_VENDOR_ID,
    lspci_name="Chengdu Haiguang IC Design",
    exports=VendorExport(labels=labels, resource=_resource, gres_name="dcu", runtime="dtk"),
    collector=COLLECTOR,
    group=group,
    description="Hygon DCUs",
    inspector=INSPECTOR,
    pci_classes=("0b40", "Co-processor"),
)
