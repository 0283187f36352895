"""The files and OS tools of a lab host (os-release, /proc/meminfo, /proc/modules, sysctl,
lsblk, container toolkit) and its reclaim sections (mounts, processes, crontabs, scratch),
rendered for :mod:`gpufleet.lab.renderers`. Pure and deterministic."""

from __future__ import annotations

from gpufleet.collect.bundle import Section
from gpufleet.collect.sections import SYSCTL_KEYS
from gpufleet.lab.catalogue import ModelSpec
from gpufleet.lab.faults import _split_fault
from gpufleet.lab.fleet import LabHost

_CTK_VERSION = (
    "NVIDIA Container Toolkit CLI version 1.12.0\ncommit: 62bd015475656ef795cb0d59cc4030a6bd4a9526"
)

_OS_RELEASE = """PRETTY_NAME="Ubuntu 22.04.5 LTS"
NAME="Ubuntu"
VERSION_ID="22.04"
VERSION="22.04.5 LTS (Jammy Jellyfish)"
VERSION_CODENAME=jammy
ID=ubuntu
ID_LIKE=debian
HOME_URL="https://www.ubuntu.com/"
SUPPORT_URL="https://help.ubuntu.com/"
BUG_REPORT_URL="https://bugs.launchpad.net/ubuntu/"
PRIVACY_POLICY_URL="https://www.ubuntu.com/legal/terms-and-policies/privacy-policy"
UBUNTU_CODENAME=jammy
"""
_KERNEL = "5.15.0-125-generic"


def _meminfo(spec: ModelSpec) -> str:
    total = spec.mem_total_kib
    rows = [
        ("MemTotal", total),
        ("MemFree", total * 87 // 100),
        ("MemAvailable", total * 93 // 100),
        ("Buffers", 2154816),
        ("Cached", total * 5 // 100),
        ("SwapCached", 0),
        ("SwapTotal", 0),
        ("SwapFree", 0),
        ("HugePages_Total", 0),
    ]
    # /proc/meminfo: name padded to 16 columns, value right-aligned in 8 ("kB" except hugepages)
    return "".join(
        f"{k + ':':<16}{v:>8}{'' if k.startswith('HugePages') else ' kB'}\n" for k, v in rows
    )


def _modules(spec: ModelSpec) -> str:
    # /proc/modules as an unprivileged reader sees it (addresses zeroed)
    z = "Live 0x0000000000000000"
    rdma = spec.ibstat_file is not None
    rows = [
        f"nvidia_uvm 1437696 4 - {z} (POE)",
        *([f"nvidia_peermem 16384 0 - {z} (POE)"] if rdma else []),
        f"nvidia_drm 77824 0 - {z} (POE)",
        f"nvidia_modeset 1306624 1 nvidia_drm, {z} (POE)",
        f"nvidia 56717312 {106 if rdma else 26} nvidia_uvm,"
        f"{'nvidia_peermem,' if rdma else ''}nvidia_modeset, {z} (POE)",
    ]
    if rdma:
        rows += [
            f"rdma_ucm 28672 0 - {z} (OE)",
            f"ib_ipoib 139264 0 - {z} (OE)",
            f"ib_umad 36864 0 - {z} (OE)",
            f"mlx5_ib 458752 0 - {z} (OE)",
            f"ib_uverbs 163840 3 nvidia_peermem,rdma_ucm,mlx5_ib, {z} (OE)",
            f"ib_core 454656 7 rdma_ucm,ib_ipoib,ib_umad,mlx5_ib,ib_uverbs,rdma_cm,ib_cm, {z} (OE)",
            f"mlx5_core 2080768 1 mlx5_ib, {z} (OE)",
            f"mlxfw 36864 1 mlx5_core, {z} (OE)",
            f"mlx_compat 69632 9 rdma_ucm,ib_ipoib,ib_umad,mlx5_ib,ib_uverbs,ib_core,mlx5_core, "
            f"{z} (OE)",
            f"psample 20480 1 mlx5_core, {z}",
            f"tls 114688 1 mlx5_core, {z}",
        ]
    if spec.dmi[0] == "Amazon EC2":
        rows.append(f"ena 147456 0 - {z}")
    nvme = sum(d[0].startswith("nvme") for d in spec.disks)
    if nvme:
        rows += [f"nvme 49152 {nvme} - {z}", f"nvme_core 139264 {nvme + 1} nvme, {z}"]
    else:
        rows.append(f"virtio_blk 24576 2 - {z}")
    return "".join(r + "\n" for r in rows)


def _sysctl(spec: ModelSpec) -> str:
    tuned = spec.fabric != "none"  # training pools carry the NCCL/RDMA tuning
    values = {
        "vm.max_map_count": "262144" if tuned else "65530",
        "vm.swappiness": "60",
        "net.core.rmem_max": "2147483647" if tuned else "212992",
        "net.core.wmem_max": "2147483647" if tuned else "212992",
        # sysctl prints the three fields tab-separated, as /proc holds them
        "net.ipv4.tcp_rmem": "4096\t87380\t2147483647" if tuned else "4096\t131072\t6291456",
        "net.ipv4.tcp_wmem": "4096\t65536\t2147483647" if tuned else "4096\t16384\t4194304",
        "kernel.numa_balancing": "0" if tuned else "1",
        "net.ipv4.tcp_mtu_probing": "0",
    }
    return "".join(f"{k} = {values[k]}\n" for k in SYSCTL_KEYS)


def _lsblk(spec: ModelSpec) -> str:
    out = []
    for name, size, model in spec.disks:
        tran = "nvme" if name.startswith("nvme") else ""
        out.append(f'NAME="{name}" SIZE="{size}" TRAN="{tran}" ROTA="0" MODEL="{model}"')
    return "\n".join(out) + "\n"



# --------------------------------------------------------------------------- reclaim sections

#: A leftover mount under a data path, a lessee's process and crontab (the lab faults
#: stale-mount, lessee-process, lessee-crontab); the login user's own session is always there.
_LESSEE = ("alice", 1001)
_MOUNTS = (
    "sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0\n"
    "proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0\n"
    "/dev/nvme0n1p2 / ext4 rw,relatime 0 0\n"
    "/dev/nvme1n1 /scratch xfs rw,relatime,attr2,inode64,noquota 0 0\n"
)
_STALE_MOUNT = "10.0.0.5:/export/team-a /data/team-a nfs4 rw,relatime,vers=4.2,hard,proto=tcp 0 0\n"


def render_reclaim_sections(host: LabHost, login_user: str = "gpufleetlab") -> dict[str, Section]:
    """The reclaim sections (:data:`gpufleet.collect.sections.RECLAIM_REGISTRY`) as the host
    answers them, with its reclaim faults applied."""
    kinds = {_split_fault(f)[0] for f in host.faults}
    user, uid = _LESSEE
    ps = ["root 0 1 systemd", "root 0 812 sshd", f"{login_user} 998 4242 sh"]
    if "lessee-process" in kinds:
        ps.append(f"{user} {uid} 31337 python")
    out = {
        "reclaim-mounts": _MOUNTS + (_STALE_MOUNT if "stale-mount" in kinds else ""),
        "reclaim-ps": "\n".join(ps),
        "reclaim-crontabs": user if "lessee-crontab" in kinds else "",
        "reclaim-scratch": "",
    }
    return {n: Section(n, _chomp(text), "", 0) for n, text in out.items()}


def _chomp(text: str) -> str:
    return text[:-1] if text.endswith("\n") else text
