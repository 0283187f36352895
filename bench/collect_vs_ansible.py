#!/usr/bin/env python3
"""gpufleet collect vs Ansible ad-hoc, on the same real sshd lab hosts.

Starts N real ``sshd`` lab hosts on 127.0.0.1 (one port each, see ``tests/sshlab.py``), each
serving the capture-derived sections of an ``a100-8x`` lab host (8 GPUs, ``nvidia-smi -q -x``
answers real XML), writes one Ansible INI inventory that both tools read, then times:

* gpufleet: ``gpufleet --home H collect --json`` as a whole process (interpreter start, SSH to
  every host, the full collection script of ~17 tools per host, parsing, SQLite storage);
  the ``enroll`` before it is not timed. Every host must come back ``ok`` with 8 GPUs.
* Ansible:  ``ansible all -i INV -m command -a 'nvidia-smi -q -x' -f 50`` out of the box
  (default ControlPersist, no pipelining; fresh control path dir per run). Every host must
  answer ``CHANGED`` with 8 GPUs in its XML.

Run it with ``make bench`` (or ``N=200 make bench``); the caveats are in
bench/notes/lab-notebook.md.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufleet.collect.script import remote_script
from gpufleet.lab.fleet import create_fleet
from gpufleet.lab.renderers import render_sections

# The real-sshd lab is a test helper (tests/sshlab.py), not part of the package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.sshlab import SshLab

BENCH_DIR = Path(__file__).resolve().parent
ANSIBLE_CFG = BENCH_DIR / "ansible.cfg"
BIN_DIR = Path(sys.executable).parent  # the venv's bin: gpufleet and ansible live here
MODEL = "a100-8x"  # the 8-GPU model whose nvidia-smi -q -x answers XML
GPUS_PER_HOST = 8
SFTP_SERVER = "/usr/lib/openssh/sftp-server"  # Debian's default sftp subsystem
#: One ad-hoc result header per host: "gpu-001 | CHANGED | rc=0 >>".
_ANSIBLE_HEAD = re.compile(r"^(\S+) \| ([A-Z]+)(?: \| rc=(-?\d+))?", re.M)
_GPU_TAG = re.compile(r"<gpu id=")


class BenchError(RuntimeError):
    """A run did not do what it must; the benchmark result would be meaningless."""


@dataclass
class ToolResult:
    tool: str
    walls: list[float] = field(default_factory=list)
    controller_cpu: list[float] = field(default_factory=list)  # the process + reaped children
    machine_cpu: list[float] = field(default_factory=list)  # all CPUs busy (/proc/stat)

    @property
    def median(self) -> float:
        return statistics.median(self.walls)

    def add(self, m: Measured) -> None:
        self.walls.append(m.wall)
        self.controller_cpu.append(m.controller_cpu)
        self.machine_cpu.append(m.machine_cpu)


@dataclass(frozen=True)
class Measured:
    wall: float
    controller_cpu: float
    machine_cpu: float


class _Clock:
    """Wall time, CPU of reaped children (the timed tool) and busy CPU of the whole machine."""

    def __enter__(self) -> _Clock:
        self._ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        self._busy = _machine_busy_s()
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self._t0
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.controller_cpu = (ru.ru_utime - self._ru.ru_utime) + (ru.ru_stime - self._ru.ru_stime)
        self.machine_cpu = _machine_busy_s() - self._busy

    def result(self) -> Measured:
        return Measured(self.wall, self.controller_cpu, self.machine_cpu)


def _machine_busy_s() -> float:
    """CPU seconds all CPUs spent not idle since boot (/proc/stat; 0 where unavailable)."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return 0.0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields) - idle) / (os.sysconf("SC_CLK_TCK") or 100)


# --------------------------------------------------------------------------- helpers


def _tool(name: str) -> str:
    path = BIN_DIR / name
    if path.exists():
        return str(path)
    found = shutil.which(name)
    if found is None:
        raise BenchError(f"'{name}' not found in {BIN_DIR} or on PATH (make env)")
    return found


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _tail(text: str, n: int = 1500) -> str:
    return text[-n:].strip()


