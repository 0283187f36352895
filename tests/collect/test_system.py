"""Tests for the small OS-file parsers (inline examples in the real formats)."""

from __future__ import annotations

import shlex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.collect.system import (
    parse_lsblk_pairs,
    parse_meminfo_total_kib,
    parse_modules,
    parse_os_release,
    parse_sysctl,
)
from gpufleet.domain.facts import BlockDevice, OsRelease
from gpufleet.errors import ParseError

UBUNTU_OS_RELEASE = """\
PRETTY_NAME="Ubuntu 22.04.5 LTS"
NAME="Ubuntu"
VERSION_ID="22.04"
VERSION="22.04.5 LTS (Jammy Jellyfish)"
VERSION_CODENAME=jammy
ID=ubuntu
ID_LIKE=debian
HOME_URL="https://www.ubuntu.com/"
UBUNTU_CODENAME=jammy
"""

ROCKY_OS_RELEASE = """\
NAME="Rocky Linux"
VERSION="9.4 (Blue Onyx)"
ID="rocky"
ID_LIKE="rhel centos fedora"
VERSION_ID="9.4"
PLATFORM_ID="platform:el9"
PRETTY_NAME="Rocky Linux 9.4 (Blue Onyx)"
# a comment line
SUPPORT_END='2032-05-31'
"""


def test_os_release_ubuntu() -> None:
    assert parse_os_release(UBUNTU_OS_RELEASE) == OsRelease(
        id="ubuntu", version_id="22.04", pretty_name="Ubuntu 22.04.5 LTS"
    )


def test_os_release_rocky_quoted_and_comments() -> None:
    assert parse_os_release(ROCKY_OS_RELEASE) == OsRelease(
        id="rocky", version_id="9.4", pretty_name="Rocky Linux 9.4 (Blue Onyx)"
    )


def test_os_release_garbage_raises() -> None:
    with pytest.raises(ParseError) as err:
        parse_os_release('ID=ubuntu\nthis is not os-release\n', source="h1:os-release")
    assert (err.value.source, err.value.line) == ("h1:os-release", 2)
    with pytest.raises(ParseError, match="PRETTY_NAME"):
        parse_os_release('PRETTY_NAME="Ubuntu 22.04\n')  # cut inside the quotes
    with pytest.raises(ParseError):
        parse_os_release("")


PROC_MODULES = """\
nvidia_uvm 1531904 4 - Live 0x0000000000000000 (POE)
nvidia_drm 77824 0 - Live 0x0000000000000000 (POE)
nvidia_modeset 1306624 1 nvidia_drm, Live 0x0000000000000000 (POE)
nvidia 56717312 45 nvidia_uvm,nvidia_modeset, Live 0x0000000000000000 (POE)
mlx5_ib 446464 0 - Live 0x0000000000000000
ib_core 434176 8 rdma_ucm,ib_ipoib,mlx5_ib,nvidia_peermem, Live 0x0000000000000000
"""

LSMOD = """\
Module                  Size  Used by
nvidia_uvm           1531904  4
nvidia_drm             77824  0
nvidia              56717312  45 nvidia_uvm,nvidia_modeset
nouveau              2433024  0
"""


def test_modules_proc_and_lsmod() -> None:
    assert parse_modules(PROC_MODULES) == [
        "nvidia_uvm", "nvidia_drm", "nvidia_modeset", "nvidia", "mlx5_ib", "ib_core",
    ]
    assert parse_modules(LSMOD) == ["nvidia_uvm", "nvidia_drm", "nvidia", "nouveau"]
    assert parse_modules("") == []


def test_modules_garbage_raises() -> None:
    with pytest.raises(ParseError) as err:
        parse_modules(PROC_MODULES + "cat: /proc/modules: No such file\n", "h1:modules")
    assert (err.value.source, err.value.line) == ("h1:modules", 7)


def test_sysctl() -> None:
    text = (
        "vm.max_map_count = 1048576\n"
        "vm.swappiness = 60\n"
        "net.core.rmem_max = 212992\n"
        "kernel.numa_balancing = 0\n"
        "net.ipv4.tcp_rmem = 4096\t131072\t6291456\n"
    )
    assert parse_sysctl(text) == {
        "vm.max_map_count": "1048576",
        "vm.swappiness": "60",
        "net.core.rmem_max": "212992",
        "kernel.numa_balancing": "0",
        "net.ipv4.tcp_rmem": "4096 131072 6291456",
    }
    assert parse_sysctl("") == {}


