"""The Huawei Ascend vendor plugin: parsed npu-smi output -> accelerator records and labels.

Labels follow the Ascend device plugin / Volcano conventions (Ascend/mind-cluster docs):
``accelerator=huawei-Ascend910`` (``huawei-Ascend310``, ``huawei-Ascend310P``),
``accelerator-type=module-910b-8`` / ``module-910b-16`` for Atlas 800 A2 class 910B
boards (910B1-4), ``module`` (8) / ``half`` (4) for first-generation 910 training servers
(``910A``, and a bare ``910B``: the device plugin's chip-name mapping,
:mod:`gpufleet.vendors.huawei.chips`), and
``node.kubernetes.io/npu.chip.name=<chip name>``; the extended resource is
``huawei.com/Ascend910`` (``huawei.com/Ascend310``, ``huawei.com/Ascend310P``). Where the
convention for a model/count is not known no label is emitted rather than a guessed one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpufleet.domain.accelerator_exports import VendorExport, short_model
from gpufleet.domain.accelerators import (
    Accelerator,
    AcceleratorInventory,
    ErrorCounter,
    Link,
    LinkState,
    SoftwareVersions,
    accelerators_on_bus,
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
from gpufleet.vendors.huawei.chips import (
    accelerator_type,
    family,
    first_generation_910b,
    resource_name,
)
from gpufleet.vendors.huawei.hccn import (
    parse_link,
    parse_link_stat,
    parse_net_health,
    parse_optical,
    parse_stat,
)
from gpufleet.vendors.huawei.npu_smi import (
    Board,
    ChipHealth,
    ChipMapping,
    ChipUsage,
    NpuChip,
    NpuSmiInfo,
    TopoMatrix,
    parse_board,
    parse_chip_usages,
    parse_health_status,
    parse_npu_smi_info,
    parse_npu_smi_mapping,
    parse_npu_smi_topo,
)
from gpufleet.vendors.huawei.versions import package_version

if TYPE_CHECKING:
    from gpufleet.domain.facts import PciDevice
    from gpufleet.domain.fault_catalogue import FaultCatalogue

HUAWEI = Vendor("huawei")
PCI_VENDOR_ID = "19e5"

SECTIONS: Mapping[str, str] = {
    "npu_smi_info": "npu-smi info",
    "npu_smi_mapping": "npu-smi info -m",
    "npu_smi_health": "npu-smi info -t health -i N -c C (per chip)",
    "npu_smi_board": "npu-smi info -t board -i N (per NPU)",
    "npu_smi_usages": "npu-smi info -t usages -i N (per NPU)",
    "npu_smi_common": "npu-smi info -t common -i N (per NPU)",
    "hccn_link": "hccn_tool -i L -link -g (per chip)",
    "hccn_net_health": "hccn_tool -i L -net_health -g (per chip)",
    "hccn_stat": "hccn_tool -i L -stat -g (per chip)",
    "hccn_link_stat": "hccn_tool -i L -link_stat -g (per chip)",
    "hccn_optical": "hccn_tool -i L -optical -g (per chip)",
    "npu_smi_topo": "npu-smi info -t topo",
    "ascend_driver_version": "cat /usr/local/Ascend/driver/version.info",
    "ascend_firmware_version": "cat /usr/local/Ascend/firmware/version.info",
    "ascend_cann_version": (
        "cat /usr/local/Ascend/ascend-toolkit/latest/*/ascend_toolkit_install.info"
    ),
}
#: Where the collection script finds the version files (``$GPUFLEET_SYSROOT`` prefixed; the
#: CANN path is a glob over the architecture directory).
VERSION_FILES: Mapping[str, str] = {
    "ascend_driver_version": "usr/local/Ascend/driver/version.info",
    "ascend_firmware_version": "usr/local/Ascend/firmware/version.info",
    "ascend_cann_version": (
        "usr/local/Ascend/ascend-toolkit/latest/aarch64-linux/ascend_toolkit_install.info"
    ),
}
#: The per-chip sections frame each chip's answer with these lines (our framing, written by
#: the collection script's ``npu_each``; the tool output between them is verbatim).
_CHIP_HEAD = re.compile(r"^== npu (\d+) chip (\d+) logic (\d+) ==$")
_CHIP_RC = re.compile(r"^== rc (\d+) ==$")


@dataclass(frozen=True, slots=True)
class ChipAnswer:
    """One chip's answer inside a per-chip section."""

    npu_id: int
    chip_id: int
    logic_id: int
    rc: int
    text: str


