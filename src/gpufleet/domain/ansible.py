"""Ansible dynamic inventory: groups and host variables of one host, as pure data.

``gpufleet inventory --list`` prints Ansible's dynamic-inventory JSON (``_meta.hostvars``)
built from these. Groups: ``state_<state>`` (every host, quarantined and maintenance ones
included, so a playbook can still reach them), ``gpu_<model>`` (from the product name:
``NVIDIA A100-SXM4-80GB`` -> ``gpu_a100``), ``pool_<pool>``, ``baseline_<baseline>``,
``fabric_<ib|roce|none>``,
``profile_<profile>`` (validated profiles of available/allocated hosts), ``rack_<rack>``
(the inventory's, and the chassis serial a GB200/GB300 tray reports), ``nvl_domain_<uuid>``
(its NVLink domain, issue 27).
Accelerator groups by vendor and model (issue 15: ``npu_910b``, ``gpu_mi250``, ``gpu_h800``)
carry as group variables what every host of the group reports alike
(:data:`ACCELERATOR_VARS`: vendor, driver, firmware, runtime and its version: CANN, ROCm,
CUDA); a host keeps as host variables the ones its group does not share.
Host variables: how to reach the host (``ansible_host/port/user``), the non-secret inventory
variables, the pinned values of its baseline (one variable per pin of
:data:`gpufleet.domain.pins.PINS`: ``gpu_driver_version``, ``cuda_version`` ...) and the GPU
facts that matter (count, model, memory). Secret variables (by name, and any sealed
``fernet:`` value) are removed by the service before they reach this module.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpufleet.domain.ansible_site import SiteGroup, add_site_groups, typed_vars
from gpufleet.domain.fabric import host_fabric
from gpufleet.domain.facts import HostFacts
from gpufleet.domain.labels import fabric_up
from gpufleet.domain.pins import PINS
from gpufleet.domain.spec import Baseline, ExpectedSpec
from gpufleet.domain.states import HostState

#: The host variable each baseline pin is exported as (the rest: ``baseline_<field>``).
PIN_VARS: Mapping[str, str] = {
    "os_image": "os_image",
    "kernel": "kernel_version",
    "driver": "gpu_driver_version",
    "cuda": "cuda_version",
    "vbios": "vbios_versions",
    "container_toolkit": "container_toolkit_version",
    "fabric_manager": "fabric_manager_version",
    "hca_firmware": "hca_firmware_versions",
    "sysctls": "sysctls",
}
#: The variables of an accelerator group (issue 15): what its hosts' tools report.
ACCELERATOR_VARS = (
    "accelerator_vendor",
    "accelerator_driver_version",
    "accelerator_firmware_version",
    "accelerator_runtime",
    "accelerator_runtime_version",
)
#: Words of a product name that name the vendor or the brand, not the model.
_BRAND = {"NVIDIA", "TESLA", "GEFORCE", "QUADRO", "RTX", "GRID"}
_MODEL_TOKEN = re.compile(r"^[A-Z]{1,3}\d{1,4}[A-Z]*$")
_NOT_GROUP_CHAR = re.compile(r"[^a-z0-9_]+")
#: States whose validated profiles are current (the host is in service).
_IN_SERVICE = (HostState.AVAILABLE, HostState.ALLOCATED)


def group_name(prefix: str, value: str) -> str:
    """``prefix_value`` as a valid Ansible group name (``[a-z0-9_]``, not starting with a
    digit): ``group_name("pool", "train-a")`` -> ``pool_train_a``."""
    slug = _NOT_GROUP_CHAR.sub("_", value.lower()).strip("_") or "unknown"
    return f"{prefix}_{slug}"


def gpu_model(product_name: str | None) -> str | None:
    """The model of a product name, lower case: the first token that looks like a model code
    (``A100``, ``H800``, ``A10G``, ``L40S``, ``GB200``) after the brand words; else the whole
    name without brand words (``NVIDIA GeForce RTX 4090`` -> ``4090``); None without a name."""
    if not product_name:
        return None
    tokens = [t for t in re.split(r"[\s\-_/()]+", product_name.upper()) if t]
    for token in tokens:
        if token not in _BRAND and _MODEL_TOKEN.match(token):
            return token.lower()
    rest = [t for t in tokens if t not in _BRAND] or tokens
    return _NOT_GROUP_CHAR.sub("_", "_".join(rest).lower()).strip("_") or None


@dataclass(frozen=True)
class InventoryHost:
    """What the inventory needs of one host (read by the service, plain values)."""

    name: str
    address: str
    port: int
    user: str | None
    key_file: str | None
    #: Inventory variables, secrets already removed by the service (never emitted).
    vars: Mapping[str, str]
    state: HostState
    pool: str | None
    rack: str | None
    profiles: list[str]
    facts: HostFacts | None
    baseline_name: str | None
    baseline: Baseline | None
    spec: ExpectedSpec | None = None
    health: str | None = None
    fault: str | None = None
    #: Accelerator group (``npu_910b``) -> this host's :data:`ACCELERATOR_VARS` for it.
    accelerators: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: Accelerators of every vendor the tools report, and their model (None: several).
    accelerator_count: int | None = None
    accelerator_model: str | None = None
    #: The enrolled inventory's groups the host is in, parents included (issue 26 item 5).
    groups: tuple[str, ...] = ()


def host_groups(h: InventoryHost) -> list[str]:
    """The groups ``h`` belongs to (sorted)."""
    groups = {group_name("state", str(h.state))}
    if h.pool:
        groups.add(group_name("pool", h.pool))
    if h.baseline_name:
        groups.add(group_name("baseline", h.baseline_name))
    rack = h.rack or (h.spec.rack if h.spec else None)
    if rack:
        groups.add(group_name("rack", rack))
    if h.facts is not None:
        groups.add(group_name("fabric", fabric_up(h.facts, h.spec)))
        hf = host_fabric(h.facts)  # issue 27: the physical rack and the NVLink domain
        if hf.rack_id:
            groups.add(group_name("rack", hf.rack_id))
        if hf.nvl_domain:
            groups.add(group_name("nvl_domain", hf.nvl_domain))
        for model in {gpu_model(g.product_name) for g in h.facts.gpus}:
            if model:
                groups.add(group_name("gpu", model))
    groups.update(h.accelerators)
    if h.state in _IN_SERVICE:
        groups.update(group_name("profile", p) for p in h.profiles)
    return sorted(groups)


def accelerator_host_vars(h: InventoryHost) -> dict[str, Any]:
    """The host's own :data:`ACCELERATOR_VARS` (one vendor's; none for a host carrying
    several vendors, whose values live in each group) and its accelerator count/model."""
    out: dict[str, Any] = {}
    if h.accelerator_count is not None:
        out["accelerator_count"] = h.accelerator_count
    if h.accelerator_model:
        out["accelerator_model"] = h.accelerator_model
    vendors = {v.get("accelerator_vendor") for v in h.accelerators.values()}
    if len(vendors) == 1:
        for own in h.accelerators.values():
            out.update({k: v for k, v in own.items() if k in ACCELERATOR_VARS})
    return out


def shared_vars(members: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The :data:`ACCELERATOR_VARS` every member reports alike (one that a member does not
    report, or that members disagree on, is not shared)."""
    per_host = list(members)
    out: dict[str, Any] = {}
    for key in ACCELERATOR_VARS:
        values = [m.get(key) for m in per_host]
        if values and values[0] is not None and all(v == values[0] for v in values):
            out[key] = values[0]
    return out


