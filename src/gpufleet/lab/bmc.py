"""The lab's BMCs (``gpufleet lab create --bmc``, issue 29 item 7): one real Redfish emulator
(sushy-tools' ``sushy-emulator`` with its fake systems driver) on loopback serving one system
per lab host, wired into the lab inventory so ``gpufleet bmc status``, ``bmc power`` and the
remediation ladder reach it.

* Each host's system has the host's name and its DMI ``product_uuid`` as UUID (the identity
  guard sees the same machine in-band and out of band).
* The login is ``labadmin`` with a random password written to ``<lab>/bmc/password``
  (mode 0600); the inventory names the file (``gpufleet_bmc_password_file``), never the
  password, and the emulator keeps only its bcrypt hash (``<lab>/bmc/htpasswd``).
* Power actions reach the lab hosts (:mod:`gpufleet.lab.bmc_emulator`): off, the host gets no
  route for SSH; on again, it has booted (faults a boot ends, such as ``sshd-down``, are gone).
* The emulator runs in its own session, its pid in ``<lab>/bmc/emulator.pid``;
  ``gpufleet lab destroy`` (and a new ``lab create`` in the same directory) stops it.
"""

from __future__ import annotations

import base64
import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from gpufleet.errors import ConfigError
from gpufleet.lab.fleet import LabFleet
from gpufleet.lab.templates import system_identity

BMC_DIR = "bmc"
USERNAME = "labadmin"
PID_FILE = "emulator.pid"
_MODULE = "gpufleet.lab.bmc_emulator"


@dataclass(frozen=True)
class LabBmc:
    """A running lab BMC emulator: its URL, process id and password file."""

    url: str
    pid: int
    password_file: Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def system_uuid(fleet: LabFleet, host: str) -> str:
    """The Redfish system UUID of a lab host: its DMI ``product_uuid``."""
    return system_identity(fleet.host(host))["product_uuid"]


def host_vars(fleet: LabFleet, bmc: LabBmc) -> dict[str, dict[str, str]]:
    """The inventory variables of each lab host's BMC (the password by file only)."""
    return {
        h.name: {
            "gpufleet_bmc_address": bmc.url,
            "gpufleet_bmc_system": system_uuid(fleet, h.name),
            "gpufleet_bmc_username": USERNAME,
            "gpufleet_bmc_password_file": str(bmc.password_file),
        }
        for h in fleet.hosts
    }


def _config(fleet: LabFleet, d: Path, port: int) -> str:
    systems = [
        {
            "uuid": system_uuid(fleet, h.name),
            "name": h.name,
            "power_state": "Off" if h.powered_off else "On",
            "external_notifier": False,
            "nics": [{"mac": f"02:00:00:{i >> 16 & 255:02x}:{i >> 8 & 255:02x}:{i & 255:02x}",
                      "ip": "127.0.0.1"}],
        }
        for i, h in enumerate(fleet.hosts, start=1)
    ]
    return (
        "SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'\n"
        f"SUSHY_EMULATOR_LISTEN_PORT = {port}\n"
        "SUSHY_EMULATOR_FAKE_DRIVER = True\n"
        f"SUSHY_EMULATOR_STATE_DIR = {str(d / 'state')!r}\n"
        f"SUSHY_EMULATOR_AUTH_FILE = {str(d / 'htpasswd')!r}\n"
        "SUSHY_EMULATOR_FEATURE_SET = 'full'\n"
        f"SUSHY_EMULATOR_FAKE_SYSTEMS = {systems!r}\n"
    )


def _ready(url: str, password: str, proc: subprocess.Popen[bytes], log: Path,
           timeout_s: float) -> None:
    token = base64.b64encode(f"{USERNAME}:{password}".encode()).decode()
    req = urllib.request.Request(url + "/redfish/v1/", headers={"Authorization": "Basic " + token})
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace")[-600:].strip()
            raise ConfigError(f"lab BMC emulator exited {proc.returncode}: {tail}")
        with (contextlib.suppress(OSError, urllib.error.URLError),
              urllib.request.urlopen(req, timeout=2) as r):
            if r.status == 200:
                return
        time.sleep(0.1)
    stop_bmc(log.parent.parent)
    raise ConfigError(f"lab BMC emulator at {url} did not answer within {timeout_s:.0f} s "
                      f"(log: {log})")


def start_bmc(lab_dir: Path, fleet: LabFleet, timeout_s: float = 60.0) -> LabBmc:
    """Start the lab BMC emulator for ``fleet`` (saved in ``lab_dir``); stops an old one."""
    import importlib.util

    try:
        import bcrypt

        if importlib.util.find_spec("sushy_tools") is None:  # run by the launched process
            raise ImportError("sushy_tools")
    except ImportError:
        raise ConfigError(
            setting="--bmc",
            cause="the lab BMC needs sushy-tools (pip install 'sushy-tools>=2.0', part of "
            "gpufleet's dev extra); nothing was started",
        ) from None
    stop_bmc(lab_dir)
    d = lab_dir / BMC_DIR
    shutil.rmtree(d, ignore_errors=True)  # the emulator's state persists: start afresh
    d.mkdir(parents=True)
    password = secrets.token_urlsafe(18)
    pw = d / "password"
    fd = os.open(pw, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(password + "\n")
    digest = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()
    (d / "htpasswd").write_text(f"{USERNAME}:{digest}\n", encoding="utf-8")
    port = _free_port()
    conf = d / "emulator.conf"
    conf.write_text(_config(fleet, d, port), encoding="utf-8")
    log = d / "emulator.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", _MODULE, str(conf), str(lab_dir)],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,  # outlives `lab create`; `lab destroy` stops it
        )
    (d / PID_FILE).write_text(f"{proc.pid}\n", encoding="utf-8")
    url = f"http://127.0.0.1:{port}"
    _ready(url, password, proc, log, timeout_s)
    return LabBmc(url=url, pid=proc.pid, password_file=pw)


def _ours(pid: int, lab_dir: Path) -> bool:
    """The process ``pid`` is this lab's BMC emulator (not a recycled pid)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return _MODULE.encode() in argv and str(lab_dir).encode() in argv


def stop_bmc(lab_dir: Path, wait_s: float = 10.0) -> bool:
    """Stop the lab BMC emulator of ``lab_dir``, if one runs; True when one was stopped."""
    pid_file = lab_dir / BMC_DIR / PID_FILE
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return False
    pid_file.unlink(missing_ok=True)
    if not _ours(pid, lab_dir):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # reap it when it is our own child
        if not _ours(pid, lab_dir):
            return True
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    return True
