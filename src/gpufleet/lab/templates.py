"""Per-model templates parsed once from the real captures (literal pieces and identity slots),
and the deterministic per-host identities (serials, UUIDs, bus ids) filled into them."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from gpufleet.errors import ConfigError
from gpufleet.lab.captures import captures_dir, load_exporter_bundle
from gpufleet.lab.catalogue import ModelSpec, model_spec
from gpufleet.lab.fleet import LabFleet, LabHost

# --------------------------------------------------------------------------- templates

_SLOT = re.compile(r"\x00(\w+)\x00")
_Pieces = tuple[str, ...]  # literal, slot name, literal, slot name, ..., literal


def _slot(name: str) -> str:
    return f"\x00{name}\x00"


def _compile(text: str) -> _Pieces:
    return tuple(_SLOT.split(text))


def _fill(pieces: _Pieces, values: Mapping[str, str]) -> str:
    out = list(pieces)
    for i in range(1, len(out), 2):
        out[i] = values[out[i]]
    return "".join(out)


def _sub_once(pattern: str, repl: str, text: str, what: str, *, optional: bool = False) -> str:
    """Substitute exactly one match (fails loudly if a capture does not look as expected)."""
    new, n = re.subn(pattern, repl, text, flags=re.M)
    if n != 1 and not (optional and n == 0):
        raise RuntimeError(f"lab template: {what}: expected one match of {pattern!r}, got {n}")
    return new


@dataclass(frozen=True)
class _Template:
    spec: ModelSpec
    driver: str
    product: str  # GPU product name as nvidia-smi prints it
    head: _Pieces  # slot "attached"
    blocks: tuple[_Pieces, ...]  # per captured GPU; slots serial/uuid/pdi(+bus fields)
    bus_ids: tuple[str, ...]  # lspci form, one per GPU of the host
    tail: str
    nvlink: tuple[_Pieces, ...]  # per captured GPU; slots idx/uuid; () = no NVLink
    ibstat: str | None
    topo: str | None  # real topo -m served as is (with the slot-free capture)
    #: The ``MIG <profile> Device N: ...`` lines ``nvidia-smi -L`` prints under each GPU (the
    #: bundle's, as captured; issue 26 item 7); () = MIG off.
    mig_list: tuple[str, ...] = ()


def _path(rel: str) -> Path:
    return captures_dir() / rel


def _xml_block_slots(block: str, replicate: bool) -> str:
    block = _sub_once(
        r"(<serial>)[^<]*(</serial>)", rf"\g<1>{_slot('serial')}\g<2>", block, "serial"
    )
    block = _sub_once(r"(<uuid>)[^<]*(</uuid>)", rf"\g<1>{_slot('uuid')}\g<2>", block, "uuid")
    if replicate:
        for tag, slot in (
            ("pci_bus", "bus"),
            ("pci_device", "dev"),
            ("pci_domain", "dom"),
            ("pci_bus_id", "busid"),
            ("minor_number", "minor"),
        ):
            block = _sub_once(rf"(<{tag}>)[^<]*(</{tag}>)", rf"\g<1>{_slot(slot)}\g<2>", block, tag)
        block = _sub_once(
            r'^(    <gpu id=")[^"]*(">)', rf"\g<1>{_slot('busid')}\g<2>", block, "gpu id"
        )
        block = _sub_once(
            r"(<gpu_module_id>)\d+(</gpu_module_id>)",
            rf"\g<1>{_slot('module')}\g<2>",
            block,
            "module",
            optional=True,
        )
    return block


def _text_block_slots(block: str, replicate: bool) -> str:
    block = _sub_once(r"^(    Serial Number\s+: ).*$", rf"\g<1>{_slot('serial')}", block, "serial")
    block = _sub_once(r"^(    GPU UUID\s+: ).*$", rf"\g<1>{_slot('uuid')}", block, "uuid")
    block = _sub_once(
        r"^(    GPU PDI\s+: ).*$", rf"\g<1>{_slot('pdi')}", block, "pdi", optional=True
    )
    if replicate:
        block = _sub_once(
            r"^GPU [0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d$",
            f"GPU {_slot('busid')}",
            block,
            "GPU header",
        )
        for key, slot in (("Bus", "bus"), ("Device", "dev"), ("Domain", "dom")):
            block = _sub_once(
                rf"^(        {key}\s+: 0x)[0-9A-Fa-f]+$", rf"\g<1>{_slot(slot)}", block, key
            )
        block = _sub_once(r"^(        Bus Id\s+: ).*$", rf"\g<1>{_slot('busid')}", block, "Bus Id")
        block = _sub_once(r"^(    Minor Number\s+: ).*$", rf"\g<1>{_slot('minor')}", block, "minor")
        block = _sub_once(
            r"^(        Module Id\s+: )\d+$",
            rf"\g<1>{_slot('module')}",
            block,
            "module",
            optional=True,
        )
    return block


def _disable_mig(xml: str) -> str:
    """MIG off, as ``nvidia-smi -mig 0`` + reset leaves it (the only capture had MIG on)."""
    xml = re.sub(r"<(current|pending)_mig>Enabled</", r"<\1_mig>Disabled</", xml)
    return re.sub(
        r"<mig_devices>.*?</mig_devices>",
        "<mig_devices>\n            None\n        </mig_devices>",
        xml,
        flags=re.S,
    )


def _lspci_bus(xml_bus_id: str) -> str:
    """ "00000000:00:0D.0" -> "0000:00:0d.0"."""
    dom, bus, rest = xml_bus_id.split(":")
    return f"{dom[-4:]}:{bus}:{rest}".lower()


@cache
def _exporter_bundle(rel: str) -> dict[str, str]:
    return load_exporter_bundle(_path(rel))


def _smi_template(
    spec: ModelSpec,
) -> tuple[str, _Pieces, tuple[_Pieces, ...], tuple[str, ...], str]:
    if spec.smi_format == "xml":
        text = _path(spec.smi_file).read_text(encoding="utf-8")
        if spec.replicate:
            text = _disable_mig(text)
        # Datacenter hosts run nvidia-persistenced; these captures come from boxes that did not.
        text = text.replace(
            "<persistence_mode>Disabled</persistence_mode>",
            "<persistence_mode>Enabled</persistence_mode>",
        )
        driver = re.search(r"<driver_version>([^<]+)</", text)
        # Four spaces in most captures, a tab in NVIDIA's own (k8s-test-infra).
        indent = "\t" if "\n\t<gpu id=" in text else "    "
        starts = [m.start() for m in re.finditer(rf"^{indent}<gpu id=", text, re.M)]
        end = text.rindex(f"{indent}</gpu>") + len(f"{indent}</gpu>\n")
        head = _sub_once(
            r"(<attached_gpus>)\d+(</attached_gpus>)",
            rf"\g<1>{_slot('attached')}\g<2>",
            text[: starts[0]],
            "attached",
        )
        raw_blocks = [text[a:b] for a, b in zip(starts, [*starts[1:], end], strict=True)]
        bus_ids = tuple(_lspci_bus(re.findall(r"<pci_bus_id>([^<]+)<", b)[0]) for b in raw_blocks)
        blocks = [_xml_block_slots(b, spec.replicate) for b in raw_blocks]
        tail = text[end:]
    else:
        text = _exporter_bundle(spec.smi_file)["idle :: query (-q)"]
        # Datacenter hosts run nvidia-persistenced (see the XML branch).
        text = re.sub(r"^(    Persistence Mode\s+: )Disabled$", r"\g<1>Enabled", text, flags=re.M)
        driver = re.search(r"^Driver Version\s+: (\S+)$", text, re.M)
        starts = [m.start() for m in re.finditer(r"^GPU [0-9A-Fa-f]{8}:", text, re.M)]
        # nvidia-smi -q opens with an empty line; the bundle drops it with the section gap
        head_text = "\n" + text[: starts[0]].lstrip("\n")
        head = _sub_once(
            r"^(Attached GPUs\s+: )\d+$", rf"\g<1>{_slot('attached')}", head_text, "attached"
        )
        raw_blocks = [
            text[a:b].rstrip("\n") + "\n"
            for a, b in zip(starts, [*starts[1:], len(text)], strict=True)
        ]
        bus_ids = tuple(_lspci_bus(b.split("\n", 1)[0].split()[1]) for b in raw_blocks)
        blocks = [_text_block_slots(b, spec.replicate) for b in raw_blocks]
        tail = ""
    if driver is None:
        raise RuntimeError(f"lab template {spec.smi_file}: no driver version")
    if spec.replicate:
        bus_ids = spec.gpu_bus_ids
    if len(bus_ids) != spec.gpu_count or not (spec.replicate or len(blocks) == spec.gpu_count):
        raise RuntimeError(f"lab template {spec.name}: GPU count does not match the capture")
    return driver.group(1), _compile(head), tuple(_compile(b) for b in blocks), bus_ids, tail


def _nvlink_template(spec: ModelSpec) -> tuple[_Pieces, ...]:
    if spec.nvlink_file is None:
        return ()
    if spec.nvlink_file == "bundle":
        text = _exporter_bundle(spec.smi_file)["capabilities :: nvlink -s"]
    else:
        text = _path(spec.nvlink_file).read_text(encoding="utf-8")
    starts = [m.start() for m in re.finditer(r"^GPU \d+: ", text, re.M)]
    out = []
    for a, b in zip(starts, [*starts[1:], len(text)], strict=True):
        block = text[a:b].rstrip("\n") + "\n"
        block = _sub_once(r"^GPU \d+: ", f"GPU {_slot('idx')}: ", block, "nvlink GPU")
        block = _sub_once(r"\(UUID: [^)]*\)", f"(UUID: {_slot('uuid')})", block, "nvlink UUID")
        out.append(_compile(block))
    return tuple(out)


@cache
def _template(model: str) -> _Template:
    spec = model_spec(model)
    driver, head, blocks, bus_ids, tail = _smi_template(spec)
    ibstat = _path(spec.ibstat_file).read_text(encoding="utf-8") if spec.ibstat_file else None
    topo = _exporter_bundle(spec.smi_file)[spec.topo_capture] if spec.topo_capture else None
    product = re.search(
        r"<product_name>([^<]+)<|^    Product Name\s+: (.+)$", "".join(blocks[0]), re.M
    )
    assert product is not None
    return _Template(
        spec=spec,
        driver=driver,
        product=product[1] or product[2],
        head=head,
        blocks=blocks,
        bus_ids=bus_ids,
        tail=tail,
        nvlink=_nvlink_template(spec),
        ibstat=ibstat,
        topo=topo,
        mig_list=_mig_list(spec),
    )


def _mig_list(spec: ModelSpec) -> tuple[str, ...]:
    """The MIG lines of the model's ``nvidia-smi -L`` capture (text models only)."""
    if spec.smi_format != "text":
        return ()
    listing = _exporter_bundle(spec.smi_file).get("capabilities :: list (-L)", "")
    return tuple(line for line in listing.splitlines() if line.startswith("  MIG "))


