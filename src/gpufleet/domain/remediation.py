"""Remediation steps (``gpufleet remediate``): the ladder, the in-band scripts and how their
output is read. Pure: the scripts are text, the service runs them over the host's transport.

The ladder climbs ``reset-gpu`` -> ``reboot`` -> ``service-request`` (the rules' actions
``reset_gpu``, ``reboot``, ``reseat_or_replace``). A GPU reset runs in two round trips:

1. :func:`probe_script` lists every holder of the GPUs: compute processes (``nvidia-smi
   --query-compute-apps``), the persistence daemon and the DCGM host engine (``pgrep -x``), and
   anything with ``/dev/nvidia*`` open (``fuser``, else ``lsof``). :func:`read_probe` fails
   closed: a listing that could not be made counts as "cannot tell", which refuses the reset.
2. :func:`reset_script` stops the holders (policy ``stop``), resets the GPUs (the whole reset
   domain on NVSwitch systems: ``nvidia-smi -r`` without ``-i``), verifies them with
   ``--query-gpu`` and starts the daemons again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum

MARK = "@@gpufleet:remedy"


class Action(StrEnum):
    """A rung of the remediation ladder."""

    RESTART_SERVICE = "restart-service"
    RESET_GPU = "reset-gpu"
    REBOOT = "reboot"
    POWER_CYCLE = "power-cycle"
    SERVICE_REQUEST = "service-request"


#: The ladder, lowest rung first (issue 24: a service restart before a GPU reset, a BMC power
#: cycle when the in-band reboot fails or the host does not answer).
LADDER: tuple[Action, ...] = (
    Action.RESTART_SERVICE,
    Action.RESET_GPU,
    Action.REBOOT,
    Action.POWER_CYCLE,
    Action.SERVICE_REQUEST,
)
#: The rules' recommended actions (issue 10 ladder) and the rung each runs.
RULE_ACTIONS: dict[str, Action] = {
    "reset_gpu": Action.RESET_GPU,
    "reboot": Action.REBOOT,
    "reseat_or_replace": Action.SERVICE_REQUEST,
    "restart_service": Action.RESTART_SERVICE,
    "power_cycle": Action.POWER_CYCLE,
}

#: Services ``restart-service`` restarts: a systemd unit, or (the device plugin) the
#: container the kubelet runs, stopped with ``crictl`` so the kubelet starts it again.
SERVICES: dict[str, str] = {
    "kubelet": "kubelet",
    "containerd": "containerd",
    "nvidia-fabricmanager": "nvidia-fabricmanager",
    "nvidia-persistenced": "nvidia-persistenced",
    "device-plugin": "",  # the device plugin pod's container (crictl)
}
#: ``crictl ps --name`` takes a regular expression: every vendor's device plugin container
#: (nvidia-device-plugin-ctr, ascend-device-plugin, ...).
DEVICE_PLUGIN_CONTAINER = "device-plugin"

#: Daemons that hold every GPU open, and the systemd unit that stops each.
DAEMONS: dict[str, str] = {
    "nvidia-persistenced": "nvidia-persistenced",
    "nv-hostengine": "nvidia-dcgm",
}

_SECTION = re.compile(r"^@@(\w+)$")
_RC = re.compile(r"^@@rc (\d+)$")


def _sections(output: str) -> dict[str, tuple[list[str], int | None]]:
    """``@@name`` ... ``@@rc N`` blocks: lines and exit status (None: no status line)."""
    out: dict[str, tuple[list[str], int | None]] = {}
    name: str | None = None
    lines: list[str] = []
    for raw in output.splitlines():
        line = raw.rstrip("\r")
        m = _SECTION.match(line)
        rc = _RC.match(line)
        if rc and name is not None:
            out[name] = (lines, int(rc.group(1)))
            name, lines = None, []
        elif m:
            if name is not None:
                out[name] = (lines, None)
            name, lines = m.group(1), []
        elif name is not None and line.strip():
            lines.append(line.strip())
    if name is not None:
        out[name] = (lines, None)
    return out


def probe_script() -> str:
    """Who holds the GPUs (one round trip)."""
    daemons = " ".join(DAEMONS)
    return (
        f"# gpufleet remediate: who holds the GPUs ({MARK} probe)\n"
        "echo @@apps\n"
        "nvidia-smi --query-compute-apps=pid,process_name,gpu_uuid --format=csv,noheader 2>&1\n"
        'echo "@@rc $?"\n'
        "echo @@daemons\n"
        f'for d in {daemons}; do pgrep -x "$d" >/dev/null 2>&1 && echo "$d"; done\n'
        'echo "@@rc 0"\n'
        "echo @@open\n"
        "if command -v fuser >/dev/null 2>&1; then fuser /dev/nvidia* 2>/dev/null; echo; "
        'echo "@@rc 0"\n'
        "elif command -v lsof >/dev/null 2>&1; then lsof -t /dev/nvidia* 2>/dev/null; "
        'echo "@@rc 0"\n'
        'else echo "@@rc 127"; fi\n'
    )


@dataclass(frozen=True, slots=True)
class Holder:
    """A process holding a GPU: a compute process, a daemon, or a /dev/nvidia* opener."""

    kind: str  # "compute", "daemon", "open"
    pid: int | None
    name: str
    gpu_uuid: str | None = None

    def describe(self) -> str:
        pid = f" (pid {self.pid})" if self.pid is not None else ""
        return f"{self.kind} {self.name}{pid}"


@dataclass
class Probe:
    """What :func:`probe_script` found; ``unknown`` says why the holders cannot be told."""

    holders: list[Holder] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)


def read_probe(output: str, gpu_uuids: set[str] | None) -> Probe:
    """Holders of the GPUs with ``gpu_uuids`` (None: every GPU); fail closed (see module)."""
    secs = _sections(output)
    probe = Probe()
    apps, rc = secs.get("apps", ([], None))
    if rc != 0:
        probe.unknown.append(
            f"nvidia-smi --query-compute-apps failed (rc {rc}): {' '.join(apps)[:200]}"
        )
    else:
        for line in apps:
            parts = [p.strip() for p in line.split(",")]
            if len(parts) < 3 or not parts[0].isdigit():
                probe.unknown.append(f"unreadable compute-apps line {line!r}")
                continue
            if gpu_uuids is None or parts[2] in gpu_uuids:
                probe.holders.append(Holder("compute", int(parts[0]), parts[1], parts[2]))
    daemons, _ = secs.get("daemons", ([], None))
    for d in daemons:
        if d in DAEMONS:
            probe.holders.append(Holder("daemon", None, d))
    opened, orc = secs.get("open", ([], None))
    if orc != 0:
        probe.unknown.append("neither fuser nor lsof: cannot tell who has /dev/nvidia* open")
    else:
        known = {h.pid for h in probe.holders}
        for pid in sorted({int(p) for line in opened for p in re.findall(r"\d+", line)}):
            if pid not in known:
                probe.holders.append(Holder("open", pid, "/dev/nvidia*"))
    return probe


def reset_script(
    gpus: list[int] | None, *, stop: list[Holder] | None = None, bug_report: bool = True
) -> str:
    """Stop ``stop`` (daemons by unit, processes by pid), reset ``gpus`` (None: every GPU,
    the whole reset domain), verify, start the daemons again; on a failed reset or
    verification, collect an ``nvidia-bug-report``."""
    lines = [f"# gpufleet remediate: GPU reset ({MARK} reset)", "echo @@stop"]
    units = [DAEMONS[h.name] for h in stop or [] if h.kind == "daemon" and h.name in DAEMONS]
    pids = sorted({h.pid for h in stop or [] if h.pid is not None})
    for unit in units:
        lines.append(f"systemctl stop {unit} 2>&1")
    if pids:
        lines.append(f"kill {' '.join(map(str, pids))} 2>&1; sleep 2")
    lines.append('echo "@@rc 0"')
    target = "" if gpus is None else " -i " + ",".join(map(str, gpus))
    lines += ["echo @@reset", f"nvidia-smi -r{target} 2>&1", 'rc=$?; echo "@@rc $rc"']
    lines += [
        "echo @@verify",
        f"nvidia-smi --query-gpu=index,pci.bus_id,uuid,name --format=csv,noheader{target} 2>&1",
        'v=$?; echo "@@rc $v"',
    ]
    for unit in units:
        lines.append(f"systemctl start {unit} >/dev/null 2>&1")
    if bug_report:
        lines += [
            'if [ "$rc" != 0 ] || [ "$v" != 0 ]; then',
            "  echo @@bugreport",
            "  f=/var/log/nvidia-bug-report-gpufleet-$$.log",
            '  nvidia-bug-report.sh --output-file "$f" >/dev/null 2>&1 && echo "$f.gz"',
            '  echo "@@rc $?"',
            "fi",
        ]
    return "\n".join(lines) + "\n"


@dataclass
class ResetResult:
    """How a reset went: ``ok`` when the reset and the verification both passed."""

    ok: bool
    detail: str
    bug_report: str | None = None


_BAD = ("unknown error", "is lost", "err!", "requires reset", "failed")


def read_reset(output: str, expected: int | None) -> ResetResult:
    """Read :func:`reset_script`'s output; ``expected``: GPUs the verification must list."""
    secs = _sections(output)
    reset, rc = secs.get("reset", ([], None))
    verify, vrc = secs.get("verify", ([], None))
    report_lines, brc = secs.get("bugreport", ([], None))
    report = report_lines[-1] if report_lines and brc == 0 else None
    if rc != 0:
        text = " ".join(reset)[:300] or "no output"
        return ResetResult(False, f"nvidia-smi -r failed (rc {rc}): {text}", report)
    bad = [ln for ln in verify if any(b in ln.lower() for b in _BAD)]
    if vrc != 0 or bad or (expected is not None and len(verify) < expected):
        text = "; ".join(bad or verify)[:300] or "no output"
        return ResetResult(False, f"verification failed (rc {vrc}): {text}", report)
    return ResetResult(True, f"reset and verified: {len(verify)} GPU(s) answer")


