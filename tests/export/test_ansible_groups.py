"""The Ansible inventory as pure data: model groups from product names, group names Ansible
accepts, baseline pins as host variables, in-service profiles only, secrets never emitted."""

from __future__ import annotations

from pathlib import Path

from gpufleet.domain.ansible import (
    InventoryHost,
    baseline_vars,
    gpu_model,
    group_name,
    host_groups,
    inventory,
)
from gpufleet.domain.ansible_site import SiteGroup, group_vars, own_vars, typed
from gpufleet.domain.spec import Baseline
from gpufleet.domain.states import HostState
from gpufleet.inventory import load_inventory
from gpufleet.service.exports.ansible import public_vars
from gpufleet.testing import make_facts


def test_gpu_model_from_real_product_names() -> None:
    assert gpu_model("NVIDIA A100-SXM4-80GB") == "a100"
    assert gpu_model("NVIDIA H800") == "h800"
    assert gpu_model("NVIDIA H100 80GB HBM3") == "h100"
    assert gpu_model("NVIDIA A10G") == "a10g"
    assert gpu_model("NVIDIA A10") == "a10"
    assert gpu_model("Tesla V100-PCIE-32GB") == "v100"
    assert gpu_model("NVIDIA L40S") == "l40s"
    assert gpu_model("NVIDIA GH200 480GB") == "gh200"
    assert gpu_model("NVIDIA GeForce RTX 4090") == "4090"
    assert gpu_model("NVIDIA TITAN X (Pascal)") == "titan_x_pascal"
    assert gpu_model(None) is None and gpu_model("") is None


def test_group_names_are_valid_identifiers() -> None:
    assert group_name("pool", "train-A100.eu") == "pool_train_a100_eu"
    assert group_name("rack", "--") == "rack_unknown"


def test_baseline_pins_become_host_variables_and_unpinned_are_left_out() -> None:
    b = Baseline(name="b", driver="550.90.07", cuda="12.4", fabric_manager="550.90.07",
                 container_toolkit="1.16.2", vbios=["96.00.89.00.01"])
    assert baseline_vars(b) == {
        "gpu_driver_version": "550.90.07",
        "cuda_version": "12.4",
        "fabric_manager_version": "550.90.07",
        "container_toolkit_version": "1.16.2",
        "vbios_versions": ["96.00.89.00.01"],
    }
    assert baseline_vars(None) == {}


def _host(name: str, state: HostState, **kw: object) -> InventoryHost:
    facts = make_facts(all_gpus={"product_name": "NVIDIA H800", "memory_total_mib": 81559},
                       ib_ports=[])
    base: dict[str, object] = dict(
        name=name, address="10.0.0.1", port=2222, user="ops", key_file=None, vars={},
        state=state, pool="train", rack="r7", profiles=["training-single"], facts=facts,
        baseline_name=None, baseline=None,
    )
    base.update(kw)
    return InventoryHost(**base)  # type: ignore[arg-type]


def test_quarantined_host_keeps_its_state_group_but_no_profile_group() -> None:
    inv = inventory([_host("a", HostState.AVAILABLE), _host("q", HostState.QUARANTINED)])
    assert inv["state_available"]["hosts"] == ["a"]
    assert inv["state_quarantined"]["hosts"] == ["q"]
    assert inv["gpu_h800"]["hosts"] == ["a", "q"]
    assert inv["profile_training_single"]["hosts"] == ["a"]
    assert "q" not in inv["profile_training_single"]["hosts"]
    assert inv["_meta"]["hostvars"]["q"]["gpufleet_profiles"] == []
    hv = inv["_meta"]["hostvars"]["a"]
    assert (hv["ansible_host"], hv["ansible_port"], hv["ansible_user"]) == ("10.0.0.1", 2222, "ops")
    assert (hv["gpu_count"], hv["gpu_model"], hv["gpu_memory_mib"]) == (8, "h800", 81559)
    assert "state_quarantined" in inv["all"]["children"]
    assert set(host_groups(_host("x", HostState.MAINTENANCE))) == {
        "state_maintenance", "pool_train", "rack_r7", "fabric_none", "gpu_h800"
    }