# --------------------------------------------------------------------------- identities


def _digest(*parts: object) -> bytes:
    return hashlib.blake2b("|".join(map(str, parts)).encode(), digest_size=16).digest()


def _pick(n: int, *parts: object) -> int:
    return int.from_bytes(_digest(*parts)[:4], "big") % n


def fault_gpu_index(host: LabHost) -> int:
    """Index of the GPU the host's GPU faults (and a GPU swap) apply to; stable per host."""
    return _pick(host.spec.gpu_count, "suspect", host.name, host.serial_salt)


# Serial prefixes: the capture's own when it has a real one, else a plausible factory code
# (the exporter and A10G captures mask the serial to zeros).
_SERIAL_PREFIX = {
    "v100s-8x": "1562",
    "a100-8x": "1650",
    "h100-8x": "1654",
    "a10g-1x": "1323",
    "l40s-1x": "1322",
    "gb200-4x": "1650",  # the capture's (placeholder) 1650000000001
}


def _prefix(model: str) -> str:
    """The model's serial prefix (its spec's, else a neutral one)."""
    return _SERIAL_PREFIX.get(model) or model_spec(model).serial_prefix or "9000"


def _identity(host: LabHost, index: int) -> dict[str, str]:
    if host.moved_in is not None and index == fault_gpu_index(host):
        return {**host.moved_in}
    generation = host.gpu_swap if index == fault_gpu_index(host) else 0
    h = _digest("gpu", host.model, host.serial_salt, index, generation).hex()
    # Serial = prefix + salt + index + swap generation: unique for unique salts (13 digits).
    serial = f"{_prefix(host.model)}{host.serial_salt:06d}{index}{generation % 100:02d}"
    return {
        "serial": serial,
        "uuid": f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}",
        "pdi": f"0x{h[16:32]}",
    }


