"""A real Slurm cluster on loopback for the tests: one ``slurmctld`` and one ``slurmd -N NAME``
per node, GPUs as GRES backed by fake character devices (``mknod c 195 N``), authenticated by
a private ``munged`` (its own key and socket, so it neither needs nor disturbs a system one).

Follows ``/work/shared/docs/real-components.md`` section 5 (Debian ``slurm-wlm`` 22.05 and
``munge``; needs root for ``mknod``). Ports are picked free at start, so two test sessions on
one machine do not collide; every daemon is stopped by its PID file.

The node lines come from the caller (``gpufleet slurm export`` output in the tests): the lab
adds only what a loopback cluster needs (``NodeHostname``, ``NodeAddr``, ``Port``).
``SlurmdParameters=config_overrides`` makes every node report the configured CPUs and memory
(the exported lines describe real 8-GPU servers, not this machine). Job completions go to
``jobcomp/filetxt``, which ``sacct --completion`` reads without a slurmdbd.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

APT_PACKAGES = ("slurm-wlm", "munge")


class SlurmLabError(RuntimeError):
    """The lab could not be installed or started."""


def ensure_slurm() -> None:
    """Install slurm-wlm and munge (Debian) when missing."""
    if all(shutil.which(b) for b in ("slurmctld", "slurmd", "munged", "sinfo", "sacct")):
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *APT_PACKAGES]):
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if r.returncode != 0:
            raise SlurmLabError(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr[-2000:]}")
    for b in ("slurmctld", "slurmd", "munged"):
        if not shutil.which(b):
            raise SlurmLabError(f"{b} not found after installing {' '.join(APT_PACKAGES)}")


def free_ports(n: int) -> list[int]:
    """``n`` TCP ports free on 127.0.0.1 right now."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _kill_pidfile(path: Path) -> None:
    try:
        pid = int(path.read_text().strip())
    except (OSError, ValueError):
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


