"""The Ansible roles gpufleet ships (``src/gpufleet/playbooks``): ansible-lint (production
profile) passes, and both playbooks run in check mode against real sshd lab hosts; the driver
role's guard makes a run on a host that already has the target driver change nothing."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from tests.sshlab import SshLab
from tests.sshlab_fixtures import SshLabFactory, sample_sections

from gpufleet.collect.transport import Target
from gpufleet.service.campaigns.campaign_actions import PLAYBOOKS_DIR, ROLES_DIR

pytestmark = pytest.mark.sshlab

TARGET = "570.86.15"
BIN = Path(sys.executable).parent


def test_shipped_roles_pass_ansible_lint() -> None:
    res = subprocess.run(
        [str(BIN / "ansible-lint"), "--offline", "--profile", "production", str(PLAYBOOKS_DIR)],
        capture_output=True, text=True, check=False, cwd=PLAYBOOKS_DIR,
        env={**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}",
             "ANSIBLE_ROLES_PATH": str(ROLES_DIR)},
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "Passed" in res.stdout + res.stderr


def _fake_modinfo(lab: SshLab, name: str, version: str) -> None:
    """What ``modinfo -F version nvidia`` says on the host: the driver installed on disk
    (a tool in the host's bin/, see the layout in tests/sshlab.py)."""
    tool = lab.root / "hosts" / name / "bin" / "modinfo"
    tool.write_text(f"#!/bin/sh\necho {version}\n")
    tool.chmod(0o755)


def _run(
    playbook: Path, targets: list[Target], key: Path, extra: dict[str, object]
) -> dict[str, Any]:
    import ansible_runner  # type: ignore[import-untyped]

    with tempfile.TemporaryDirectory() as d:
        inv = Path(d) / "hosts.ini"
        inv.write_text("[lab]\n" + "".join(
            f"{t.name} ansible_host={t.address} ansible_port={t.port} ansible_user={t.user} "
            f"ansible_ssh_private_key_file={key} ansible_python_interpreter=/usr/bin/python3\n"
            for t in targets))
        r = ansible_runner.run(
            private_data_dir=d, host_cwd=d, playbook=str(playbook), inventory=str(inv),
            cmdline="--check --diff", quiet=True,
            extravars={"ansible_become": False, **extra},
            envvars={"ANSIBLE_ROLES_PATH": str(ROLES_DIR), "ANSIBLE_PIPELINING": "True",
                     "ANSIBLE_HOST_KEY_CHECKING": "False",
                     "PATH": f"{BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}"},
        )
        out = r.stdout.read()
        assert r.status == "successful", out[-3000:]
        stats: dict[str, Any] = r.stats
        return stats


def test_roles_run_in_check_mode_against_lab_hosts(
    sshlab_factory: SshLabFactory, tmp_path: Path
) -> None:
    lab = sshlab_factory()
    targets = [lab.add_host(n, sample_sections(n)) for n in ("init-1", "drv-1", "drv-2")]
    lab.start()
    init, old, done = targets

    # DNS and NTP are left out: their handlers restart systemd-resolved / chrony, which a
    # lab host (no systemd) does not have.
    stats = _run(PLAYBOOKS_DIR / "system-init.yml", [init], lab.client_key, {})
    # Nothing of it is on the lab host yet: hostname, sysctl drop-in, nouveau blacklist.
    assert stats["changed"].get("init-1", 0) >= 3 and not stats["failures"]

    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / f"NVIDIA-Linux-x86_64-{TARGET}.run").write_text("#!/bin/sh\nexit 0\n")
    _fake_modinfo(lab, "drv-1", "535.154.05")  # the old driver on disk: installs
    _fake_modinfo(lab, "drv-2", TARGET)  # already there: the guard skips the install
    stats = _run(PLAYBOOKS_DIR / "upgrade-driver.yml", [old, done], lab.client_key,
                 {"gpufleet_target": {"driver": TARGET, "cuda": "12.8"},
                  "gpu_driver_repo": str(repo)})
    assert stats["changed"].get("drv-1", 0) >= 2  # package dir, installer copied (+ run)
    assert stats["changed"].get("drv-2", 0) == 0  # a second run changes nothing
    assert not stats["failures"]
