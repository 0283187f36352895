"""What a lab host answers to ``gpufleet remediate`` over the ``sim`` transport (issue 10):
the holders of its GPUs (the ``gpu-process`` fault leaves a compute process on the GPU the
faults point at, with ``/dev/nvidia*`` open), a GPU reset that succeeds or, with the
``reset-fails`` fault, fails (then an nvidia-bug-report path), the verification query, a
reboot, and the host answering again. The answers follow the framing of
:mod:`gpufleet.domain.remediation`'s scripts."""

from __future__ import annotations

import re

from gpufleet.domain.remediation import MARK
from gpufleet.lab.faults import _split_fault
from gpufleet.lab.fleet import LabHost
from gpufleet.lab.renderers import _LEFT_NAME, _LEFT_PID
from gpufleet.lab.templates import _identity, fault_gpu_index


def render_remedy(host: LabHost, script: str) -> str:
    """The output of one remediation script (see the module)."""
    kinds = {_split_fault(f)[0] for f in host.faults}
    if host.spec.gpu_count == 0:  # a CPU or storage node: no GPU, no holder, nothing reset
        return _no_gpu(script)
    suspect = fault_gpu_index(host)
    present = [
        i for i in range(host.spec.gpu_count) if not ("gpu-missing" in kinds and i == suspect)
    ]
    if f"{MARK} probe" in script:
        held = "gpu-process" in kinds
        apps = f"{_LEFT_PID}, {_LEFT_NAME}, {_identity(host, suspect)['uuid']}\n" if held else ""
        opened = f" {_LEFT_PID}\n" if held else "\n"
        return f"@@apps\n{apps}@@rc 0\n@@daemons\n@@rc 0\n@@open\n{opened}@@rc 0\n"
    if f"{MARK} reset" in script:
        m = re.search(r"nvidia-smi -r(?: -i ([\d,]+))?", script)
        targets = [int(i) for i in m.group(1).split(",")] if m and m.group(1) else present
        verify = "".join(
            f"{i}, 00000000:{0x18 + i:02X}:00.0, {_identity(host, i)['uuid']}, "
            f"{host.spec.gpu_model}\n"
            for i in targets
            if i in present
        )
        if "reset-fails" in kinds:
            return (
                "@@stop\n@@rc 0\n@@reset\nUnable to reset GPU: the GPU is in use or in a bad "
                "state\n@@rc 255\n@@verify\n"
                f"{verify}@@rc 0\n@@bugreport\n/var/log/nvidia-bug-report-gpufleet-1.log.gz\n"
                "@@rc 0\n"
            )
        return f"@@stop\n@@rc 0\n@@reset\nAll done.\n@@rc 0\n@@verify\n{verify}@@rc 0\n"
    if f"{MARK} restart" in script:  # issue 24: a service restarted (systemctl, crictl)
        if "crictl" in script:
            return "@@restart\n3f2a9c1b7d4e\n@@rc 0\n"
        return "@@restart\n@@rc 0\n@@active\nactive\n@@rc 0\n"
    if f"{MARK} reboot" in script:
        return "@@rc 0\n"
    return "@@alive\n"


def _no_gpu(script: str) -> str:
    """A node without GPUs: the probe finds no holder, the reset and its verification find
    no GPU (nvidia-smi is not installed), services restart and the host reboots as any."""
    if f"{MARK} probe" in script:
        return "@@apps\n@@rc 0\n@@daemons\n@@rc 0\n@@open\n\n@@rc 0\n"
    if f"{MARK} reset" in script:
        return ("@@stop\n@@rc 0\n@@reset\nsh: 1: nvidia-smi: not found\n@@rc 127\n@@verify\n"
                "@@rc 127\n")
    if f"{MARK} restart" in script:
        return "@@restart\n@@rc 0\n@@active\nactive\n@@rc 0\n"
    if f"{MARK} reboot" in script:
        return "@@rc 0\n"
    return "@@alive\n"