def split_chip_answers(text: str, source: str) -> list[ChipAnswer]:
    """The per-chip answers of an ``npu_each`` section (see :data:`_CHIP_HEAD`)."""
    out: list[ChipAnswer] = []
    head: tuple[int, int, int] | None = None
    body: list[str] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        m = _CHIP_HEAD.match(line)
        if m:
            if head is not None:
                raise ParseError(source, "chip answer without its rc line", line=lineno)
            head, body = (int(m[1]), int(m[2]), int(m[3])), []
            continue
        r = _CHIP_RC.match(line)
        if r:
            if head is None:
                raise ParseError(source, "rc line outside a chip answer", line=lineno)
            out.append(ChipAnswer(*head, rc=int(r[1]), text="\n".join(body) + "\n"))
            head = None
            continue
        if head is None:
            if line.strip():
                raise ParseError(source, f"text outside a chip answer: {line[:80]!r}", line=lineno)
            continue
        body.append(line)
    if head is not None:
        raise ParseError(source, "last chip answer truncated (no rc line)")
    return out


CHIP_NAME_LABEL = "node.kubernetes.io/npu.chip.name"


def to_inventory(
    info: NpuSmiInfo,
    mapping: Sequence[ChipMapping] = (),
    *,
    driver: str | None = None,
    firmware: str | None = None,
    cann: str | None = None,
    health: Mapping[int, ChipHealth] | None = None,
    ports: Mapping[int, LinkState] | None = None,
    source: str = "npu-smi info",
    topo: TopoMatrix | None = None,
    net_health: Mapping[int, str] | None = None,
    counters: Mapping[int, Sequence[ErrorCounter]] | None = None,
    boards: Mapping[int, Board] | None = None,
    usages: Mapping[tuple[int, int], ChipUsage] | None = None,
    common: Mapping[tuple[int, int], ChipUsage] | None = None,
) -> AcceleratorInventory:
    """One :class:`Accelerator` per NPU chip; ``index`` is the logic device id (the id the
    device plugin and ``ASCEND_VISIBLE_DEVICES`` use): the table's Device column (20.x/21.x),
    else ``npu-smi info -m``'s Chip Logic ID, else the NPU ID (one chip per NPU).
    ``health`` (logic id -> ``-t health``) replaces the table's health word and adds the
    error codes; ``ports`` (logic id -> ``hccn_tool -i N -link -g``) adds the NPU's RoCE
    port as a ``roce`` :class:`Link`; ``topo`` (``-t topo``) adds a link to each peer NPU
    of the kind the matrix names (``hccs``, ``pix`` ...; no state: the matrix states none);
    ``net_health`` (logic id -> ``hccn_tool -net_health``) adds the port's network health as
    a ``roce_net_health`` :class:`Link`, up when the tool says ``Success``; ``counters``
    (logic id -> RoCE error packets of ``-stat``, the link-up count of ``-link_stat`` and the
    optical module's state of ``-optical``) become the NPU's error counters.

    ``boards`` (NPU id -> ``-t board -i N``) gives every chip of the card its PCI device id
    and ``firmware`` (``{"firmware": <Firmware Version>, "software": <Software Version>}``).
    ``usages`` / ``common`` ((NPU id, chip id) -> ``-t usages`` / ``-t common``) fill what
    the table leaves unknown, never override it (the table's MB figures are exact, the detail
    views' a capacity and a rounded percentage): memory from ``-t usages``' HBM capacity and
    usage rate when the table shows no HBM, temperature and power from ``-t common`` where
    the table prints ``NA``."""
    peers: dict[int, list[Link]] = {}
    for (a, b), kind in (topo.links if topo else {}).items():
        if a.startswith("NPU") and b.startswith("NPU") and a[3:].isdigit() and b[3:].isdigit():
            peers.setdefault(int(a[3:]), []).append(Link(kind=kind.lower(), peer=b[3:]))
    logic = {(m.npu_id, m.chip_id): m.logic_id for m in mapping if m.logic_id is not None}
    accs: list[Accelerator] = []
    for chip in info.chips:
        index = chip.device_id
        if index is None:
            index = logic.get((chip.npu_id, chip.chip_id))
        if index is None:
            index = chip.npu_id
        detail = (health or {}).get(index)
        port = (ports or {}).get(index)
        board = (boards or {}).get(chip.npu_id)
        use = (usages or {}).get((chip.npu_id, chip.chip_id))
        com = (common or {}).get((chip.npu_id, chip.chip_id))
        total, used = _memory(chip, use)
        temperature = chip.temperature_c
        if temperature is None and com is not None:
            temperature = com.temperature_c
        power = chip.power_w
        if power is None and com is not None:
            power = com.power_w
        accs.append(
            Accelerator(
                vendor=HUAWEI,
                index=index,
                model=chip.name,
                bus_id=chip.bus_id,
                pci_device_id=board.pci_device_id if board else None,
                memory_total_mib=total,
                memory_used_mib=used,
                health=detail.health if detail else chip.health,
                error_codes=detail.error_codes if detail else (),
                error_counters=tuple((counters or {}).get(index, ())),
                temperature_c=None if temperature is None else float(temperature),
                power_w=power,
                firmware=_board_firmware(board),
                links=(() if port is None else (Link(kind="roce", peer=None, state=port),))
                + _net_health_link((net_health or {}).get(index))
                + tuple(peers.get(index, ())),
            )
        )
    indexes = [a.index for a in accs]
    if len(set(indexes)) != len(indexes):
        raise ParseError(source, "several chips per NPU and no 'npu-smi info -m' to number them")
    return AcceleratorInventory(
        vendor=HUAWEI,
        accelerators=tuple(accs),
        versions=SoftwareVersions(
            driver=driver, firmware=firmware, runtime=cann, tool=info.version
        ),
    )


