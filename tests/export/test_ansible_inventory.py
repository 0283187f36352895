"""Ansible dynamic inventory against real sshd lab hosts, on SQLite and PostgreSQL.

``gpufleet inventory script PATH`` writes an executable inventory; the real ``ansible-inventory``
and ``ansible`` (ansible-core from PyPI, in the venv) read it: groups by state, GPU model, pool,
fabric, validated profile and rack; quarantined and maintenance hosts stay reachable under their
state groups (``ansible -m ping`` answers from every host); no secret leaves gpufleet.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from tests.sshlab_fixtures import SshLabFactory

from gpufleet.domain.spec import Baseline
from gpufleet.inventory import load_inventory
from gpufleet.lab.fleet import create_fleet
from gpufleet.lab.renderers import render_sections
from gpufleet.secrets import SecretBox
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.exports.ansible import write_inventory_script
from gpufleet.service.hosts import operations
from gpufleet.service.hosts.baselines import save_baseline, set_pool_baseline
from gpufleet.service.hosts.enroll import enroll
from gpufleet.service.hosts.validate import validate

pytestmark = pytest.mark.sshlab

BIN = Path(sys.executable).parent
COMMAND = (sys.executable, "-m", "gpufleet.cli.main")


def _ansible_env(tmp_path: Path) -> dict[str, str]:
    cfg = tmp_path / "ansible.cfg"
    # The README's snippet: host keys of lab hosts are not in known_hosts. Pipelining: the lab
    # login's PATH holds only the fake GPU tools and a few basics (no dd to copy modules).
    cfg.write_text(
        "[defaults]\nhost_key_checking = False\ngathering = explicit\n"
        "interpreter_python = auto_silent\ndeprecation_warnings = False\n"
        f"local_tmp = {tmp_path / 'ansible-local'}\n"
        "[connection]\npipelining = True\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(
        ANSIBLE_CONFIG=str(cfg),
        LC_ALL="C.UTF-8",
        ANSIBLE_REMOTE_TMP="/tmp/.ansible-gpufleetlab",
        ANSIBLE_SSH_ARGS="-o ControlMaster=no -o ControlPersist=no -o UserKnownHostsFile=/dev/null",
    )
    return env


def test_inventory_script_drives_ansible_on_real_sshd_hosts(
    fleet: Fleet, sshlab_factory: SshLabFactory, tmp_path: Path
) -> None:
    lf = create_fleet(3, models=["a100-8x"], faults={"gpu-03": ["ecc-uncorrectable"]})
    lab = sshlab_factory()
    targets = {h.name: lab.add_host(h.name, render_sections(h)) for h in lf.hosts}
    lab.start()
    lines = ["[gpu]"] + [
        f"{n} ansible_host={t.address} ansible_port={t.port} ansible_user={t.user}"
        f" gpufleet_rack=r{i % 2}"
        for i, (n, t) in enumerate(targets.items())
    ]
    lines += [
        "gpu-01 bmc_password=hunter2-secret",
        "",
        "[gpu:vars]",
        f"ansible_ssh_private_key_file={lab.client_key}",
        "ansible_python_interpreter=/usr/bin/python3",
        "gpufleet_gpu_count=8",
        "gpufleet_pool=train",
    ]
    inv = tmp_path / "hosts.ini"
    inv.write_text("\n".join(lines) + "\n")
    enroll(fleet, load_inventory(inv), box=SecretBox(Fernet.generate_key()))
    validate(fleet)
    # The pool's baseline after validation (its pins differ from the lab's driver): the
    # inventory carries what the baseline says, so a playbook installs that.
    save_baseline(fleet, Baseline(name="ref", driver="550.90.07", cuda="12.4",
                                  fabric_manager="550.90.07", container_toolkit="1.16.2"))
    set_pool_baseline(fleet, "train", "ref")
    operations.maintenance_on(fleet, "gpu-02", "bios update")

    script = write_inventory_script(fleet, tmp_path / "gpufleet-inventory", COMMAND)
    assert os.access(script, os.X_OK)
    env = _ansible_env(tmp_path)

    res = subprocess.run(
        [str(BIN / "ansible-inventory"), "-i", str(script), "--list"],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )
    assert res.returncode == 0, res.stderr
    assert "hunter2" not in res.stdout and "fernet:" not in res.stdout
    data = json.loads(res.stdout)
    hv = data["_meta"]["hostvars"]
    assert set(hv) == {"gpu-01", "gpu-02", "gpu-03"}
    assert "bmc_password" not in hv["gpu-01"]

    def members(group: str) -> set[str]:
        return set(data.get(group, {}).get("hosts", []))

    assert members("gpu_a100") == {"gpu-01", "gpu-02", "gpu-03"}
    assert members("pool_train") == {"gpu-01", "gpu-02", "gpu-03"}
    assert members("state_maintenance") == {"gpu-02"}
    assert members("state_quarantined") == {"gpu-03"}
    assert members("rack_r0") == {"gpu-01", "gpu-03"} and members("rack_r1") == {"gpu-02"}
    assert members("fabric_ib") >= {"gpu-01"}
    g1 = hv["gpu-01"]
    assert g1["gpufleet_state"] == "available"
    assert g1["gpufleet_profiles"] and all(
        "gpu-01" in members(f"profile_{p.replace('-', '_')}") for p in g1["gpufleet_profiles"]
    )
    assert not any("gpu-03" in members(f"profile_{p.replace('-', '_')}")
                   for p in g1["gpufleet_profiles"])
    assert g1["ansible_port"] == targets["gpu-01"].port
    assert g1["ansible_user"] == targets["gpu-01"].user
    assert g1["gpu_driver_version"] == "550.90.07" and g1["cuda_version"] == "12.4"
    assert g1["fabric_manager_version"] == "550.90.07"
    assert g1["container_toolkit_version"] == "1.16.2"
    assert g1["gpu_count"] == 8 and g1["gpu_model"] == "a100"
    assert g1["gpu_memory_mib"] == 81920
    assert hv["gpu-03"]["gpufleet_fault"]  # quarantined with its fault

    # --host NAME answers the same variables (Ansible calls it without _meta).
    one = subprocess.run([str(script), "--host", "gpu-01"], capture_output=True, text=True,
                         env=env, timeout=60, check=False)
    assert one.returncode == 0, one.stderr
    assert json.loads(one.stdout) == g1

    # Every host answers, the quarantined and the maintenance one too.
    ping = subprocess.run(
        [str(BIN / "ansible"), "-i", str(script), "gpu_a100", "-m", "ping", "-f", "3"],
        capture_output=True, text=True, env=env, timeout=180, check=False,
    )
    assert ping.returncode == 0, ping.stdout + ping.stderr
    for name in ("gpu-01", "gpu-02", "gpu-03"):
        assert f"{name} | SUCCESS =>" in ping.stdout, ping.stdout
    q = subprocess.run(
        [str(BIN / "ansible"), "-i", str(script), "state_quarantined", "--list-hosts"],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )
    assert q.returncode == 0 and "gpu-03" in q.stdout and "gpu-01" not in q.stdout