def make_ansible_ready(lab: SshLab, names: list[str]) -> None:
    """Give lab hosts what every real host has and Ansible needs; call before ``start()``.

    The lab hosts are minimal on purpose: no sftp subsystem, and a PATH of fake tools plus the
    few utilities gpufleet's script uses. Ansible copies its module over sftp and then runs
    ``chmod u+x`` on it, so each host gets Debian's ``Subsystem sftp`` line and a ``chmod``
    in ``base/``. Neither is used by gpufleet's collection script.
    """
    chmod = shutil.which("chmod", path="/usr/bin:/bin")
    if chmod is None or not Path(SFTP_SERVER).exists():
        raise BenchError(f"need chmod and {SFTP_SERVER} on this machine for the Ansible run")
    for name in names:
        host_dir = lab.root / "hosts" / name
        link = host_dir / "base" / "chmod"
        if not link.is_symlink():
            link.symlink_to(chmod)
        config = host_dir / "sshd_config"
        text = config.read_text(encoding="utf-8")
        if "Subsystem" not in text:
            config.write_text(text + f"Subsystem sftp {SFTP_SERVER}\n", encoding="utf-8")


def write_inventory(lab: SshLab, path: Path) -> Path:
    """One Ansible INI inventory for both tools."""
    lines = ["[gpus]"]
    lines += [f"{t.name} ansible_host={t.address} ansible_port={t.port} ansible_user={t.user}"
              for t in lab.targets()]
    lines += ["", "[all:vars]",
              f"ansible_ssh_private_key_file={lab.client_key}",
              "ansible_python_interpreter=/usr/bin/python3", ""]
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


# --------------------------------------------------------------------------- gpufleet