def test_sysctl_garbage_raises() -> None:
    with pytest.raises(ParseError) as err:
        parse_sysctl("vm.swappiness = 60\nsysctl: permission denied on key\n")
    assert err.value.line == 2


LSBLK = (
    'NAME="sda" SIZE="480103981056" TRAN="sata" ROTA="0" MODEL="SAMSUNG MZ7L3480HCHQ-00A07"\n'
    'NAME="nvme0n1" SIZE="3840755982336" TRAN="nvme" ROTA="0" MODEL="SAMSUNG MZQL23T8HCLS-00A07"\n'
    'NAME="sdb" SIZE="8001563222016" TRAN="sas" ROTA="1" MODEL="HGST\\x20HUS728T8TAL"\n'
    'NAME="loop0" SIZE="67108864" TRAN="" ROTA="0" MODEL=""\n'
)


def test_lsblk_pairs() -> None:
    devs = parse_lsblk_pairs(LSBLK)
    assert devs[0] == BlockDevice(name="sda", size_bytes=480103981056, transport="sata",
                                  rotational=False, model="SAMSUNG MZ7L3480HCHQ-00A07")
    assert devs[1].size_bytes == 3840755982336
    assert devs[2].rotational is True
    assert devs[2].model == "HGST HUS728T8TAL"  # \x20 unescaped
    assert (devs[3].transport, devs[3].model) == (None, None)


def test_lsblk_garbage_and_missing_size_raise() -> None:
    with pytest.raises(ParseError) as err:
        parse_lsblk_pairs('NAME="sda" SIZE="1" TRAN="sata"\nsda 1.8T disk\n', "h1:lsblk")
    assert (err.value.source, err.value.line) == ("h1:lsblk", 2)
    with pytest.raises(ParseError, match="SIZE"):
        parse_lsblk_pairs('NAME="sda" SIZE="1.8T" TRAN="sata" ROTA="0" MODEL="x"\n')
    with pytest.raises(ParseError):
        parse_lsblk_pairs('NAME="sda" SIZE="12" MODEL="cut\n')


MEMINFO = """\
MemTotal:       2113412564 kB
MemFree:        2051398244 kB
MemAvailable:   2075117176 kB
Buffers:          551372 kB
"""


def test_meminfo_total() -> None:
    assert parse_meminfo_total_kib(MEMINFO) == 2113412564
    with pytest.raises(ParseError, match="MemTotal"):
        parse_meminfo_total_kib("MemFree: 1 kB\n")
    with pytest.raises(ParseError) as err:
        parse_meminfo_total_kib("MemTotal:  lots\n")
    assert err.value.line == 1




@pytest.mark.parametrize(
    ("text", "version"),
    [
        # nvidia-ctk --version, as pasted in NVIDIA/nvidia-container-toolkit issue #50
        ("NVIDIA Container Toolkit CLI version 1.12.0\n"
         "commit: 62bd015475656ef795cb0d59cc4030a6bd4a9526", "1.12.0"),
        # nvidia-container-cli --version, as pasted in NVIDIA/nvidia-container-toolkit issue #90
        ("cli-version: 1.13.5\nlib-version: 0.11.0+jetpack\n"
         "build date: 2023-07-18T11:40+00:00", "1.13.5"),
        ("Fabric Manager version is : 535.129.03", "535.129.03"),
    ],
)
def test_tool_versions(text: str, version: str) -> None:
    from gpufleet.collect.system import parse_tool_version

    assert parse_tool_version(text, "tool --version") == version


def test_tool_version_garbage_names_source() -> None:
    from gpufleet.collect.system import parse_tool_version

    with pytest.raises(ParseError, match="nvidia-ctk --version:1: no version"):
        parse_tool_version("command not understood", "nvidia-ctk --version")


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=" a#$`\\\"'\t=é\u00a0", max_size=8))
def test_os_release_values_read_as_shlex_reads_them(value: str) -> None:
    """Plain values skip shlex (issue 8: per-host parse cost); the result is still shlex's."""
    line = f"PRETTY_NAME={value}".strip()  # the parser strips each line first
    try:
        words = shlex.split(line.removeprefix("PRETTY_NAME="), comments=False, posix=True)
    except ValueError:
        with pytest.raises(ParseError, match="bad value for PRETTY_NAME"):
            parse_os_release(f"{line}\nID=x\n")
        return
    got = parse_os_release(f"{line}\nID=x\n")
    assert got == OsRelease(id="x", version_id=None, pretty_name=" ".join(words) or None)
