"""Simulated transport ``sim``: lab hosts answer with real captured output, no network.

The product does not import this module: it is registered through the ``gpufleet.transports``
entry point (``sim = "gpufleet.lab.transport:SIM"``, see pyproject.toml), and a host uses it
with the inventory variables ``gpufleet_transport=sim gpufleet_lab_dir=DIR``.

Transport-level faults recorded on a lab host (``unreachable``, ``hang``, ``wrong-key``,
``host-key-changed``, ``sshd-down``; a machine its lab BMC powered off) are reported exactly as
the SSH transport reports the real thing. A hang is reported at once rather than by sleeping
through the timeout, so a demo of hundreds of hosts stays fast. ``lab.json`` is read again
when it changed (``lab change``, the lab BMC's power actions), so a long run sees a host go
down and come back.

A script the lab does not answer from captures (a campaign's ``--command``, issue 29 item 7)
runs in ``sh`` on this machine, in the host's own directory ``<lab>/hosts/<name>`` (its
``HOME``), as a real-sshd lab host runs it; the active tests of NVIDIA's tools are answered
with captures, and refused on hosts without NVIDIA GPUs. The sections answered are those the
script runs (its ``sec`` lines): the collection's, and for ``gpufleet reclaim`` the reclaim
sections too (clean unless the host carries a reclaim fault: gpu-process, stale-mount,
lessee-process, lessee-crontab).
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import re
import shlex
import time
from pathlib import Path

from gpufleet.collect.hostkeys import pin_accepts, pin_fingerprint
from gpufleet.collect.local import LocalTransport
from gpufleet.collect.transport import (
    Outcome,
    RawResult,
    Target,
    Transport,
    TransportOptions,
    TransportPlugin,
    fingerprint,
)
from gpufleet.domain.remediation import MARK as REMEDY_MARK
from gpufleet.errors import ConfigError
from gpufleet.lab.captures import captures_dir
from gpufleet.lab.fleet import LAB_FILE, LabFleet, LabHost, apply_change
from gpufleet.lab.mig import is_mig_script, render_mig
from gpufleet.lab.probe import render_probe
from gpufleet.lab.remedy import render_remedy
from gpufleet.lab.renderers import render_output

#: Active tests the lab answers, each with the real captured output of that tool.
ACTIVE_CAPTURES = {
    "dcgmi diag": "dcgm/nvidia-dcgm_JsonResultTests_real-output_diag-3.1.0_8gpu.txt",
    "all_reduce_perf": "active/superbench_nccl_allreduce.log",
    "gpu_burn": "active/superbench_gpu_burn.excerpt.log",
}
#: The GPU model each capture was taken on where that decides its figures: the all-reduce
#: bandwidth is an 8x A100-SXM4 host's (active/PROVENANCE.md), not what an H100 would reach.
ACTIVE_CAPTURE_MODELS = {"all_reduce_perf": "A100"}


#: The lab's driver installer (a campaign ``--command``): ``lab-install-driver VERSION``
#: installs that driver on the lab host (``gpufleet lab change --driver``), as a driver
#: playbook would on a real host; the script's ``echo "MARK$?"`` lines answer exit status 0.
_INSTALL = re.compile(r"^lab-install-driver\s+([\w.\-]+)\s*$", re.MULTILINE)
_STATUS_ECHO = re.compile(r'^echo "([\w=\-]+)\$\?"$', re.MULTILINE)

#: One ``sec NAME COMMAND`` line of the collection script (collect/script.py): a section.
_SEC_LINE = re.compile(r"^sec (\S+) ", re.MULTILINE)


def sim_host_key(host: LabHost) -> str:
    """A stable fake ed25519 public key per lab host; rotates with the host-key-changed fault."""
    rotation = "rotated" if "host-key-changed" in host.faults else "original"
    digest = hashlib.sha256(f"{host.name}:{rotation}".encode()).digest()
    blob = b"\x00\x00\x00\x0bssh-ed25519\x00\x00\x00\x20" + digest
    return "ssh-ed25519 " + base64.b64encode(blob).decode()


class SimTransport:
    """Collects lab hosts of one lab directory."""

    name = "sim"

    def __init__(self, lab_dir: Path) -> None:
        self.lab_dir = lab_dir
        self._stamp: int | None = None
        self.hosts: dict[str, LabHost] = {}
        self._reload()

    def _reload(self) -> None:
        """Read ``lab.json`` again when it changed since the last read."""
        try:
            stamp = (self.lab_dir / LAB_FILE).stat().st_mtime_ns
        except OSError:
            stamp = None
        if stamp is None or stamp != self._stamp:
            self.hosts = {h.name: h for h in LabFleet.load(self.lab_dir).hosts}
            self._stamp = stamp

    async def run(self, target: Target, script: str, timeout_s: float) -> RawResult:
        """Answer as the lab host would (see the module)."""
        start = time.monotonic()
        self._reload()
        host = self.hosts.get(target.name)
        if host is None:
            return RawResult(
                target.name, Outcome.UNREACHABLE, f"{target.address}: no such lab host"
            )
        faults = set(host.faults)
        # a rack tray pulled out or powered off (lab/racks.py), a machine its lab BMC turned off
        if "tray-missing" in faults or host.powered_off:
            return RawResult(
                target.name,
                Outcome.UNREACHABLE,
                f"connect to {target.address}:{target.port}: No route to host",
            )
        if "unreachable" in faults or "sshd-down" in faults:
            return RawResult(
                target.name,
                Outcome.UNREACHABLE,
                f"connect to {target.address}:{target.port}: Connection refused",
            )
        key = sim_host_key(host)
        if target.pinned_host_key and not pin_accepts(target.pinned_host_key, key):
            return RawResult(
                target.name,
                Outcome.HOST_KEY_CHANGED,
                f"host key changed: pinned {pin_fingerprint(target.pinned_host_key)}, "
                f"offered {fingerprint(key)}; refusing to run",
                host_key=key,
            )
        if "wrong-key" in faults:
            return RawResult(
                target.name,
                Outcome.AUTH_FAILED,
                f"{target.user or 'root'}@{target.address}: Permission denied (publickey)",
            )
        if "hang" in faults:
            return RawResult(
                target.name,
                Outcome.TIMEOUT,
                f"no answer within {timeout_s:.0f} s (command still running)",
            )
        if "@@gpufleet:probe" in script:  # the inspection probe (gpufleet inspect)
            output = render_probe(host, script)
        elif REMEDY_MARK in script:  # gpufleet remediate (lab/remedy.py)
            output = render_remedy(host, script)
        elif is_mig_script(script):  # a campaign applying a MIG layout (lab/mig.py)
            output = render_mig(self.lab_dir, host, script)
        elif "@@gpufleet:script" in script:
            # Answer the sections the script asks for (reclaim adds its own after the
            # collection's), as the real-sshd lab's fake tools do; none named: the collection.
            output = render_output(host, _SEC_LINE.findall(script) or None)
        elif (install := _INSTALL.match(script.lstrip())) is not None:
            output = self.install_driver(host, install.group(1), script)
        else:
            found = next(
                (rel for cmd, rel in ACTIVE_CAPTURES.items() if script.lstrip().startswith(cmd)),
                None,
            )
            if found is None:  # a command of its own: run in the host's directory
                return await self._shell(host, target, script, timeout_s, key)
            if host.spec.vendor != "nvidia":  # NVIDIA's tools, on NVIDIA hosts
                return RawResult(
                    target.name, Outcome.ERROR, f"lab host cannot run {script.split()[0]!r}"
                )
            output = (captures_dir() / found).read_text()
        return RawResult(
            target.name,
            Outcome.OK,
            "",
            output=output,
            host_key=key,
            duration_s=time.monotonic() - start,
        )


    def install_driver(self, host: LabHost, version: str, script: str) -> str:
        """``lab-install-driver VERSION``: the lab host now runs that driver (saved in the lab
        directory, so the next collection sees it)."""
        fl = apply_change(LabFleet.load(self.lab_dir), host.name, driver=version)
        fl.save(self.lab_dir)
        self.hosts[host.name] = fl.host(host.name)
        marks = "".join(f"{m}0\n" for m in _STATUS_ECHO.findall(script))
        return f"driver {version} installed on {host.name}\n{marks}"

    async def _shell(
        self, host: LabHost, target: Target, script: str, timeout_s: float, key: str
    ) -> RawResult:
        """``script`` in ``sh`` in the host's directory ``<lab>/hosts/<name>`` (its HOME)."""
        home = self.lab_dir / "hosts" / host.name
        home.mkdir(parents=True, exist_ok=True)
        env = {"HOME": str(home), "LAB_HOST": host.name}
        raw = await LocalTransport(env).run(
            target, f"{_LOGIN_ENV}\ncd {shlex.quote(str(home))}\n{script}", timeout_s
        )
        return dataclasses.replace(raw, host_key=key)


#: What a login shell on a host has, and no more: this process's environment (its
#: ``GPUFLEET_*`` settings, a secret key among them) is not the lab host's.
_LOGIN_ENV = (
    "for v in $(env | sed -n 's/^\\([A-Za-z_][A-Za-z0-9_]*\\)=.*/\\1/p'); do case $v in "
    "PATH|HOME|LAB_HOST|USER|LOGNAME|SHELL|LANG|LC_*|TZ|TERM) ;; *) unset \"$v\" 2>/dev/null;; "
    "esac; done"
)


def _open(options: TransportOptions) -> Transport:
    lab_dir = options.host_vars.get(LAB_DIR_VAR)
    if not lab_dir:
        raise ConfigError(f"gpufleet_transport=sim needs {LAB_DIR_VAR}")
    return SimTransport(Path(lab_dir))


#: Inventory variable naming the lab directory a ``sim`` host belongs to.
LAB_DIR_VAR = "gpufleet_lab_dir"

#: The ``gpufleet.transports`` entry point ``sim``.
SIM = TransportPlugin(
    _open, host_vars=(LAB_DIR_VAR,), description="lab hosts answering with real captures"
)
