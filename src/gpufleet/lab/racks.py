"""Lab racks (issue 27 item 8): GB200 NVL72 racks of compute trays, each tray a lab host of
model ``gb200-4x`` that answers with the real GB200 tray capture
(``nvidia-smi-xml/k8s-test-infra_hw-qx-gb200.xml``, 4 GPUs, driver 580.173.02).

The capture is EDITED per tray, deterministically (tests/fixtures/captured/nvidia-smi-xml/
PROVENANCE.md): ``chassis_serial_number`` and ``clusterUuid`` are the rack's (one per rack,
:func:`rack_identity`), ``slot_number`` / ``tray_index`` / ``host_id`` the tray's
(:func:`tray_position`), ``gpu_fabric_guid`` distinct per GPU of each tray (serials and UUIDs
are the lab's per-host identities, as for every lab host); the cliqueId stays the capture's
``2`` (one partition per rack). A ``gb200-4x`` host that is not in a rack keeps the capture's
values. The lab's slot layout is 10 compute trays, 9 switch trays, 8 compute trays, top
down, which puts tray index 4 in slot 14 as in the capture (a lab layout, not a vendor
specification).

Faults (every GPU of the tray unless said): ``fabric-not-started`` (fabric state
``Not Started``, status ``N/A``), ``fabric-insufficient-resources`` (``Completed`` with status
``Insufficient Resources``), ``fabric-route-unhealthy`` (the fault GPU: summary ``Unhealthy``,
``route_unhealthy`` True, as the real mock-NVML capture shows it) and ``tray-missing`` (the
tray is not there: the host does not answer at all, a transport fault).
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from dataclasses import dataclass

from gpufleet.errors import ConfigError
from gpufleet.lab.fleet import LabFleet, LabHost
from gpufleet.lab.templates import _digest, fault_gpu_index


@dataclass(frozen=True)
class RackModel:
    """A lab rack: the lab model of its compute trays and how many a rack holds."""

    name: str
    tray_model: str
    trays: int
    prefix: str  # rack names: <prefix>01, <prefix>02 ...


RACK_MODELS: dict[str, RackModel] = {
    "gb200-nvl72": RackModel("gb200-nvl72", "gb200-4x", 18, "nvl"),
}
#: Compute trays above the switch trays, and the switch trays between the two groups.
_UPPER_TRAYS, _SWITCH_TRAYS = 10, 9


@dataclass(frozen=True)
class RackIdentity:
    chassis_serial: str
    cluster_uuid: str
    clique_id: str = "2"  # the capture's


def rack_model(name: str) -> RackModel:
    model = RACK_MODELS.get(name)
    if model is None:
        raise ConfigError(f"unknown lab rack {name!r} (known: {', '.join(RACK_MODELS)})")
    return model


def rack_identity(rack: str) -> RackIdentity:
    """The rack's chassis serial (13 digits, the capture's ``182...`` pattern) and NVLink
    domain (clusterUuid), stable per rack name."""
    h = _digest("rack", rack).hex()
    serial = f"1820{int(h[:12], 16) % 10**9:09d}"
    uuid = f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"
    return RackIdentity(serial, uuid)


def tray_position(tray: int) -> tuple[int, int, int]:
    """(slot number, tray index, host id) of compute tray ``tray`` (0-based) in the lab's
    layout (module docstring)."""
    slot = tray + 10 if tray < _UPPER_TRAYS else tray + 10 + _SWITCH_TRAYS
    return slot, tray, 1


def _set(block: str, tag: str, value: str) -> str:
    new, n = re.subn(rf"(<{tag}>)[^<]*(</{tag}>)", rf"\g<1>{value}\g<2>", block, count=1)
    if n != 1:
        raise RuntimeError(f"lab rack: no <{tag}> in the GB200 capture block")
    return new


def edit_tray_block(block: str, host: LabHost, index: int) -> str:
    """The capture's GPU ``index`` block edited for ``host``: its rack and tray identity
    (when it is in a rack), then its fabric faults."""
    if host.tray is not None:
        ident = rack_identity(host.rack)
        slot, tray_index, host_id = tray_position(host.tray)
        for tag, value in (
            ("chassis_serial_number", ident.chassis_serial),
            ("slot_number", str(slot)),
            ("tray_index", str(tray_index)),
            ("host_id", str(host_id)),
            ("clusterUuid", ident.cluster_uuid),
            ("cliqueId", ident.clique_id),
            ("gpu_fabric_guid", "0x" + _digest("guid", host.rack, host.tray, index).hex()[:16]),
        ):
            block = _set(block, tag, value)
    kinds = set(host.faults)
    if "fabric-not-started" in kinds:
        block = _set(_set(block, "state", "Not Started"), "status", "N/A")
    if "fabric-insufficient-resources" in kinds:
        block = _set(block, "status", "Insufficient Resources")
    if "fabric-route-unhealthy" in kinds and index == fault_gpu_index(host):
        block = _set(_set(block, "summary", "Unhealthy"), "route_unhealthy", "True")
    return block


def create_racks(
    rack: str,
    racks: int,
    *,
    faults: Mapping[str, list[str]] | None = None,
    seed: int = 0,
) -> LabFleet:
    """``racks`` lab racks of model ``rack``, each of its full count of trays, hosts named
    ``<rack>-t<NN>`` (``nvl01-t01`` ...), deterministic for a seed."""
    model = rack_model(rack)
    if not 1 <= racks <= 1000:
        raise ConfigError("a lab has 1 to 1000 racks")
    rng = random.Random(seed)
    n = racks * model.trays
    salts = rng.sample(range(10**6), n)
    hosts: list[LabHost] = []
    for r in range(racks):
        name = f"{model.prefix}{r + 1:02d}"
        for t in range(model.trays):
            host = f"{name}-t{t + 1:02d}"
            hosts.append(LabHost(name=host, model=model.tray_model,
                                 faults=list((faults or {}).get(host, [])),
                                 serial_salt=salts[len(hosts)], rack=name, tray=t))
    unknown = sorted(set(faults or {}) - {h.name for h in hosts})
    if unknown:
        raise ConfigError(f"faults name hosts that are not in the lab: {', '.join(unknown)}")
    return LabFleet(hosts=hosts, seed=seed)
