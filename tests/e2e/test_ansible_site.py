"""A site's own playbook runs unchanged against gpufleet's dynamic inventory (issue 26 item 5).

The site keeps a ``hosts.ini`` with its groups (``gpu_nodes`` with the children ``gpu_a100``
and ``gpu_h100``, ``cpu_nodes``), group variables at three levels (``all``, parent, child), a
host variable and a playbook ``group_vars/`` file. gpufleet enrolls it and validates the hosts
(real sshd lab hosts); then the same ``site.yml`` runs with ``-i hosts.ini`` and with ``-i`` the
inventory script, with the real ``ansible-playbook``: every play reaches the same hosts and every
task prints the same values. gpufleet's own groups and variables (state, pool, model, baseline,
validated profiles, rack) sit beside the site's. On SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from tests.export.test_ansible_inventory import _ansible_env
from tests.sshlab_fixtures import SshLabFactory

from gpufleet.domain.spec import Baseline
from gpufleet.inventory import load_inventory
from gpufleet.lab.fleet import create_fleet
from gpufleet.lab.renderers import render_sections
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.exports.ansible import write_inventory_script
from gpufleet.service.hosts.baselines import save_baseline, set_pool_baseline
from gpufleet.service.hosts.enroll import enroll
from gpufleet.service.hosts.validate import validate

pytestmark = [pytest.mark.sshlab, pytest.mark.long]

BIN = Path(sys.executable).parent
COMMAND = (sys.executable, "-m", "gpufleet.cli.main")

SITE_PLAYBOOK = """\
---
- name: Every GPU node
  hosts: gpu_nodes
  gather_facts: false
  tasks:
    - name: Say what the site configured
      ansible.builtin.command: >-
        echo {{ inventory_hostname }} dc={{ site_dc }} ntp={{ ntp_server }}
        driver={{ driver_branch }} u={{ rack_unit | default('-') }} motd={{ site_motd }}
      register: said
      changed_when: false

- name: H100 nodes only
  hosts: gpu_h100
  gather_facts: false
  tasks:
    - name: Say the branch
      ansible.builtin.command: "echo {{ inventory_hostname }} h100 {{ driver_branch }}"
      register: said
      changed_when: false

- name: CPU nodes
  hosts: cpu_nodes
  gather_facts: false
  tasks:
    - name: Say the NTP server
      ansible.builtin.command: "echo {{ inventory_hostname }} cpu {{ ntp_server }} {{ site_dc }}"
      register: said
      changed_when: false
