"""The one remote script that gathers every fact of a host in a single round trip.

It is plain POSIX ``sh`` so it runs on any Linux image without an agent. Each tool's output
is framed as a *section* (see :mod:`gpufleet.collect.bundle`); a tool that is missing or fails
only marks its own section (rc 127, rc != 0), never the whole collection. Each tool runs under
``timeout`` so one hung ``nvidia-smi`` (a classic symptom of a wedged GPU) still lets lspci and
the kernel log come back.

``GPUFLEET_SYSROOT`` prefixes the files read directly (``/etc/os-release``, ``/proc/...``,
``/sys/...``); it is empty on real hosts and lets the lab serve per-host files.
"""

from __future__ import annotations

#: sysctls compared with baselines; kept short so the script stays cheap.
SYSCTL_KEYS: tuple[str, ...] = (
    "vm.max_map_count",
    "vm.swappiness",
    "net.core.rmem_max",
    "net.core.wmem_max",
    "kernel.numa_balancing",
    "net.ipv4.tcp_mtu_probing",
)

#: Section names, in the order the script emits them.
SECTIONS: tuple[str, ...] = (
    "hostname",
    "os-release",
    "uname-r",
    "nproc",
    "meminfo",
    "dmi",
    "modules",
    "sysctl",
    "nvidia-smi-xml",
    "nvidia-smi-q",
    "topo-m",
    "nvlink-s",
    "ibstat",
    "lspci-nn",
    "kernel-xid",
    "lsblk",
    "fabricmanager",
    "fabricmanager-version",
    "container-toolkit",
)

_TEMPLATE = r"""
R="${GPUFLEET_SYSROOT:-}"
TMO=__TOOL_TIMEOUT__
E=$(mktemp 2>/dev/null) || E="${TMPDIR:-/tmp}/gpufleet.$$.err"  # mktemp honours TMPDIR
trap 'rm -f "$E"' EXIT
trap 'exit 143' HUP INT TERM
if command -v timeout >/dev/null 2>&1; then TO="timeout -k 2 $TMO"; else TO=""; fi
sec() {
  name=$1; shift
  printf '\n@@gpufleet:begin %s@@\n' "$name"
  "$@" 2>"$E"
  rc=$?
  printf '\n@@gpufleet:stderr %s@@\n' "$name"
  [ -s "$E" ] && head -c 2048 "$E"
  printf '\n@@gpufleet:end %s rc=%d@@\n' "$name" "$rc"
}
readf() {
  # A file through shell builtins: no process per file (this script runs on every host).
  [ -r "$1" ] || { echo "cannot read $1" >&2; return 1; }
  while IFS= read -r line || [ -n "$line" ]; do printf '%s\n' "$line"; done < "$1"
}
nvsmi_q() {
  # XML is the machine format; only when it is refused do we fall back to the text report.
  if [ "$nvx_rc" = 0 ]; then return 0; fi
  $TO nvidia-smi -q
}
xids() {
  # No readable kernel log (dmesg_restrict, no journal) is a failure, not "no Xid".
  out=$({ dmesg --time-format=iso 2>/dev/null || dmesg 2>/dev/null || journalctl -k -q --no-pager -o short-iso 2>/dev/null || echo GPUFLEET_NO_KERNEL_LOG; } \
    | grep -E 'NVRM: Xid|^GPUFLEET_NO_KERNEL_LOG$' | tail -n 500)
  case "$out" in *GPUFLEET_NO_KERNEL_LOG*) echo "cannot read the kernel log (dmesg, journalctl -k)" >&2; return 1;; esac
  [ -z "$out" ] || printf '%s\n' "$out"
  return 0
}
dmi() {
  for f in sys_vendor product_name; do readf "$R/sys/class/dmi/id/$f" 2>/dev/null; done
  return 0
}
ctk() {
  # nvidia-ctk (toolkit >= 1.12); older installs only have nvidia-container-cli.
  if command -v nvidia-ctk >/dev/null 2>&1; then nvidia-ctk --version; else nvidia-container-cli --version; fi
}
fm() {
  if command -v systemctl >/dev/null 2>&1 && systemctl --quiet is-active nvidia-fabricmanager 2>/dev/null; then echo active; return 0; fi
  if pgrep -x nv-fabricmanager >/dev/null 2>&1; then echo active; return 0; fi
  echo inactive
}
echo "@@gpufleet:script v1@@"
sec hostname readf "$R/proc/sys/kernel/hostname"
sec os-release readf "$R/etc/os-release"
sec uname-r readf "$R/proc/sys/kernel/osrelease"
sec nproc nproc
sec meminfo readf "$R/proc/meminfo"
sec dmi dmi
sec modules readf "$R/proc/modules"
sec sysctl sysctl -e __SYSCTL_KEYS__
sec nvidia-smi-xml $TO nvidia-smi -q -x
nvx_rc=$rc
sec nvidia-smi-q nvsmi_q
sec topo-m $TO nvidia-smi topo -m
sec nvlink-s $TO nvidia-smi nvlink -s
sec ibstat $TO ibstat
sec lspci-nn $TO lspci -nn -D
sec kernel-xid xids
sec lsblk lsblk -b -d -n -P -o NAME,SIZE,TRAN,ROTA,MODEL
sec fabricmanager fm
sec fabricmanager-version $TO nv-fabricmanager --version
sec container-toolkit ctk
rm -f "$E"
echo "@@gpufleet:done@@"
"""


def remote_script(tool_timeout_s: int = 45) -> str:
    """The collection script, with each tool limited to ``tool_timeout_s`` seconds."""
    return (
        _TEMPLATE.replace("__TOOL_TIMEOUT__", str(int(tool_timeout_s)))
        .replace("__SYSCTL_KEYS__", " ".join(SYSCTL_KEYS))
        .lstrip("\n")
    )
