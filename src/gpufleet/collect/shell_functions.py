"""The ``sh`` functions some collection sections run (:mod:`gpufleet.collect.sections`):
the text report only when the XML was refused, the kernel log's Xid lines, DMI, the container
toolkit's version, whether the fabric manager runs."""

from __future__ import annotations

from gpufleet.collect.dmi import DMI_FILES

NVSMI_Q = """\
nvsmi_q() {
  # XML is the machine format; only when it is refused do we fall back to the text report.
  if [ "$nvx_rc" = 0 ]; then return 0; fi
  $TO nvidia-smi -q
}"""
XIDS = """\
xids() {
  # No readable kernel log (dmesg_restrict, no journal) is a failure, not "no Xid".
  out=$({ dmesg --time-format=iso 2>/dev/null || dmesg 2>/dev/null || journalctl -k -q --no-pager -o short-iso 2>/dev/null || echo GPUFLEET_NO_KERNEL_LOG; } \\
    | grep -E 'NVRM: Xid|^GPUFLEET_NO_KERNEL_LOG$' | tail -n 500)
  case "$out" in *GPUFLEET_NO_KERNEL_LOG*) echo "cannot read the kernel log (dmesg, journalctl -k)" >&2; return 1;; esac
  [ -z "$out" ] || printf '%s\\n' "$out"
  return 0
}"""
DMI = """\
dmi() {
  # name=value per readable file (builtins only); product_serial/uuid are root-only: an
  # unreadable file is skipped ("not collected"), never an error.
  for f in @FILES@; do
    p="$R/sys/class/dmi/id/$f"
    [ -r "$p" ] || continue
    v=; { IFS= read -r v < "$p"; } 2>/dev/null
    printf '%s=%s\\n' "$f" "$v"
  done
  return 0
}""".replace("@FILES@", " ".join(DMI_FILES))
CTK = """\
ctk() {
  # nvidia-ctk (toolkit >= 1.12); older installs only have nvidia-container-cli.
  if command -v nvidia-ctk >/dev/null 2>&1; then nvidia-ctk --version; else nvidia-container-cli --version; fi
}"""
FM = """\
fm() {
  if command -v systemctl >/dev/null 2>&1 && systemctl --quiet is-active nvidia-fabricmanager 2>/dev/null; then echo active; return 0; fi
  if pgrep -x nv-fabricmanager >/dev/null 2>&1; then echo active; return 0; fi
  echo inactive
}"""
