"""Issue 26 item 9: not every node is a GPU node.

A mixed inventory (GPU hosts, a ``cpu`` node, a ``storage`` node, and a GPU host the
inventory wrongly calls a CPU node) enrolls, collects with the same script and validates on
both databases: the cpu/storage hosts become available against their role's profiles (no GPU
check), the GPU host against the GPU profiles only; ``allocate`` and ``capacity`` never count
the other nodes, ``summary`` counts them apart, and their Kubernetes labels and Slurm nodes
carry nothing of a GPU. The lab's ``cpu-node`` model answers as a GPU-less host: nvidia-smi
not found, an lspci without an NVIDIA device (real capture, the GPU line taken out).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select

from gpufleet.domain.placement import Request
from gpufleet.domain.profiles import load_profiles
from gpufleet.errors import ConfigError, InventoryError
from gpufleet.inventory import load_inventory
from gpufleet.lab.fleet import create_fleet, write_inventory
from gpufleet.service.allocation.allocation import allocate
from gpufleet.service.allocation.capacity import capacity
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.exports.slurm import node_defs
from gpufleet.service.hosts.collect import collect
from gpufleet.service.hosts.enroll import enroll
from gpufleet.service.hosts.labels import lean_host_labels
from gpufleet.service.hosts.validate import validate
from gpufleet.service.views.summary import fleet_summary, host_labels
from gpufleet.store.tables import Host

# gpu-01, gpu-02: GPU hosts; gpu-03: a cpu node; gpu-04: the same model made a storage node
# by a host variable; gpu-05: a GPU host the inventory calls a cpu node (a mislabel).
MODELS = ["a10g-1x", "l40s-1x", "cpu-node", "cpu-node", "a10g-1x"]
HOUR = timedelta(hours=1)
GPU_WORDS = ("nvidia.com/", "gpu", "cuda", "mig", "accelerator")


def _mixed_lab(fleet: Fleet, tmp_path: Path) -> None:
    d = tmp_path / "lab"
    fl = create_fleet(len(MODELS), models=MODELS, faults={})
    fl.save(d)
    inv = write_inventory(fl, d / "inventory.ini", transport="sim", lab_dir=d)
    text = inv.read_text()
    # host variables win over the cpu_nodes group rule (gpufleet_role=cpu)
    for host, role in (("gpu-04", "storage"), ("gpu-05", "cpu gpufleet_gpu_count=0")):
        text = text.replace(f"{host} gpufleet_", f"{host} gpufleet_role={role} gpufleet_")
    inv.write_text(text)
    enroll(fleet, load_inventory(inv))


def test_mixed_inventory_validates_each_role_against_its_profiles(
    fleet: Fleet, tmp_path: Path
) -> None:
    _mixed_lab(fleet, tmp_path)
    with fleet.db.session() as s:
        roles = {h.name: h.role for h in s.scalars(select(Host))}
    assert roles == {
        "gpu-01": "gpu", "gpu-02": "gpu", "gpu-03": "cpu", "gpu-04": "storage", "gpu-05": "cpu"
    }  # fmt: skip
    report = collect(fleet)
    assert report.counts == {"ok": 5}, report.counts
    validate(fleet, collect_first=False)
    with fleet.db.session() as s:
        hosts = {h.name: h for h in s.scalars(select(Host))}
        state = {n: h.state.value for n, h in hosts.items()}
        profiles = {n: list(h.profiles) for n, h in hosts.items()}
        reason = hosts["gpu-05"].status_reason or ""
    assert state["gpu-01"] == state["gpu-02"] == "available"
    assert "cpu" not in profiles["gpu-01"] and "storage" not in profiles["gpu-01"]
    assert "test" in profiles["gpu-01"]
    # the GPU-less nodes pass their role's profile, none of the GPU ones
    assert state["gpu-03"] == "available" and profiles["gpu-03"] == ["cpu"]
    assert state["gpu-04"] == "available" and profiles["gpu-04"] == ["storage"]
    # a GPU host called a cpu node is not hidden from sight: it stays out, and says why
    assert state["gpu-05"] == "validating", state
    assert "no_accelerators" in reason and "GPU" in reason, reason

    # capacity and placement count the GPU hosts only
    cap = capacity(fleet)
    assert sum(cap.totals.values()) == 2, cap.totals  # one A10G + one L40S
    assert {r["model"] for r in cap.rows} <= {"A10G", "L40S", "NVIDIA A10G", "NVIDIA L40S"}
    refused = allocate(fleet, Request(hosts=3), owner="alice", purpose="t", duration=HOUR)
    assert not refused.ok
    got = allocate(fleet, Request(hosts=2), owner="alice", purpose="t", duration=HOUR)
    assert got.ok and got.lease is not None
    assert sorted(got.lease.hosts) == ["gpu-01", "gpu-02"]

    sm = fleet_summary(fleet)
    assert sm.nodes_by_role == {
        "cpu": {"hosts": 2, "available": 1},
        "storage": {"hosts": 1, "available": 1},
    }
    assert sm.gpus_total == 2, sm.gpus_total  # gpu-05's A10G is no capacity while a cpu node
    assert "cpu" not in sm.hosts_per_profile and "storage" not in sm.gpus_per_profile_model

    labels = {h.host: h.labels for h in host_labels(fleet)}
    for name in ("gpu-03", "gpu-04", "gpu-05"):
        gpuish = [
            k for k in labels[name]
            if any(w in k.lower().removeprefix("gpufleet.io/") for w in GPU_WORDS)
        ]  # fmt: skip
        assert not gpuish, (name, gpuish)
        assert labels[name]["gpufleet.io/role"] == roles[name]
    assert labels["gpu-03"]["gpufleet.io/validated.cpu"] == "true"
    assert labels["gpu-04"]["gpufleet.io/validated.storage"] == "true"
    assert labels["gpu-01"]["nvidia.com/gpu.count"] == "1"
    assert "gpufleet.io/role" not in labels["gpu-01"]
    # `gpufleet labels HOST` (the lean read) says the same
    lean = lean_host_labels(fleet.db.url, "gpu-03")
    assert lean is not None and lean[0].labels == labels["gpu-03"]

    nodes = {n.name: n for n in node_defs(fleet)}
    for name in ("gpu-03", "gpu-04", "gpu-05"):
        n = nodes[name]
        assert n.gpus == 0 and n.gpu_type is None and n.gres == (), n
        assert not [f for f in n.features if "gpu" in f.lower()], n.features
    assert nodes["gpu-03"].cpus == 64
    assert nodes["gpu-01"].gpus == 1


def test_a_role_typo_is_refused_naming_host_and_value(tmp_path: Path) -> None:
    inv = tmp_path / "inv.ini"
    inv.write_text(
        "[cpu_nodes]\ncpu-01 ansible_host=10.0.0.1\ncpu-02 ansible_host=10.0.0.2 "
        "gpufleet_role=stroage\n\n[cpu_nodes:vars]\ngpufleet_role=cpu\n"
    )
    with pytest.raises(InventoryError) as err:
        load_inventory(inv)
    msg = str(err.value)
    assert "cpu-02" in msg and "'stroage'" in msg and "did you mean storage?" in msg, msg
    # a group rule names the role of every host of the group
    inv.write_text("[cpu_nodes]\ncpu-01 ansible_host=10.0.0.1\n[cpu_nodes:vars]\ngpufleet_role=cpu")
    assert [h.role.value for h in load_inventory(inv).hosts] == ["cpu"]
    # a GPU-less node that expects GPUs contradicts itself
    inv.write_text("[n]\ncpu-01 gpufleet_role=cpu\n[n:vars]\ngpufleet_gpu_count=8\n")
    with pytest.raises(InventoryError, match="cpu-01: gpufleet_role=cpu expects no GPU"):
        load_inventory(inv)


def test_profiles_carry_their_role() -> None:
    profiles = load_profiles()
    assert profiles["cpu"].role == "cpu" and profiles["storage"].role == "storage"
    assert profiles["test"].role == "gpu" and profiles["training-multinode"].role == "gpu"
    assert "disks" in profiles["storage"].checks and "gpu_count" not in profiles["cpu"].checks
    user = "profiles:\n  nas:\n    extends: storage\n    checks: {disks: {min_disks: 4}}\n"
    assert load_profiles(user)["nas"].role == "storage"  # inherited with the checks
    with pytest.raises(ConfigError, match="unknown role 'cpus'"):
        load_profiles("profiles:\n  x:\n    role: cpus\n    checks: {os_facts: {}}\n")