def test_secret_names_and_sealed_values_are_dropped() -> None:
    kept = public_vars({
        "ansible_python_interpreter": "/usr/bin/python3",
        "bmc_password": "fernet:gAAAA",
        "api_token": "",
        "innocent": "fernet:gAAAAsealed",
        "ansible_ssh_private_key_file": "/keys/id",
    })
    assert kept == {"ansible_python_interpreter": "/usr/bin/python3",
                    "ansible_ssh_private_key_file": "/keys/id"}


SITE_INI = """\
[gpu_h800]
a gpufleet_rack=r7 rack_unit=12
[gpu_a100]
b
[gpu_nodes:children]
gpu_h800
gpu_a100
[gpu_nodes]
b
[cpu_nodes]
c
[gpu_nodes:vars]
driver_branch=550
ntp=ntp.gpu
[gpu_h800:vars]
driver_branch=570
ib=True
[all:vars]
site_dc=bj1
bmc_password=hunter2
"""


def test_site_groups_children_and_vars_beside_gpufleets(tmp_path: Path) -> None:
    """issue 26 item 5: the enrolled inventory's own tree comes back; a host's variables are
    those its groups do not give it alike; a gpufleet group named like a site group
    (``gpu_h800``) is one group; values are typed as Ansible's INI parser types them."""
    path = tmp_path / "hosts.ini"
    path.write_text(SITE_INI)
    parsed = load_inventory(path)
    defs = {d.name: d for d in parsed.definitions}
    assert list(defs) == ["all", "gpu_h800", "gpu_a100", "gpu_nodes", "cpu_nodes"]
    assert defs["gpu_nodes"].children == ["gpu_h800", "gpu_a100"]
    site = {d.name: SiteGroup(d.name, tuple(d.children), public_vars(d.vars))
            for d in parsed.definitions}
    hosts = []
    for ih in parsed.hosts:
        vars_ = own_vars(public_vars(ih.vars), ih.groups, site)
        hosts.append(_host(ih.name, HostState.AVAILABLE, vars=vars_, groups=tuple(ih.groups),
                           facts=None if ih.name == "c" else _host("x", HostState.AVAILABLE).facts))
    inv = inventory(hosts, site)
    # b is listed in gpu_a100 only: it is in gpu_nodes through it (as Ansible reads the file)
    assert inv["gpu_nodes"] == {"children": ["gpu_h800", "gpu_a100"],
                                "vars": {"driver_branch": 550, "ntp": "ntp.gpu"}}
    # gpufleet's model group and the site's group of the same name: one group
    assert inv["gpu_h800"]["hosts"] == ["a", "b"]  # b: gpufleet saw an H800 there too
    assert inv["gpu_h800"]["vars"]["driver_branch"] == 570
    assert inv["gpu_h800"]["vars"]["ib"] is True
    assert inv["gpu_a100"]["hosts"] == ["b"]
    assert inv["cpu_nodes"]["hosts"] == ["c"]
    assert inv["all"]["vars"] == {"site_dc": "bj1"}  # the secret never leaves
    top = set(inv["all"]["children"])
    assert {"gpu_nodes", "cpu_nodes", "state_available", "ungrouped"} <= top
    assert not top & {"gpu_h800", "gpu_a100"}  # under gpu_nodes, not beside it
    hv = inv["_meta"]["hostvars"]
    assert hv["a"]["rack_unit"] == 12 and "driver_branch" not in hv["a"]
    assert "site_dc" not in hv["c"] and "ntp" not in hv["b"]
    assert hv["a"]["gpufleet_rack"] == "r7"
    # the groups give each host what the file gives it
    assert group_vars(("gpu_h800", "gpu_nodes"), site)["driver_branch"] == "570"
    assert group_vars(("gpu_a100", "gpu_nodes"), site)["driver_branch"] == "550"


def test_a_host_whose_groups_are_not_stored_keeps_all_its_variables() -> None:
    """Enrolled before the groups were kept (migration 0028): listed in each of its groups,
    every variable a host variable."""
    merged = {"driver_branch": "550", "site_dc": "bj1"}
    assert own_vars(merged, ("gpu_nodes",), {}) == merged
    inv = inventory([_host("a", HostState.AVAILABLE, vars=merged, groups=("gpu_nodes",))])
    assert inv["gpu_nodes"]["hosts"] == ["a"] and "gpu_nodes" in inv["all"]["children"]
    assert inv["_meta"]["hostvars"]["a"]["driver_branch"] == 550
    assert typed("12.4") == 12.4 and typed("1.16.2") == "1.16.2" and typed("") == ""