"""


def _hosts_ini(targets: dict[str, Any], key: Path) -> str:
    def line(name: str, extra: str = "") -> str:
        t = targets[name]
        return f"{name} ansible_host={t.address} ansible_port={t.port}{extra}"

    return "\n".join([
        "[gpu_a100]",
        line("gpu-01", " rack_unit=12 gpufleet_rack=r1"),
        "[gpu_h100]",
        line("gpu-02", " gpufleet_rack=r2"),
        "[gpu_nodes:children]",
        "gpu_a100",
        "gpu_h100",
        "[cpu_nodes]",
        line("cpu-01"),
        "",
        "[gpu_nodes:vars]",
        "gpufleet_pool=train",
        "ntp_server=ntp.gpu.example",
        "driver_branch=550",
        "[gpu_h100:vars]",
        "driver_branch=570",
        "[cpu_nodes:vars]",
        "gpufleet_role=cpu",
        "gpufleet_pool=cpu",
        "ntp_server=ntp.cpu.example",
        "[all:vars]",
        "ansible_user=gpufleetlab",
        f"ansible_ssh_private_key_file={key}",
        "ansible_python_interpreter=/usr/bin/python3",
        "site_dc=bj1",
        "",
    ])


def _play(playbook: Path, inventory: Path, env: dict[str, str]) -> dict[str, dict[str, str]]:
    """Run ``playbook`` with ``ansible-playbook`` (through ansible-runner, for its events):
    play name -> host -> what its task printed."""
    import ansible_runner  # type: ignore[import-untyped]

    with tempfile.TemporaryDirectory() as d:
        r = ansible_runner.run(
            private_data_dir=d, playbook=str(playbook), inventory=str(inventory), forks=3,
            quiet=True, envvars={**{k: v for k, v in env.items() if k.startswith("ANSIBLE_")},
                                 "PATH": f"{BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}"},
        )
        assert r.status == "successful", r.stdout.read()[-4000:]
        out: dict[str, dict[str, str]] = {}
        for ev in r.events:
            data = ev.get("event_data", {})
            if ev["event"] == "runner_on_ok":
                out.setdefault(data["play"], {})[data["host"]] = data["res"]["stdout"]
        return out


def _hostvars(inventory: Path, env: dict[str, str]) -> dict[str, dict[str, Any]]:
    res = subprocess.run([str(BIN / "ansible-inventory"), "-i", str(inventory), "--list"],
                         capture_output=True, text=True, env=env, timeout=120, check=False)
    assert res.returncode == 0, res.stderr
    data: dict[str, Any] = json.loads(res.stdout)
    hv: dict[str, dict[str, Any]] = data["_meta"]["hostvars"]
    return hv


def test_site_playbook_runs_unchanged_against_the_dynamic_inventory(
    fleet: Fleet, sshlab_factory: SshLabFactory, tmp_path: Path
) -> None:
    gpus = create_fleet(2, models=["a100-8x", "h100-8x"], faults={})
    cpus = create_fleet(1, models=["cpu-node"], faults={}, prefix="cpu")
    lab = sshlab_factory()
    targets = {h.name: lab.add_host(h.name, render_sections(h))
               for h in [*gpus.hosts, *cpus.hosts]}
    lab.start()
    site = tmp_path / "site"
    (site / "playbooks" / "group_vars").mkdir(parents=True)
    inv = site / "hosts.ini"
    inv.write_text(_hosts_ini(targets, lab.client_key))
    playbook = site / "playbooks" / "site.yml"
    playbook.write_text(SITE_PLAYBOOK)
    # A playbook group_vars file outranks the inventory's group vars, not its host vars.
    (site / "playbooks" / "group_vars" / "gpu_nodes.yml").write_text(
        "---\nsite_motd: gpu-{{ site_dc }}\nntp_server: ntp.playbook.example\n")

    enroll(fleet, load_inventory(inv))
    validate(fleet)
    save_baseline(fleet, Baseline(name="ref", driver="550.90.07", cuda="12.4"))
    set_pool_baseline(fleet, "train", "ref")
    script = write_inventory_script(fleet, tmp_path / "gpufleet-inventory", COMMAND)
    env = _ansible_env(tmp_path)

    by_file = _play(playbook, inv, env)
    by_gpufleet = _play(playbook, script, env)
    assert by_gpufleet == by_file
    assert by_file["Every GPU node"] == {
        "gpu-01": "gpu-01 dc=bj1 ntp=ntp.playbook.example driver=550 u=12 motd=gpu-bj1",
        "gpu-02": "gpu-02 dc=bj1 ntp=ntp.playbook.example driver=570 u=- motd=gpu-bj1",
    }
    assert by_file["H100 nodes only"] == {"gpu-02": "gpu-02 h100 570"}
    assert by_file["CPU nodes"] == {"cpu-01": "cpu-01 cpu ntp.cpu.example bj1"}

    # Every variable the file gives a host, the dynamic inventory gives it alike; gpufleet's
    # own are added beside them.
    site_vars, ours = _hostvars(inv, env), _hostvars(script, env)
    for name, values in site_vars.items():
        assert {k: ours[name].get(k) for k in values} == values, name
    g1, c1 = ours["gpu-01"], ours["cpu-01"]
    assert g1["gpufleet_state"] == "available" and g1["gpufleet_pool"] == "train"
    assert g1["gpu_model"] == "a100" and g1["gpufleet_baseline"] == "ref"
    assert g1["gpu_driver_version"] == "550.90.07" and g1["gpufleet_profiles"]
    assert c1["gpufleet_pool"] == "cpu" and c1["gpu_count"] == 0

    res = subprocess.run([str(BIN / "ansible-inventory"), "-i", str(script), "--list",
                          "--export"], capture_output=True, text=True, env=env, timeout=120,
                         check=False)
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    # The site's tree, children and vars where the file has them ...
    assert set(data["gpu_nodes"]["children"]) == {"gpu_a100", "gpu_h100"}
    assert data["gpu_nodes"]["vars"]["driver_branch"] == 550  # typed as the INI file types it
    assert data["gpu_h100"]["vars"]["driver_branch"] == 570
    assert data["all"]["vars"]["site_dc"] == "bj1"
    assert "gpu-01" in data["gpu_a100"]["hosts"] and "cpu-01" in data["cpu_nodes"]["hosts"]
    # ... and gpufleet's groups beside them.
    assert "gpu-01" in data["state_available"]["hosts"]
    assert "gpu-01" in data["pool_train"]["hosts"] and "cpu-01" in data["pool_cpu"]["hosts"]
    assert "gpu-01" in data["baseline_ref"]["hosts"]
    assert "gpu-01" in data["rack_r1"]["hosts"] and "gpu-02" in data["rack_r2"]["hosts"]
    assert any("gpu-01" in data[g]["hosts"] for g in data if g.startswith("profile_"))
