"""Pytest fixtures for real sshd lab hosts (registered from tests/conftest.py).

The lab roots live in a fresh ``/tmp/gpufleet-sshlab-*`` directory rather than under
``tmp_path_factory``: pytest's base temp (``/tmp/pytest-of-root``) is mode 0700, which hides the
host files from the unprivileged lab login user, and a parallel pytest session resets that mode.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpufleet.collect.bundle import Section
from tests.sshlab import LabError, SshLab, ensure_openssh_server

SshLabFactory = Callable[[], SshLab]


@pytest.fixture(scope="session")
def sshlab_factory() -> Iterator[SshLabFactory]:
    """Make fresh :class:`SshLab` instances; every one is stopped at the end of the session.

    Installs openssh-server when missing (never skips: a test host without sshd is a setup bug).
    """
    try:
        ensure_openssh_server()
    except LabError as exc:
        pytest.fail(f"ssh lab unavailable: {exc}")
    base = Path(tempfile.mkdtemp(prefix="gpufleet-sshlab-"))
    base.chmod(0o755)
    labs: list[SshLab] = []
    counter = itertools.count(1)

    def make() -> SshLab:
        lab = SshLab(base / f"lab{next(counter)}")
        labs.append(lab)
        return lab

    yield make
    for lab in labs:
        lab.stop()
    shutil.rmtree(base, ignore_errors=True)


CAPTURED = Path(__file__).parent / "fixtures" / "captured"


def _captured(rel: str) -> str:
    return (CAPTURED / rel).read_text(encoding="utf-8")


def sample_sections(hostname: str, variant: str = "healthy") -> dict[str, Section]:
    """A realistic, script-consistent set of sections built from captured tool output.

    ``healthy``: A10G with InfiniBand, NVLink, Xid lines. ``driver-down``: nvidia-smi fails
    (rc 9, its real message) everywhere. ``no-gpu``: no nvidia-smi at all (tool absent).
    """
    xids = "\n".join(line for line in _captured("kernel-log/gpud_dmesg-with-xid-119.log")
                     .splitlines() if "NVRM: Xid" in line)
    secs = [
        Section("hostname", hostname, "", 0),
        Section("os-release", 'PRETTY_NAME="Ubuntu 22.04.4 LTS"\nNAME="Ubuntu"\n'
                'VERSION_ID="22.04"\nID=ubuntu\nID_LIKE=debian', "", 0),
        Section("uname-r", "5.15.0-1053-nvidia", "", 0),
        Section("nproc", "96", "", 0),
        Section("meminfo", "MemTotal:       2113459528 kB\nMemFree:        2010000000 kB\n"
                "HugePages_Total:       0", "", 0),
        Section("dmi", "sys_vendor=Supermicro\nproduct_name=SYS-821GE-TNHR", "", 0),
        Section("modules", "nvidia_uvm 1802240 0 - Live 0x0000000000000000 (POE)\n"
                "nvidia 56725504 2 nvidia_uvm, Live 0x0000000000000000 (POE)", "", 0),
        Section("sysctl", "vm.max_map_count = 262144\nvm.swappiness = 60\n"
                "kernel.numa_balancing = 0", "", 0),
        Section("ibstat", _captured("ib/gpud_ibstat.47.0.h100.all.active.0.txt"), "", 0),
        Section("lspci-nn", _captured("lspci/gpud_lspci.nn.a100.txt"), "", 0),
        Section("kernel-xid", xids, "", 0),
        Section("lsblk", 'NAME="nvme0n1" SIZE="3840755982336" TRAN="nvme" ROTA="0" '
                'MODEL="SAMSUNG MZQL23T8HCLS-00A07"', "", 0),
        Section("fabricmanager", "active", "", 0),
    ]
    if variant == "healthy":
        secs += [
            Section("nvidia-smi-xml", _captured("nvidia-smi-xml/telegraf_a10g.xml"), "", 0),
            Section("nvidia-smi-q", "", "", 0),  # the script skips -q when the XML worked
            Section("topo-m", _captured(
                "nvidia-smi-topo/nvidia_gpu_exporter_h100-80gb-hbm3_590.48.01_topo-m.txt"), "", 0),
            Section("nvlink-s", _captured(
                "nvidia-smi-topo/nvidia_gpu_exporter_h100-80gb-hbm3_590.48.01_nvlink-s.txt"),
                "", 0),
        ]
    elif variant == "driver-down":
        msg = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
               "Make sure that the latest NVIDIA driver is installed and running.")
        secs += [Section(n, msg, "", 9)
                 for n in ("nvidia-smi-xml", "nvidia-smi-q", "topo-m", "nvlink-s")]
    elif variant != "no-gpu":
        raise ValueError(variant)
    return {s.name: s for s in secs}