def move_gpu(fleet: LabFleet, source: str, target: str) -> LabFleet:
    """A technician moves the GPU at ``source``'s :func:`fault_gpu_index` into ``target``'s
    slot of the same index role (issue 10 parts history): ``target`` shows that card's serial
    and UUID, ``source`` gets a new card (a GPU swap)."""
    src, dst = fleet.host(source), fleet.host(target)
    if src.model != dst.model:
        raise ConfigError(f"cannot move a {src.model} GPU into {target}, a {dst.model} host")
    card = _identity(src, fault_gpu_index(src))
    moved = {"serial": card["serial"], "uuid": card["uuid"], "pdi": card["pdi"]}
    hosts = []
    for h in fleet.hosts:
        if h.name == source:
            h = h.model_copy(update={"gpu_swap": h.gpu_swap + 1, "moved_in": None})
        elif h.name == target:
            h = h.model_copy(update={"moved_in": moved})
        hosts.append(h)
    return LabFleet(hosts=hosts, seed=fleet.seed)


def system_identity(host: LabHost) -> dict[str, str]:
    """The lab host's DMI identity (``/sys/class/dmi/id`` file -> value): vendor and product of
    its model, a serial, board serial and UUID stable per host (its salt), unique per salt.
    Lab values, not a capture: real boards print their own formats."""
    h = _digest("system", host.model, host.serial_salt).hex()
    vendor, product = host.spec.dmi
    return {
        "sys_vendor": vendor,
        "product_name": product,
        "product_serial": f"GFL{_prefix(host.model)}{host.serial_salt:06d}",
        "product_uuid": f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}",
        "board_serial": f"GFB{_prefix(host.model)}{host.serial_salt:06d}",
        "bios_version": "2.1.0",
    }


def _bus_values(bus_id: str, index: int, fmt: str) -> dict[str, str]:
    dom, bus, devfn = bus_id.split(":")
    dev = devfn.split(".")[0]
    full = f"0000{dom}:{bus}:{devfn}".upper()
    return {
        "busid": full,
        "bus": bus.upper(),
        "dev": dev.upper(),
        "dom": dom.upper() if fmt == "text" else dom,
        "minor": str(index),
        "module": str(index + 1),
    }