def _memory(chip: NpuChip, use: ChipUsage | None) -> tuple[int | None, int | None]:
    """(total, used) MiB: the table's HBM, else ``-t usages``' HBM capacity and usage rate,
    else the table's memory (DDR, the 20.x/21.x layouts of 310 cards)."""
    if chip.hbm_total_mb:
        return chip.hbm_total_mb, chip.hbm_used_mb
    if use is not None and use.hbm_capacity_mb:
        pct = use.hbm_usage_percent
        return use.hbm_capacity_mb, None if pct is None else round(use.hbm_capacity_mb * pct / 100)
    return chip.memory_total_mb, chip.memory_used_mb


def _board_firmware(board: Board | None) -> dict[str, str]:
    if board is None:
        return {}
    versions = (("firmware", board.firmware_version), ("software", board.software_version))
    return {k: v for k, v in versions if v and v != "NA"}


def _net_health_link(status: str | None) -> tuple[Link, ...]:
    if status is None:
        return ()
    state = LinkState.UP if status == "Success" else LinkState.DOWN
    return (Link(kind="roce_net_health", peer=None, state=state),)


def parse_sections(outputs: Mapping[str, str]) -> AcceleratorInventory:
    """Build the inventory from the raw outputs of :data:`SECTIONS` (npu_smi_info required)."""
    if "npu_smi_info" not in outputs:
        raise ParseError("npu-smi info", "section missing from the collection")
    info = parse_npu_smi_info(outputs["npu_smi_info"])
    mapping = (
        parse_npu_smi_mapping(outputs["npu_smi_mapping"]) if outputs.get("npu_smi_mapping") else []
    )

    def version(section: str) -> str | None:
        text = outputs.get(section)
        return package_version(text, SECTIONS[section]) if text else None

    health: dict[int, ChipHealth] = {}
    for a in split_chip_answers(outputs.get("npu_smi_health", ""), SECTIONS["npu_smi_health"]):
        where = f"npu-smi info -t health -i {a.npu_id} -c {a.chip_id}"
        if a.rc != 0:
            raise ParseError(where, f"exited {a.rc}: {a.text.strip()[:120]}")
        health[a.logic_id] = parse_health_status(a.text, where)
    ports: dict[int, LinkState] = {}
    for a in split_chip_answers(outputs.get("hccn_link", ""), SECTIONS["hccn_link"]):
        where = f"hccn_tool -i {a.logic_id} -link -g"
        # a chip without a RoCE port (310/310P cards) answers with an error: unknown state
        ports[a.logic_id] = parse_link(a.text, where) if a.rc == 0 else LinkState.UNKNOWN
    net: dict[int, str] = {}
    for a in split_chip_answers(outputs.get("hccn_net_health", ""), SECTIONS["hccn_net_health"]):
        if a.rc == 0:
            net[a.logic_id] = parse_net_health(a.text, f"hccn_tool -i {a.logic_id} -net_health -g")
    counters: dict[int, list[ErrorCounter]] = {}
    for a in split_chip_answers(outputs.get("hccn_stat", ""), SECTIONS["hccn_stat"]):
        if a.rc == 0:
            stats = parse_stat(a.text, f"hccn_tool -i {a.logic_id} -stat -g")
            counters.setdefault(a.logic_id, []).extend(c for c in stats if "err" in c.name)
    for a in split_chip_answers(outputs.get("hccn_link_stat", ""), SECTIONS["hccn_link_stat"]):
        if a.rc == 0:
            history = parse_link_stat(a.text, f"hccn_tool -i {a.logic_id} -link_stat -g")
            counters.setdefault(a.logic_id, []).append(
                ErrorCounter("roce_link_up_count", history.link_up_count)
            )
    for a in split_chip_answers(outputs.get("hccn_optical", ""), SECTIONS["hccn_optical"]):
        # a chip without a RoCE port (310/310P cards) answers with an error: unknown
        if a.rc == 0:
            optical = parse_optical(a.text, f"hccn_tool -i {a.logic_id} -optical -g")
            counters.setdefault(a.logic_id, []).extend(optical.counters())
    boards: dict[int, Board] = {}
    for a in split_chip_answers(outputs.get("npu_smi_board", ""), SECTIONS["npu_smi_board"]):
        where = f"npu-smi info -t board -i {a.npu_id}"
        board = parse_board(_answered(a, where), where)
        if board.npu_id != a.npu_id:
            raise ParseError(where, f"answered for NPU {board.npu_id}")
        if board.pci_vendor_id not in (None, PCI_VENDOR_ID):
            raise ParseError(where, f"PCI Vendor ID {board.pci_vendor_id} is not Huawei's")
        boards[a.npu_id] = board
    views: dict[str, dict[tuple[int, int], ChipUsage]] = {"usages": {}, "common": {}}
    for view, chips in views.items():
        for a in split_chip_answers(
            outputs.get(f"npu_smi_{view}", ""), SECTIONS[f"npu_smi_{view}"]
        ):
            where = f"npu-smi info -t {view} -i {a.npu_id}"
            for u in parse_chip_usages(_answered(a, where), where):
                if u.npu_id != a.npu_id:
                    raise ParseError(where, f"answered for NPU {u.npu_id}")
                chips[(u.npu_id, u.chip_id)] = u
    topo = parse_npu_smi_topo(outputs["npu_smi_topo"]) if outputs.get("npu_smi_topo") else None
    return to_inventory(
        info,
        mapping,
        topo=topo,
        net_health=net or None,
        counters=counters or None,
        driver=version("ascend_driver_version"),
        firmware=version("ascend_firmware_version"),
        cann=version("ascend_cann_version"),
        health=health or None,
        ports=ports or None,
        boards=boards or None,
        usages=views["usages"] or None,
        common=views["common"] or None,
    )


