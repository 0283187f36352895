"""Who holds a host's claim, and whether that process is gone.

A claim records its owner as ``BOOT_ID PID START HOSTNAME``: the kernel's boot identity
(``/proc/sys/kernel/random/boot_id``), the process id and its start time (``/proc/PID/stat``
field 22, so a reused pid is not mistaken for the owner) and the machine's name. A claim whose
owner ran on this machine (same host name) in its current boot (same boot id) and whose
process no longer exists cannot be finishing anything: :func:`owner_gone` says so and the next
claim takes it at once instead of waiting for ``claimed_until`` (a ``kill -9`` or a lost
terminal used to hold its hosts for minutes). Anything unknown (another machine, another
boot, no ``/proc``) is never taken over: it waits for its claim to run out.
"""

from __future__ import annotations

import os
import socket
from functools import cache
from pathlib import Path

_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


@cache
def boot_id() -> str | None:
    """This machine's boot identity, or None where the kernel does not tell it."""
    try:
        text = _BOOT_ID.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text if text and " " not in text else None


def _start_time(pid: int) -> str | None:
    """Field 22 of ``/proc/PID/stat`` (clock ticks since boot); None when there is no such
    process, or only its zombie (dead, not yet reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: split after its last ')'
    fields = stat.rpartition(")")[2].split()
    if len(fields) <= 19 or fields[0] in ("Z", "X"):
        return None
    return fields[19]


def _hostname() -> str:
    return (socket.gethostname() or "-").replace(" ", "_")[:100]


def this_owner() -> str | None:
    """The owner string of this process; None where no boot identity can be read."""
    boot = boot_id()
    start = _start_time(os.getpid())
    if boot is None or start is None:
        return None
    return f"{boot} {os.getpid()} {start} {_hostname()}"


def local_prefix() -> str | None:
    """What every owner string of this machine's current boot starts with."""
    boot = boot_id()
    return f"{boot} " if boot is not None else None


def owner_gone(owner: str | None) -> bool:
    """True only when ``owner`` ran on this machine in this boot and its process is gone
    (no such pid, or a pid started at another time: reused)."""
    if not owner:
        return False
    parts = owner.split(" ")
    if len(parts) != 4 or parts[0] != boot_id() or parts[3] != _hostname():
        return False
    try:
        pid = int(parts[1])
    except ValueError:
        return False
    if pid <= 0:
        return False
    return _start_time(pid) != parts[2]