def baseline_vars(baseline: Baseline | None) -> dict[str, Any]:
    """One variable per value the baseline pins (unpinned fields are left out)."""
    if baseline is None:
        return {}
    out: dict[str, Any] = {}
    for pin in PINS:
        value = pin.expected(baseline)
        if value in (None, "", [], {}):
            continue
        out[PIN_VARS.get(pin.field, f"baseline_{pin.field}")] = value
    return out


def host_vars(h: InventoryHost) -> dict[str, Any]:
    """The host variables of ``h`` (``_meta.hostvars[name]``)."""
    out: dict[str, Any] = typed_vars(h.vars)
    out["ansible_host"] = h.address
    out["ansible_port"] = h.port
    if h.user:
        out["ansible_user"] = h.user
    if h.key_file:
        out["ansible_ssh_private_key_file"] = h.key_file
    out["gpufleet_state"] = str(h.state)
    if h.health:
        out["gpufleet_health"] = h.health
    if h.fault:
        out["gpufleet_fault"] = h.fault
    if h.pool:
        out["gpufleet_pool"] = h.pool
    if h.baseline_name:
        out["gpufleet_baseline"] = h.baseline_name
    out["gpufleet_profiles"] = sorted(h.profiles) if h.state in _IN_SERVICE else []
    out.update(baseline_vars(h.baseline))
    out.update(accelerator_host_vars(h))
    if h.facts is not None and h.facts.gpus:
        first = h.facts.gpus[0]
        out["gpu_count"] = len(h.facts.gpus)
        out["gpu_model"] = gpu_model(first.product_name)
        out["gpu_product"] = first.product_name
        out["gpu_memory_mib"] = first.memory_total_mib
    elif h.facts is not None:
        out["gpu_count"] = 0
    return out


def inventory(
    hosts: Iterable[InventoryHost], site: Mapping[str, SiteGroup] | None = None
) -> dict[str, Any]:
    """Ansible's ``--list`` answer: one entry per group (``hosts``), ``all.children``, and
    ``_meta.hostvars`` (so Ansible does not call ``--host`` once per host); the enrolled
    inventory's own groups (``site``: children and vars) beside gpufleet's
    (:mod:`gpufleet.domain.ansible_site`)."""
    groups: dict[str, list[str]] = {}
    hostvars: dict[str, dict[str, Any]] = {}
    members: dict[str, list[Mapping[str, Any]]] = {}
    listed = list(hosts)
    for h in listed:
        hostvars[h.name] = host_vars(h)
        for g in host_groups(h):
            groups.setdefault(g, []).append(h.name)
        for g, own in h.accelerators.items():
            members.setdefault(g, []).append(own)
    shared = {g: shared_vars(m) for g, m in members.items()}
    for h in listed:  # what the host's group says is not repeated as a host variable
        for g in h.accelerators:
            for key, value in shared[g].items():
                if hostvars[h.name].get(key) == value:
                    del hostvars[h.name][key]
    out: dict[str, Any] = {}
    for g, names in sorted(groups.items()):
        out[g] = {"hosts": sorted(names)}
        if shared.get(g):
            out[g]["vars"] = shared[g]
    out["all"] = {"children": [*sorted(groups), "ungrouped"]}
    add_site_groups(out, {h.name: h.groups for h in listed if h.groups}, site or {})
    out["_meta"] = {"hostvars": hostvars}
    return out