def _answered(a: ChipAnswer, where: str) -> str:
    """The text of a per-NPU ``npu-smi`` answer; the tool failing for an NPU that
    ``npu-smi info -m`` lists is a ParseError naming the command and NPU."""
    if a.rc != 0:
        raise ParseError(where, f"exited {a.rc}: {a.text.strip()[:120]}")
    return a.text


def npus_on_bus(devices: Sequence[PciDevice]) -> int:
    """Ascend NPU functions in ``lspci`` output (vendor 19e5, or Huawei's name without -nn)."""
    return accelerators_on_bus(devices).get(HUAWEI, 0)


def labels(inventory: AcceleratorInventory) -> dict[str, str]:
    """The device plugin / Volcano labels for a host (empty when it has no known NPU)."""
    models = inventory.models()
    if len(models) != 1:
        return {}  # none, or mixed chips: no single truthful value
    model = models[0]
    out: dict[str, str] = {CHIP_NAME_LABEL: sanitize_label_value(model)}
    fam = family(model)
    if fam is not None:
        out["accelerator"] = f"huawei-Ascend{fam}"
    kind = accelerator_type(model, inventory.count)
    if kind is not None:
        out["accelerator-type"] = kind
    return out


# ---- the collection: what the script runs on every host (missing tools are rc 127) ----