class SlurmLab:
    """One cluster in ``root``. :meth:`start` with node lines, :meth:`stop` at the end."""

    def __init__(self, root: Path, cluster: str = "gpufleet") -> None:
        self.root = root
        self.cluster = cluster
        self.conf = root / "slurm.conf"
        self.nodes: list[str] = []
        self.started: list[Path] = []  # pid files of the daemons this lab started

    @property
    def env(self) -> dict[str, str]:
        """The environment for Slurm commands run against this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def gpu_files(self) -> str:
        """The ``--gpu-files`` template of ``gpufleet slurm export`` for this lab's devices."""
        return str(self.root / "dev" / "{node}" / "nvidia[0-{last}]")

    def run(self, *args: str, check: bool = True, timeout: float = 30) -> str:
        """Run a Slurm command (``sinfo``, ``scontrol``...) against this cluster."""
        r = subprocess.run(
            list(args), env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and r.returncode != 0:
            raise SlurmLabError(f"{' '.join(args)}: exit {r.returncode}: {r.stderr.strip()}")
        return r.stdout

    def start(self, node_lines: Sequence[str], gres_conf: str, gpus: int = 8) -> None:
        """Write the configuration around ``node_lines`` (``NodeName=...`` from the export) and
        ``gres_conf``, make the fake devices, start munged, slurmctld and one slurmd per node,
        and wait until every node answers."""
        root = self.root
        for d in ("state", "log", "spool", "munge"):
            (root / d).mkdir(parents=True, exist_ok=True)
        self.nodes = [ln.split()[0].removeprefix("NodeName=") for ln in node_lines]
        ctl_port, slurmd_port, *node_ports = free_ports(2 + len(self.nodes))
        for name in self.nodes:
            dev = root / "dev" / name
            dev.mkdir(parents=True, exist_ok=True)
            (root / "spool" / name).mkdir(exist_ok=True)
            for g in range(gpus):
                path = dev / f"nvidia{g}"
                if not path.exists():
                    os.mknod(path, 0o600 | 0o020000, os.makedev(195, g))
        host = socket.gethostname().split(".")[0]  # must be the short hostname of this machine
        munge_socket = root / "munge" / "munge.socket"
        lines = [
            f"ClusterName={self.cluster}",
            f"SlurmctldHost={host}(127.0.0.1)",
            f"SlurmctldPort={ctl_port}",
            f"SlurmdPort={slurmd_port}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={munge_socket}",
            f"StateSaveLocation={root}/state",
            f"SlurmdSpoolDir={root}/spool/%n",
            f"SlurmctldPidFile={root}/slurmctld.pid",
            f"SlurmdPidFile={root}/slurmd-%n.pid",
            f"SlurmctldLogFile={root}/log/slurmctld.log",
            f"SlurmdLogFile={root}/log/slurmd-%n.log",
            "ProctrackType=proctrack/pgid",
            "TaskPlugin=task/none",
            "SchedulerType=sched/backfill",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "SlurmdParameters=config_overrides",
            "GresTypes=gpu",
            "ReturnToService=2",
            "SlurmdTimeout=30",
            "MpiDefault=none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/filetxt",
            f"JobCompLoc={root}/log/jobcomp.txt",
        ]
        for line, port in zip(node_lines, node_ports, strict=True):
            lines.append(f"{line} NodeHostname={host} NodeAddr=127.0.0.1 Port={port}")
        lines.append(f"PartitionName=gpu Nodes={','.join(self.nodes)} Default=YES "
                     "MaxTime=INFINITE State=UP")
        self.conf.write_text("\n".join(lines) + "\n")
        (root / "gres.conf").write_text(gres_conf)
        key = root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        self._daemon(
            ["munged", "--force", f"--socket={munge_socket}", f"--key-file={key}",
             f"--pid-file={root}/munge/munged.pid", f"--log-file={root}/munge/munged.log",
             f"--seed-file={root}/munge/munged.seed"],
            root / "munge" / "munged.pid",
        )
        self._daemon(["slurmctld", "-f", str(self.conf)], root / "slurmctld.pid")
        for name in self.nodes:
            self._daemon(["slurmd", "-f", str(self.conf), "-N", name], root / f"slurmd-{name}.pid")
        self.wait_idle(self.nodes)

    def _daemon(self, cmd: list[str], pidfile: Path) -> None:
        r = subprocess.run(cmd, env=self.env, capture_output=True, text=True, check=False,
                           timeout=60)
        if r.returncode != 0:
            raise SlurmLabError(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()}")
        self.started.append(pidfile)
        for _ in range(200):
            if pidfile.exists() and pidfile.read_text().strip():
                return
            time.sleep(0.05)
        raise SlurmLabError(f"{cmd[0]} wrote no pid file {pidfile}")

    def node_states(self) -> dict[str, str]:
        """node -> ``%T`` state from sinfo (``idle``, ``drained``, ``idle*``...)."""
        out = self.run("sinfo", "-h", "-N", "-o", "%N %T", check=False)
        return dict(line.split(None, 1) for line in out.splitlines() if " " in line)

    def wait_idle(self, nodes: Sequence[str], timeout: float = 60) -> None:
        """Wait until every node in ``nodes`` is ``idle`` (answering, not drained)."""
        deadline = time.monotonic() + timeout
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            states = self.node_states()
            if all(states.get(n) == "idle" for n in nodes):
                return
            time.sleep(0.3)
        log = (self.root / "log" / "slurmctld.log")
        tail = log.read_text()[-3000:] if log.exists() else ""
        raise SlurmLabError(f"nodes not idle after {timeout}s: {states}\n{tail}")

    def stop(self) -> None:
        """Stop every daemon this lab started, slurmds first, by PID file."""
        for pidfile in reversed(self.started):
            _kill_pidfile(pidfile)
        self.started.clear()
