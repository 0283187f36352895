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
``jobcomp/filetxt`` (``sacct --completion`` reads it even without a slurmdbd).

With ``accounting=True`` the lab also runs a ``slurmdbd`` (Debian ``slurmdbd``) on a database
of its own in the MariaDB at ``127.0.0.1:3306`` (``slurm_acct_<random>``, dropped at
:meth:`SlurmLab.stop`), registers the cluster with ``sacctmgr -i add cluster`` before
``slurmctld`` starts, so ``sacct --json`` answers from real job records. Records reach
slurmdbd asynchronously: :meth:`SlurmLab.wait_sacct` polls until a job is there.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

APT_PACKAGES = ("slurm-wlm", "munge", "slurmdbd")
MARIADB = ("127.0.0.1", 3306, "root")  # host, port, user (empty password): CI's MariaDB


class SlurmLabError(RuntimeError):
    """The lab could not be installed or started."""


def ensure_slurm() -> None:
    """Install slurm-wlm, munge and slurmdbd (Debian) when missing (the MariaDB slurmdbd
    writes to is not installed here: see :data:`MARIADB`)."""
    if all(shutil.which(b) for b in ("slurmctld", "slurmd", "munged", "sinfo", "sacct",
                                     "slurmdbd", "sacctmgr")):
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *APT_PACKAGES]):
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if r.returncode != 0:
            raise SlurmLabError(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr[-2000:]}")
    for b in ("slurmctld", "slurmd", "munged", "slurmdbd"):
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


def _kill_pidfiles(paths: Sequence[Path], timeout: float = 10) -> None:
    """SIGTERM every daemon named by a PID file in ``paths`` at once, wait for all of them to
    exit (each takes a second or more to shut down), SIGKILL what is left after ``timeout``."""
    pids: list[int] = []
    for path in paths:
        try:
            pid = int(path.read_text().strip())
        except (OSError, ValueError):
            continue
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
            pids.append(pid)
    deadline = time.monotonic() + timeout
    while pids and time.monotonic() < deadline:
        time.sleep(0.05)
        pids = [p for p in pids if _alive(p)]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