_FUNCTIONS = """\
npu_each() {
  # $1: health (npu-smi info -t health -i N -c C) or an hccn_tool query (-link) for every
  # NPU chip of npu-smi info -m (board MCUs have no logic id and are skipped), or board,
  # usages, common (npu-smi info -t $1 -i N) once per NPU (framed with its first chip);
  # each answer framed.
  m=$($TO npu-smi info -m) || return $?
  printf '%s\\n' "$m" | { npu_seen=' '; while read -r n c l rest; do
    case "$n$c$l" in ''|*[!0-9]*) continue ;; esac
    case "$1" in board|usages|common)
      case "$npu_seen" in *" $n "*) continue ;; esac
      npu_seen="$npu_seen$n " ;;
    esac
    printf '== npu %s chip %s logic %s ==\\n' "$n" "$c" "$l"
    case "$1" in
      health) $TO npu-smi info -t health -i "$n" -c "$c" ;;
      board|usages|common) $TO npu-smi info -t "$1" -i "$n" ;;
      *) $TO hccn_tool -i "$l" "$1" -g ;;
    esac
    printf '\\n== rc %s ==\\n' "$?"
  done; }
  return 0
}
ascend_ver() {
  # $1: a version file under the sysroot (CANN: a glob over the architecture directory)
  for f in "$R"/$1; do [ -r "$f" ] && { readf "$f"; return; }; done
  return 127
}"""
_CANN_GLOB = "usr/local/Ascend/ascend-toolkit/latest/*/ascend_toolkit_install.info"

COLLECTOR = VendorCollector(
    vendor=HUAWEI,
    tool="npu-smi",
    primary="npu_smi_info",
    sections=(
        VendorSection("npu_smi_info", "$TO npu-smi info", tool="npu-smi", args="info"),
        VendorSection("npu_smi_mapping", "$TO npu-smi info -m", tool="npu-smi", args="info -m"),
        VendorSection(
            "npu_smi_health",
            "npu_each health",
            tool="npu-smi",
            args="info -t health",
            functions=_FUNCTIONS,
        ),
        VendorSection("npu_smi_board", "npu_each board", tool="npu-smi", args="info -t board"),
        VendorSection("npu_smi_usages", "npu_each usages", tool="npu-smi", args="info -t usages"),
        VendorSection("npu_smi_common", "npu_each common", tool="npu-smi", args="info -t common"),
        VendorSection("hccn_link", "npu_each -link", tool="hccn_tool", args="-link -g"),
        VendorSection(
            "hccn_net_health",
            "npu_each -net_health",
            tool="hccn_tool",
            args="-net_health -g",
        ),
        VendorSection("hccn_stat", "npu_each -stat", tool="hccn_tool", args="-stat -g"),
        VendorSection(
            "hccn_link_stat", "npu_each -link_stat", tool="hccn_tool", args="-link_stat -g"
        ),
        VendorSection("hccn_optical", "npu_each -optical", tool="hccn_tool", args="-optical -g"),
        VendorSection(
            "npu_smi_topo", "$TO npu-smi info -t topo", tool="npu-smi", args="info -t topo"
        ),
        VendorSection(
            "ascend_driver_version",
            f"ascend_ver {VERSION_FILES['ascend_driver_version']}",
            files=(VERSION_FILES["ascend_driver_version"],),
        ),
        VendorSection(
            "ascend_firmware_version",
            f"ascend_ver {VERSION_FILES['ascend_firmware_version']}",
            files=(VERSION_FILES["ascend_firmware_version"],),
        ),
        VendorSection(
            "ascend_cann_version",
            f"ascend_ver '{_CANN_GLOB}'",
            files=(VERSION_FILES["ascend_cann_version"],),
        ),
    ),
    read=parse_sections,
    # detail only: an unreadable port, counter or topology answer is a named problem
    optional=(
        "hccn_link",
        "hccn_net_health",
        "hccn_stat",
        "hccn_link_stat",
        "hccn_optical",
        "npu_smi_topo",
    ),
)