def run_gpufleet(inv: Path, work: Path, n: int, attempt: int) -> Measured:
    """Enroll into a fresh home (untimed), then time one whole ``collect --json`` process."""
    gpufleet = _tool("gpufleet")
    home = work / f"gpufleet-home-{attempt}"
    home.mkdir()
    res = subprocess.run([gpufleet, "--home", str(home), "enroll", "-i", str(inv)],
                         capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise BenchError(f"gpufleet enroll failed (rc {res.returncode}): "
                         f"{_tail(res.stderr or res.stdout)}")
    with _Clock() as clock:
        res = subprocess.run([gpufleet, "--home", str(home), "collect", "--json"],
                             capture_output=True, text=True, check=False)
    try:
        report: dict[str, Any] = json.loads(res.stdout)
    except json.JSONDecodeError:
        raise BenchError(f"gpufleet collect (rc {res.returncode}) printed no JSON: "
                         f"{_tail(res.stderr or res.stdout)}") from None
    hosts: list[dict[str, Any]] = report.get("hosts", [])
    bad = [f"{h.get('host')}: {h.get('outcome')} gpus={h.get('gpus')} {h.get('reason', '')}"
           for h in hosts if h.get("outcome") != "ok" or h.get("gpus") != GPUS_PER_HOST]
    if res.returncode != 0 or len(hosts) != n or bad:
        raise BenchError(f"gpufleet collect: rc {res.returncode}, {len(hosts)}/{n} hosts, "
                         f"{len(bad)} not ok with {GPUS_PER_HOST} GPUs: {bad[:5]} "
                         f"{_tail(res.stderr, 500)}")
    return clock.result()


#: The same work Ansible does (one command, here also parsed), through gpufleet's engine:
#: inventory -> asyncssh transport -> nvidia-smi XML parser. Run as its own process so the
#: interpreter start is counted, as for the other two.
_SAME_WORK = """
import asyncio, json, sys
from pathlib import Path
from gpufleet.inventory import load_inventory
from gpufleet.collect.nvidia_smi import parse_nvidia_smi_xml
from gpufleet.collect.ssh import SshTransport
from gpufleet.collect.transport import Target, run_many
inv = load_inventory(Path(sys.argv[1]))
targets = [Target(h.name, h.address, h.port, h.user, h.key_file) for h in inv.hosts]
res = asyncio.run(run_many(SshTransport(), targets, "nvidia-smi -q -x", forks=200))
gpus = [len(parse_nvidia_smi_xml(r.output or "", r.host).gpus) if r.outcome.value == "ok" else -1
        for r in res]
print(json.dumps(gpus))
"""


def _timed_json(code: str, inv: Path, what: str) -> tuple[list[Any], Measured]:
    """Run ``code`` (a ``python -c`` program of this venv) on the inventory; its JSON list."""
    with _Clock() as clock:
        res = subprocess.run([sys.executable, "-c", code, str(inv)],
                             capture_output=True, text=True, check=False)
    try:
        got: list[Any] = json.loads(res.stdout)
    except json.JSONDecodeError:
        raise BenchError(f"{what} run (rc {res.returncode}) printed no JSON: "
                         f"{_tail(res.stderr or res.stdout)}") from None
    return got, clock.result()


def run_gpufleet_same_work(inv: Path, n: int) -> Measured:
    """Time gpufleet's engine doing exactly Ansible's job: ``nvidia-smi -q -x``, parsed."""
    gpus, measured = _timed_json(_SAME_WORK, inv, "gpufleet same-work")
    if len(gpus) != n or any(g != GPUS_PER_HOST for g in gpus):
        raise BenchError(f"gpufleet same-work run: {gpus.count(GPUS_PER_HOST)}/{n} hosts "
                         f"with {GPUS_PER_HOST} GPUs")
    return measured


#: The floor of the whole collection: gpufleet's own script over gpufleet's SSH transport
#: (the same bytes ``collect`` sends), no parse and no store; every host must end with the
#: script's ``done`` line and 8 GPUs in its XML section.
_SAME_SCRIPT = """
import asyncio, json, sys
from pathlib import Path
from gpufleet.inventory import load_inventory
from gpufleet.collect.script import remote_script
from gpufleet.collect.ssh import SshTransport
from gpufleet.collect.transport import Target, run_many
inv = load_inventory(Path(sys.argv[1]))
targets = [Target(h.name, h.address, h.port, h.user, h.key_file) for h in inv.hosts]
res = asyncio.run(run_many(SshTransport(), targets, remote_script(), forks=200))
ok = [r.outcome.value == "ok" and (r.output or "").rstrip().endswith("@@gpufleet:done@@")
      and (r.output or "").count("<gpu id=") == 8 for r in res]
print(json.dumps(ok))
"""


def run_same_script(inv: Path, n: int) -> Measured:
    """Time raw asyncssh (gpufleet's transport) running the whole collection script."""
    ok, measured = _timed_json(_SAME_SCRIPT, inv, "same-script")
    if len(ok) != n or not all(ok):
        raise BenchError(f"same-script run: {sum(ok)}/{n} hosts complete")
    return measured


# --------------------------------------------------------------------------- ansible


def _mux_pids(control_dir: Path) -> list[int]:
    """Pids of ssh mux masters whose control path is under ``control_dir``."""
    needle = str(control_dir).encode()
    pids: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if cmd.startswith((b"ssh\0", b"/usr/bin/ssh\0")) and needle in cmd:
            pids.append(int(entry.name))
    return pids


def close_mux_masters(control_dir: Path) -> int:
    """``ssh -O exit`` every control socket, then kill (by pid) any master left. Returns count."""
    sockets = [p for p in control_dir.iterdir() if p.is_socket()] if control_dir.is_dir() else []
    for sock in sockets:
        subprocess.run(["ssh", "-S", str(sock), "-O", "exit", "bench"],
                       capture_output=True, check=False, timeout=10)
    deadline = time.monotonic() + 5
    while (left := _mux_pids(control_dir)) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    return len(sockets)


def run_ansible(
    inv: Path, work: Path, n: int, forks: int, attempt: int, script: Path | None = None
) -> Measured:
    """Time one out-of-the-box ``ansible all -m command -a 'nvidia-smi -q -x'``; with
    ``script``, ``-m command -a 'sh SCRIPT'``: gpufleet's whole collection script (a file the
    lab hosts share), every host's output ending with its ``done`` line."""
    ansible = _tool("ansible")
    tag = "script-" if script is not None else ""
    control_dir = work / f"ansible-cp-{tag}{attempt}"
    control_dir.mkdir()
    out_path = work / f"ansible-out-{tag}{attempt}.txt"
    env = {**os.environ,
           "LC_ALL": "C.UTF-8",
           "ANSIBLE_CONFIG": str(ANSIBLE_CFG),
           "ANSIBLE_HOST_KEY_CHECKING": "False",
           "ANSIBLE_SSH_CONTROL_PATH_DIR": str(control_dir),
           "ANSIBLE_LOCAL_TEMP": str(work / "ansible-local-tmp"),
           "ANSIBLE_NOCOLOR": "1"}
    command = "nvidia-smi -q -x" if script is None else f"sh {script}"
    cmd = [ansible, "all", "-i", str(inv), "-m", "command", "-a", command, "-f", str(forks)]
    try:
        with out_path.open("w", encoding="utf-8") as out, _Clock() as clock:
            res = subprocess.run(cmd, stdout=out, stderr=subprocess.PIPE, text=True, env=env,
                                 check=False)
    finally:
        closed = close_mux_masters(control_dir)
    print(f"    ansible left {closed} ssh mux master(s); closed", flush=True)
    text = out_path.read_text(encoding="utf-8", errors="replace")
    heads = list(_ANSIBLE_HEAD.finditer(text))
    statuses: dict[str, tuple[str, str | None]] = {m.group(1): (m.group(2), m.group(3))
                                                   for m in heads}
    bad = {h: s for h, s in statuses.items() if s != ("CHANGED", "0")}
    # GPUs per host: count <gpu id= between one result header and the next.
    gpus: dict[str, int] = {}
    for i, m in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(text)
        gpus[m.group(1)] = len(_GPU_TAG.findall(text, m.end(), end))
    short = {h: g for h, g in gpus.items() if g != GPUS_PER_HOST}
    if script is not None:
        done = len(re.findall(r"^@@gpufleet:done@@$", text, re.M))
        if done != n:
            short["(done lines)"] = done
    if res.returncode != 0 or len(statuses) != n or bad or short:
        raise BenchError(f"ansible: rc {res.returncode}, {len(statuses)}/{n} results, "
                         f"not CHANGED rc=0: {dict(list(bad.items())[:5])}, "
                         f"not {GPUS_PER_HOST} GPUs: {dict(list(short.items())[:5])}; "
                         f"stderr: {_tail(res.stderr, 800)}; output: {_tail(text, 800)}")
    return clock.result()


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--hosts", type=int, default=100, help="lab hosts (default 100)")
    ap.add_argument("--forks-ansible", type=int, default=50, help="ansible -f (default 50)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per tool; the median is shown")
    ap.add_argument("--keep", action="store_true", help="leave the lab running at the end")
    ap.add_argument("--json-out", type=Path, help="also write the results as JSON here")
    ap.add_argument("--script-only", action="store_true",
                    help="only the whole-script rows (skip the single-command ones)")
    args = ap.parse_args(argv)
    if args.hosts < 1 or args.repeat < 1 or args.forks_ansible < 1:
        ap.error("--hosts, --repeat and --forks-ansible must be >= 1")
    n: int = args.hosts

    work = Path(tempfile.mkdtemp(prefix="gpufleet-bench-", dir="/tmp"))
    work.chmod(0o755)  # the lab user must reach its host files
    print(f"bench dir {work}; starting {n} sshd lab hosts ({MODEL}) ...", flush=True)
    t0 = time.perf_counter()
    lab = SshLab(work / "lab")
    try:
        fleet = create_fleet(n, models=[MODEL], faults={})
        for host in fleet.hosts:
            lab.add_host(host.name, render_sections(host))
        make_ansible_ready(lab, [h.name for h in fleet.hosts])
        lab.start()
        inv = write_inventory(lab, work / "inventory.ini")
        print(f"lab up in {time.perf_counter() - t0:.1f} s; inventory {inv}", flush=True)

        script = work / "collect.sh"  # the same script, as a file for Ansible
        script.write_text(remote_script(), encoding="utf-8")
        script.chmod(0o644)
        gf = ToolResult("gpufleet collect")
        raw = ToolResult("asyncssh, same script (floor)")
        an_script = ToolResult(f"ansible, same script (-f {args.forks_ansible})")
        same = ToolResult("gpufleet engine, same command")
        an = ToolResult(f"ansible -m command (-f {args.forks_ansible})")
        for i in range(args.repeat):
            gf.add(run_gpufleet(inv, work, n, i))
            print(f"  run {i + 1}/{args.repeat}: gpufleet {gf.walls[-1]:.2f} s", flush=True)
            raw.add(run_same_script(inv, n))
            print(f"  run {i + 1}/{args.repeat}: raw scr  {raw.walls[-1]:.2f} s", flush=True)
            an_script.add(run_ansible(inv, work, n, args.forks_ansible, i, script))
            print(f"  run {i + 1}/{args.repeat}: ans scr  {an_script.walls[-1]:.2f} s",
                  flush=True)
            if args.script_only:
                continue
            same.add(run_gpufleet_same_work(inv, n))
            print(f"  run {i + 1}/{args.repeat}: same cmd {same.walls[-1]:.2f} s", flush=True)
            an.add(run_ansible(inv, work, n, args.forks_ansible, i))
            print(f"  run {i + 1}/{args.repeat}: ansible  {an.walls[-1]:.2f} s", flush=True)
    except BaseException:
        if not args.keep:
            lab.stop()
        raise
    if args.keep:
        atexit.unregister(lab.stop)  # SshLab stops itself at exit unless told otherwise
        pids = lab.sshd_pids()
        (work / "sshd.pids").write_text("".join(f"{p}\n" for p in pids), encoding="utf-8")
        print(f"--keep: {len(pids)} lab sshd left running under {work}; stop them with "
              f"kill $(cat {work}/sshd.pids)")
    else:
        lab.stop()
        shutil.rmtree(work, ignore_errors=True)

    cpus = _cpus()
    print()
    print(f"whole script, median of {args.repeat}: gpufleet collect {gf.median:.2f} s = "
          f"{gf.median / raw.median:.2f}x raw asyncssh with the same script "
          f"({raw.median:.2f} s; goal <= 1.3x); Ansible with the same script "
          f"{an_script.median:.2f} s = {an_script.median / raw.median:.1f}x the floor, "
          f"{an_script.median / gf.median:.1f}x gpufleet (goal >= 5x)")
    print(f"  walls: gpufleet {' '.join(f'{w:.2f}' for w in gf.walls)}; raw "
          f"{' '.join(f'{w:.2f}' for w in raw.walls)}; ansible script "
          f"{' '.join(f'{w:.2f}' for w in an_script.walls)}")
    if args.script_only:
        return 0
    ratio = an.median / gf.median
    print()
    print(f"N = {n} hosts ({MODEL}, {GPUS_PER_HOST} GPUs each), controller and hosts share "
          f"{cpus} CPUs (nproc), median of {args.repeat} run(s)")
    print(f"{'tool':<34} {'wall s':>8} {'hosts/s':>9} {'ctl cpu-s':>10} {'all cpu-s':>10}")
    for r in (gf, same, an):
        print(f"{r.tool:<34} {r.median:>8.2f} {n / r.median:>9.1f} "
              f"{statistics.median(r.controller_cpu):>10.2f} "
              f"{statistics.median(r.machine_cpu):>10.2f}")
    ctl_ratio = statistics.median(an.controller_cpu) / max(
        statistics.median(gf.controller_cpu), 1e-9)
    print(f"ratio ansible / gpufleet: {ratio:.1f}x wall, {ctl_ratio:.1f}x controller CPU")
    print(f"ratio ansible / gpufleet engine on the same command: {an.median / same.median:.1f}x "
          "wall")
    print("ctl cpu-s: CPU of the timed process and the children it reaped (Ansible's "
          "ControlPersist masters excluded); all cpu-s: every CPU on the machine, lab hosts "
          "included.")
    print("note: 'gpufleet collect' runs the full collection (~17 tools per host, parsed and "
          "stored in SQLite); ansible runs only nvidia-smi -q -x and parses nothing; the engine "
          "row runs that same single command through gpufleet's transport and parser.")
    if args.json_out:
        args.json_out.write_text(json.dumps({
            "hosts": n, "model": MODEL, "cpus": cpus, "repeat": args.repeat,
            "forks_ansible": args.forks_ansible,
            "gpufleet_s": gf.walls, "ansible_s": an.walls,
            "gpufleet_median_s": gf.median, "ansible_median_s": an.median,
            "ratio_ansible_over_gpufleet": ratio,
            "gpufleet_controller_cpu_s": gf.controller_cpu,
            "ansible_controller_cpu_s": an.controller_cpu,
            "gpufleet_machine_cpu_s": gf.machine_cpu, "ansible_machine_cpu_s": an.machine_cpu,
            "controller_cpu_ratio": ctl_ratio,
            "gpufleet_same_command_s": same.walls,
            "ratio_same_command": an.median / same.median,
        }, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as e:
        print(f"bench FAILED: {e}", file=sys.stderr)
        sys.exit(1)