class SlurmLab:
    """One cluster in ``root``. :meth:`start` with node lines, :meth:`stop` at the end."""

    def __init__(self, root: Path, cluster: str = "gpufleet", accounting: bool = False) -> None:
        self.root = root
        self.cluster = cluster
        self.conf = root / "slurm.conf"
        self.nodes: list[str] = []
        self.started: list[Path] = []  # pid files of the daemons this lab started
        self.accounting = accounting
        self.database: str | None = None  # the MariaDB database slurmdbd writes, once created

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

    def start(self, node_lines: Sequence[str], gres_conf: str, gpus: int = 8,
              topology: str | None = None) -> None:
        """Write the configuration around ``node_lines`` (``NodeName=...`` from the export) and
        ``gres_conf`` (and ``topology``: a ``topology.conf`` for ``topology/tree``), make the
        fake devices, start munged, slurmctld and one slurmd per node, and wait until every
        node answers."""
        root = self.root
        for d in ("state", "log", "spool", "munge"):
            (root / d).mkdir(parents=True, exist_ok=True)
        self.nodes = [ln.split()[0].removeprefix("NodeName=") for ln in node_lines]
        dbd_port, ctl_port, slurmd_port, *node_ports = free_ports(3 + len(self.nodes))
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
            "JobCompType=jobcomp/filetxt",
            f"JobCompLoc={root}/log/jobcomp.txt",
        ]
        if self.accounting:
            lines += [
                "JobAcctGatherType=jobacct_gather/linux",
                "JobAcctGatherFrequency=30",
                "AccountingStorageType=accounting_storage/slurmdbd",
                "AccountingStorageHost=127.0.0.1",
                f"AccountingStoragePort={dbd_port}",
                # the munge socket for slurmdbd connections (AuthInfo does not apply to them)
                f"AccountingStoragePass={munge_socket}",
            ]
        else:
            lines += ["JobAcctGatherType=jobacct_gather/none",
                      "AccountingStorageType=accounting_storage/none"]
        for line, port in zip(node_lines, node_ports, strict=True):
            lines.append(f"{line} NodeHostname={host} NodeAddr=127.0.0.1 Port={port}")
        lines.append(f"PartitionName=gpu Nodes={','.join(self.nodes)} Default=YES "
                     "MaxTime=INFINITE State=UP")
        if topology is not None:  # read from slurm.conf's directory
            lines.append("TopologyPlugin=topology/tree")
            (root / "topology.conf").write_text(topology)
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
        try:
            if self.accounting:
                self._start_slurmdbd(dbd_port, munge_socket)
            self._daemon(["slurmctld", "-f", str(self.conf)], root / "slurmctld.pid")
            for name in self.nodes:
                self._daemon(["slurmd", "-f", str(self.conf), "-N", name],
                             root / f"slurmd-{name}.pid")
            self.wait_idle(self.nodes)
        except BaseException:
            self.stop()  # a half-started lab leaves no daemon and no database behind
            raise

    def _start_slurmdbd(self, port: int, munge_socket: Path) -> None:
        """slurmdbd on a fresh database, then the cluster registered in it (slurmctld sends
        job records only for a cluster the database knows)."""
        if not shutil.which("slurmdbd"):
            raise SlurmLabError("slurmdbd not installed (Debian package slurmdbd)")
        host, db_port, user = MARIADB
        self.database = f"slurm_acct_{secrets.token_hex(6)}"
        root = self.root
        dbd_conf = root / "slurmdbd.conf"  # found next to SLURM_CONF's slurm.conf
        dbd_conf.write_text("\n".join([
            "AuthType=auth/munge",
            f"AuthInfo=socket={munge_socket}",
            "DbdHost=localhost",
            "DbdAddr=127.0.0.1",
            f"DbdPort={port}",
            "SlurmUser=root",
            f"PidFile={root}/slurmdbd.pid",
            f"LogFile={root}/log/slurmdbd.log",
            "StorageType=accounting_storage/mysql",
            f"StorageHost={host}",
            f"StoragePort={db_port}",
            f"StorageUser={user}",
            f"StorageLoc={self.database}",
        ]) + "\n")
        dbd_conf.chmod(0o600)  # slurmdbd refuses a configuration others can read
        self._daemon(["slurmdbd"], root / "slurmdbd.pid")
        deadline = time.monotonic() + 60
        err = ""
        while time.monotonic() < deadline:  # slurmdbd creates its tables before it listens
            r = subprocess.run(["sacctmgr", "-i", "add", "cluster", self.cluster], env=self.env,
                               capture_output=True, text=True, timeout=30, check=False)
            if r.returncode == 0:
                return
            err = (r.stderr or r.stdout).strip()
            time.sleep(0.3)
        raise SlurmLabError(f"sacctmgr add cluster {self.cluster}: {err}\n"
                            f"{self._log_tail('slurmdbd.log')}")

    def _log_tail(self, name: str) -> str:
        log = self.root / "log" / name
        return log.read_text()[-3000:] if log.exists() else ""

    def sacct_jobs(self, *args: str) -> list[dict[str, object]]:
        """The jobs ``sacct --json -a ARGS`` reports (an empty list for "Nothing found")."""
        doc = json.loads(self.run("sacct", "--json", "-a", *args))
        jobs = doc.get("jobs") or []
        return [j for j in jobs if isinstance(j, dict)]

    def wait_sacct(self, job_ids: Sequence[str], states: Sequence[str] = (),
                   since: datetime | None = None,
                   timeout: float = 60) -> dict[str, dict[str, object]]:
        """Poll ``sacct`` until every job of ``job_ids`` is recorded as ended (in one of
        ``states`` when given) and, with ``since``, is also found by the window query ``sacct
        -S since``. Records reach slurmdbd after the job, in pieces: a job can show as FAILED
        with an end time by ``-j`` while its eligible time is still "Unknown", and until that
        arrives the window query (jobs *eligible* in the window) says "Nothing found"."""
        deadline = time.monotonic() + timeout
        seen: dict[str, dict[str, object]] = {}
        in_window: set[str] = set()
        while time.monotonic() < deadline:
            jobs = self.sacct_jobs("-j", ",".join(job_ids))
            seen = {str(j.get("job_id")): j for j in jobs}
            if since is not None:
                start = since.astimezone().strftime("%Y-%m-%dT%H:%M:%S")  # sacct: local time
                in_window = {str(j.get("job_id")) for j in self.sacct_jobs("-S", start)}
            if all(_ended(seen.get(j), states) for j in job_ids) and (
                since is None or set(job_ids) <= in_window
            ):
                return seen
            time.sleep(0.5)
        got = {j: _job_state(seen.get(j)) for j in job_ids}
        raise SlurmLabError(f"sacct did not record jobs {list(job_ids)} within {timeout}s: {got}"
                            f"{'' if since is None else f', in the window: {sorted(in_window)}'}"
                            f"\n{self._log_tail('slurmdbd.log')}")

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
        """Stop every daemon this lab started, slurmds first, by PID file; drop the
        accounting database."""
        # slurmds and slurmctld together (slurmctld still reports to slurmdbd as it stops,
        # through munged), then slurmdbd and munged
        last = ("slurmdbd.pid", "munged.pid")
        _kill_pidfiles([p for p in self.started if p.name not in last])
        _kill_pidfiles([p for p in self.started if p.name in last])
        self.started.clear()
        if self.database is not None:
            host, port, user = MARIADB
            subprocess.run(["mysql", "-h", host, "-P", str(port), "-u", user, "-e",
                            f"DROP DATABASE IF EXISTS `{self.database}`"],
                           capture_output=True, text=True, timeout=60, check=False)
            self.database = None


def _job_state(job: dict[str, object] | None) -> str:
    if job is None:
        return "not recorded"
    state = job.get("state")
    current = state.get("current") if isinstance(state, dict) else None
    if isinstance(current, list):
        current = current[0] if current else None
    return str(current)


def _ended(job: dict[str, object] | None, states: Sequence[str]) -> bool:
    state = _job_state(job)
    if states:
        return state in states
    return state not in ("not recorded", "PENDING", "RUNNING", "REQUEUED", "SUSPENDED", "None")