#: The sections the inspection probe runs on an Ascend host, each sweep: the table
#: (health word, temperature, power, HBM in use per chip), the chip numbering, each chip's
#: health with its error codes, and each chip's RoCE port state and network health. The
#: same commands as the collection's, read by the same reader (a section left out reads as
#: not asked: no board, usage, counter or version detail in a sample).
INSPECT_SECTIONS = (
    "npu_smi_info",
    "npu_smi_mapping",
    "npu_smi_health",
    "hccn_link",
    "hccn_net_health",
)
INSPECTOR = VendorInspector(
    vendor=HUAWEI,
    primary="npu_smi_info",
    inspect_sections=tuple(s for s in COLLECTOR.sections if s.name in INSPECT_SECTIONS),
    parse_inspect=parse_sections,
)


# ---- the exports and the Ansible group ----

_FAMILY_GROUP = re.compile(r"^(?:ASCEND\s*)?(910B|910A|910|310P|310)", re.IGNORECASE)


def group(model: str) -> str | None:
    """The Ansible group of a host of ``model`` NPUs: ``npu_910b`` (910B1-4), ``npu_910a``,
    ``npu_910`` (a first-generation bare ``910B``), ``npu_310p``, ``npu_310``; None for
    another model."""
    from gpufleet.domain.ansible import group_name  # ansible imports the facts

    if first_generation_910b(model):
        return group_name("npu", "910")  # a first-generation 910, not a 910B1-4
    m = _FAMILY_GROUP.match(model)
    return None if m is None else group_name("npu", m.group(1))


def _resource(inv: AcceleratorInventory) -> str | None:
    models = inv.models()
    return resource_name(models[0]) if len(models) == 1 else None


def _gres_type(inv: AcceleratorInventory) -> str | None:
    """The chip name (``910b3``, ``910a``), but ``910`` for a first-generation bare ``910B``
    (``npu:910b`` names the second generation)."""
    models = inv.models()
    if len(models) != 1:
        return None
    return "910" if first_generation_910b(models[0]) else short_model(models[0])


def davinci_files(inv: AcceleratorInventory) -> str | None:
    """``/dev/davinci[0-7]``: the NPUs' logic ids, when they are one contiguous range."""
    ids = sorted(a.index for a in inv.accelerators)
    if not ids or ids != list(range(ids[0], ids[0] + len(ids))):
        return None
    return f"/dev/davinci{ids[0]}" if len(ids) == 1 else f"/dev/davinci[{ids[0]}-{ids[-1]}]"


#: Huawei Ascend. Exports: the Ascend device plugin / Volcano labels; resource
#: ``huawei.com/Ascend910`` (``Ascend310``/``Ascend310P`` by family); GRES ``npu`` with
#: ``File=/dev/davinci[<first>-<last>]`` (the NPU logic ids), as Slurm sites running Ascend
#: name it (``GresTypes=gpu,npu``, ``Gres=npu:910b3:8``, TRES ``gres/npu:910b3``); runtime
#: ``cann`` (the CANN toolkit).
def _faults() -> FaultCatalogue:
    """The Ascend fault catalogue (``faults.py``; its data read on first use)."""
    from gpufleet.vendors.huawei.faults import catalogue

    return catalogue()


PLUGIN = VendorPlugin(
    name=HUAWEI,
    pci_vendor_id=PCI_VENDOR_ID,
    lspci_name="Huawei Technologies",
    exports=VendorExport(
        labels=labels,
        resource=_resource,
        gres_name="npu",
        gres_files=davinci_files,
        runtime="cann",
        gres_type=_gres_type,
    ),
    collector=COLLECTOR,
    group=group,
    description="Ascend NPUs",
    inspector=INSPECTOR,
    faults=_faults,
)
