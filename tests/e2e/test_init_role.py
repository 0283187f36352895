"""The shipped ``system_init`` role, run for real twice on real sshd hosts (issue 26 item 5).

Accounts (a group, users with authorized keys and sudo), the sudoers drop-in checked with
``visudo``, the sshd hardening drop-in checked with ``sshd -t``, timezone, NTP (chrony), DNS,
kernel parameters (sysctl drop-in, nouveau blacklist) and the monitoring agent hook: the first
run changes the host, the second reports ``changed=0``. The lab host logs in as root (the
account is the machine's own, made with useradd and removed afterwards); every configuration
file goes under a per-host root (``system_init_root``) and no service is touched
(``system_init_manage_services: false``), since a lab host is not a running system of its own.
One host: every lab host shares the machine's passwd, so a second one could only run after the
first (forks=1) and would double the test's time (each of the three runs costs one ansible
task per host) without covering anything more than the per-host variables already do.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.sshlab import SshLab
from tests.sshlab_fixtures import sample_sections

from gpufleet.service.campaigns.campaign_actions import PLAYBOOKS_DIR, ROLES_DIR

pytestmark = [pytest.mark.sshlab, pytest.mark.long]

BIN = Path(sys.executable).parent
VISUDO = Path("/usr/sbin/visudo")


def _ensure_visudo() -> None:
    """visudo comes with sudo (a system dependency of the tests, like openssh-server)."""
    if VISUDO.exists():
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "install", "-y", "-qq", "sudo"], env=env, capture_output=True,
                   check=False, timeout=300)
    assert VISUDO.exists(), "cannot install sudo (visudo) with apt-get"


@pytest.fixture
def root_lab() -> Iterator[SshLab]:
    _ensure_visudo()
    base = Path(tempfile.mkdtemp(prefix="gpufleet-initlab-"))
    base.chmod(0o755)
    lab = SshLab(base / "lab", user="root")
    try:
        yield lab
    finally:
        lab.stop()
        shutil.rmtree(base, ignore_errors=True)


def _run(playbook: Path, inventory: Path, work: Path, *, ok: bool = True,
         limit: str | None = None, **extra: Any) -> tuple[dict[str, Any], str]:
    import ansible_runner  # type: ignore[import-untyped]

    work.mkdir()
    r = ansible_runner.run(
        private_data_dir=str(work), playbook=str(playbook), inventory=str(inventory),
        quiet=True,
        limit=limit, extravars={"ansible_become": False, **extra},
        envvars={"ANSIBLE_ROLES_PATH": str(ROLES_DIR), "ANSIBLE_PIPELINING": "True",
                 "ANSIBLE_HOST_KEY_CHECKING": "False", "ANSIBLE_NOCOLOR": "True",
                 "PATH": f"{BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}"},
    )
    out: str = r.stdout.read()
    assert (r.status == "successful") == ok, out[-4000:]
    stats: dict[str, Any] = r.stats
    return stats, out


def test_init_role_second_real_run_changes_nothing(root_lab: SshLab, tmp_path: Path) -> None:
    names = ("init-1",)
    targets = {n: root_lab.add_host(n, sample_sections(n)) for n in names}
    root_lab.start()
    tag = f"gfi{uuid.uuid4().hex[:6]}"
    group = f"{tag}-ops"
    pub = Path(f"{root_lab.client_key}.pub").read_text().strip()
    roots = {n: root_lab.root / "hosts" / n / "initroot" for n in names}
    hosts: dict[str, Any] = {}
    for n, t in targets.items():
        account = f"{tag}-{n[-1]}"
        hosts[n] = {
            "ansible_host": t.address, "ansible_port": t.port, "ansible_user": "root",
            "ansible_ssh_private_key_file": str(root_lab.client_key),
            "ansible_python_interpreter": "/usr/bin/python3",
            "system_init_root": str(roots[n]),
            "system_init_accounts": [
                {"name": account, "groups": [group], "home": str(roots[n] / "home" / account),
                 "authorized_keys": [pub], "sudo": True},
            ],
            "system_init_agent_command": (
                f"sh -c 'mkdir -p {roots[n]}/opt/agent && echo enrolled > "
                f"{roots[n]}/opt/agent/agent.conf'"),
            "system_init_agent_creates": f"{roots[n]}/opt/agent/agent.conf",
        }
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {
        "vars": {
            "system_init_manage_services": False,
            "system_init_groups": [{"name": group}],
            "system_init_timezone": "Asia/Shanghai",
            "system_init_ntp_servers": ["ntp1.example.net", "ntp2.example.net"],
            "system_init_dns_servers": ["10.0.0.53"],
            "system_init_sysctls": {"vm.max_map_count": "1048576",
                                    "net.core.rmem_max": "268435456"},
        },
        "hosts": hosts,
    }}))
    playbook = PLAYBOOKS_DIR / "system-init.yml"
    try:
        first, _ = _run(playbook, inventory, tmp_path / "run1")
        for n in names:
            assert first["changed"].get(n, 0) >= 10, first
        assert not first["failures"]
        for n in names:
            r = roots[n]
            account = f"{tag}-{n[-1]}"
            entry = pwd.getpwnam(account)  # a real account, in the machine's passwd
            assert entry.pw_dir == str(r / "home" / account)
            assert (r / "home" / account / ".ssh" / "authorized_keys").read_text().strip() \
                == pub
            sudoers = r / "etc" / "sudoers.d" / "90-gpufleet"
            assert f"{account} ALL=(ALL) NOPASSWD: ALL" in sudoers.read_text()
            assert oct(sudoers.stat().st_mode & 0o777) == "0o440"
            check = subprocess.run([str(VISUDO), "-cf", str(sudoers)], capture_output=True,
                                   text=True, check=False)
            assert check.returncode == 0, check.stdout + check.stderr
            sshd = (r / "etc" / "ssh" / "sshd_config.d" / "90-gpufleet.conf").read_text()
            assert "PasswordAuthentication no" in sshd and "PermitRootLogin prohibit-password" \
                in sshd
            assert os.readlink(r / "etc" / "localtime") == "/usr/share/zoneinfo/Asia/Shanghai"
            assert (r / "etc" / "timezone").read_text() == "Asia/Shanghai\n"
            chrony = (r / "etc" / "chrony" / "chrony.conf").read_text()
            assert "server ntp1.example.net iburst" in chrony
            assert "vm.max_map_count = 1048576" in (
                r / "etc" / "sysctl.d" / "90-gpufleet.conf").read_text()
            assert "blacklist nouveau" in (
                r / "etc" / "modprobe.d" / "blacklist-nouveau.conf").read_text()
            assert (r / "opt" / "agent" / "agent.conf").read_text() == "enrolled\n"
            assert group in subprocess.run(["id", "-nG", account], capture_output=True,
                                           text=True, check=True).stdout

        second, recap = _run(playbook, inventory, tmp_path / "run2")
        for n in names:
            assert second["changed"].get(n, 0) == 0, second
            assert re.search(rf"^{n}\s+: ok=\d+\s+changed=0\s", recap, re.M), recap[-2000:]
        assert not second["failures"]

        # A sudo rule visudo refuses is not written: the run fails, the drop-in stays.
        sudoers = roots["init-1"] / "etc" / "sudoers.d" / "90-gpufleet"
        before = sudoers.read_text()
        broken = [{**hosts["init-1"]["system_init_accounts"][0], "sudo": "ALL=(ALL NOPASSWD"}]
        _, out = _run(playbook, inventory, tmp_path / "run3", ok=False, limit="init-1",
                      system_init_accounts=broken)
        assert "failed to validate" in out, out[-3000:]
        assert sudoers.read_text() == before
    finally:
        for n in names:
            subprocess.run(["userdel", f"{tag}-{n[-1]}"], capture_output=True, check=False)
        subprocess.run(["groupdel", group], capture_output=True, check=False)
