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

from collections.abc import Sequence

from gpufleet.collect.sections import REGISTRY, SYSCTL_KEYS, SectionSpec, names

__all__ = ["SECTIONS", "SYSCTL_KEYS", "remote_script"]

#: Section names, in the order the script emits them (from the registry).
SECTIONS: tuple[str, ...] = names()

_PREAMBLE = r"""
R="${GPUFLEET_SYSROOT:-}"
TMO=__TOOL_TIMEOUT__
E=$(mktemp 2>/dev/null) || E="${TMPDIR:-/tmp}/gpufleet.$$.err"  # mktemp honours TMPDIR
trap 'rm -f "$E" "$E.g" "$E.ge"' EXIT
trap 'exit 143' HUP INT TERM
# $TO runs a tool under timeout; one not installed (most of the vendor probes on any one
# host) answers rc 127 and "TOOL: not found" at once, with no process (run, NF below).
if command -v timeout >/dev/null 2>&1; then TO=run; TK="timeout -k 2 $TMO"; else TO=""; fi
run() {
  command -v "$1" >/dev/null 2>&1 || { NF=$1; printf '%s: not found\n' "$1" >&2; return 127; }
  $TK "$@"
}
sec() {
  name=$1; shift
  printf '\n@@gpufleet:begin %s@@\n' "$name"
  NF=
  "$@" 2>"$E"
  rc=$?
  printf '\n@@gpufleet:stderr %s@@\n' "$name"
  if [ "$rc" = 127 ] && [ -n "$NF" ]; then printf '%s: not found\n' "$NF"
  elif [ -s "$E" ]; then head -c 2048 "$E"; fi
  printf '\n@@gpufleet:end %s rc=%d@@\n' "$name" "$rc"
}
readf() {
  # A file through shell builtins: no process per file (this script runs on every host).
  [ -r "$1" ] || { echo "cannot read $1" >&2; return 1; }
  while IFS= read -r line || [ -n "$line" ]; do printf '%s\n' "$line"; done < "$1"
}
"""


#: The sections of the GPU driver's tool, run one after another in a lane of their own, in
#: the background, while the other sections run (issue 30: nvidia-smi takes seconds on a
#: big host, and its runs are kept apart from each other, not from lspci or the kernel log).
#: Their framed output follows the others'; the order of sections carries no meaning.
GPU_LANE = frozenset({"nvidia-smi-xml", "nvidia-smi-q", "topo-m", "nvlink-s"})


def _sec_lines(spec: SectionSpec) -> str:
    return f"sec {spec.name} {spec.command}\n" + (spec.after + "\n" if spec.after else "")


def remote_script(tool_timeout_s: int = 45, registry: Sequence[SectionSpec] | None = None) -> str:
    """The collection script, with each tool limited to ``tool_timeout_s`` seconds.

    Built from the section registry (:data:`gpufleet.collect.sections.REGISTRY` unless
    ``registry`` is given): each entry's shell functions, then one ``sec`` line per entry;
    the entries of :data:`GPU_LANE` in a background subshell (its own stderr file, its
    framed output kept in a file and printed after the others).
    """
    specs = REGISTRY if registry is None else registry
    parts = [_PREAMBLE.replace("__TOOL_TIMEOUT__", str(int(tool_timeout_s))).lstrip("\n")]
    parts += [spec.functions + "\n" for spec in specs if spec.functions]
    parts.append('echo "@@gpufleet:script v1@@"\n')
    lane = [spec for spec in specs if spec.name in GPU_LANE]
    if lane:
        body = "".join(_sec_lines(spec) for spec in lane)
        parts.append(f'( E="$E.ge"\n{body}) >"$E.g" 2>/dev/null &\n')
    parts += [_sec_lines(spec) for spec in specs if spec.name not in GPU_LANE]
    if lane:
        parts.append('wait\ncat "$E.g"\n')
    parts.append('rm -f "$E" "$E.g" "$E.ge"\necho "@@gpufleet:done@@"\n')
    return "".join(parts)