def reboot_script() -> str:
    """Ask the host to reboot (the connection may drop before an answer)."""
    return f'# gpufleet remediate: reboot ({MARK} reboot)\nsystemctl reboot 2>&1; echo "@@rc $?"\n'


def alive_script() -> str:
    """A cheap round trip to see the host answer again after a reboot."""
    return f"# {MARK} alive\necho @@alive\n"


def restart_script(service: str) -> str:
    """Restart ``service`` (one of :data:`SERVICES`) and report whether it runs again."""
    if service not in SERVICES:
        raise ValueError(f"unknown service {service!r}; one of {', '.join(SERVICES)}")
    head = f"# gpufleet remediate: restart {service} ({MARK} restart)\necho @@restart\n"
    unit = SERVICES[service]
    if unit:
        return head + (
            f"systemctl restart {unit} 2>&1; rc=$?; echo \"@@rc $rc\"\n"
            f"echo @@active\nsystemctl is-active {unit} 2>&1; echo \"@@rc $?\"\n"
        )
    name = DEVICE_PLUGIN_CONTAINER
    return head + (
        f"ids=$(crictl ps -q --name {name} 2>&1); rc=$?\n"
        '[ "$rc" = 0 ] && [ -z "$ids" ] && { echo "no running container"; rc=1; }\n'
        '[ "$rc" = 0 ] && { crictl stop $ids 2>&1; rc=$?; }\n'
        'echo "@@rc $rc"\n'
    )


def read_restart(service: str, output: str) -> tuple[bool, str]:
    """Whether :func:`restart_script` restarted ``service``, and what it said."""
    secs = _sections(output)
    lines, rc = secs.get("restart", ([], None))
    text = " ".join(lines)[:300]
    if rc != 0:
        return False, f"restart {service} failed (rc {rc}): {text or 'no output'}"
    if SERVICES.get(service):
        active, arc = secs.get("active", ([], None))
        state = " ".join(active)[:100] or "unknown"
        if arc != 0:
            return False, f"{service} restarted but is not active: {state}"
        return True, f"{service} restarted, {state}"
    return True, f"device plugin container stopped ({text or 'ok'}); the kubelet starts it again"
