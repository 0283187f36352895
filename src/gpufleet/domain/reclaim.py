"""Reclaim: is a released host clean enough to go back to the pool? Pure decisions.

A host whose lease ended (or that an operator sends back) sits in ``reclaiming`` until these
checks and the normal validation checks pass. What a reclaim looks at is read from the host in
the same round trip as its facts (the reclaim sections of
:data:`gpufleet.collect.sections.RECLAIM_REGISTRY`, parsed by :mod:`gpufleet.collect.reclaim`).

Every check fails closed: an input that was not collected (``None``) is an issue, never a pass.

* ``gpu_processes``: no compute process left on any GPU (the processes of the GPU report;
  graphics-only processes such as a display server are not the lessee's work).
* ``gpu_memory``: every GPU's used memory back below the idle threshold.
* ``row_remap_pending``: a GPU with remapped rows pending needs a GPU reset first (fault).
* ``data_mounts``: no mount left strictly *under* a configured data path (``/data/team``);
  the data path itself may be a mount of the host.
* ``lessee_processes``: no process of the lessee's users (the lease's users when recorded,
  else any non-system user: UID >= 1000 except the login user and ``nobody``).
* ``lessee_crontabs``: no crontab of those users (without recorded users: any but ``root``
  and the login user).
* ``scratch``: the scratch paths are empty (after cleaning, under the ``clean`` policy).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict

from gpufleet.domain.facts import HostFacts

#: Lowest UID of a regular (non-system) user on Linux distributions (login.defs UID_MIN).
UID_MIN = 1000
#: The unprivileged overflow user; never a lessee.
NOBODY_UID = 65534


class _Fact(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Mount(_Fact):
    """One line of ``/proc/mounts``."""

    device: str
    mountpoint: str
    fstype: str


class Process(_Fact):
    """One line of ``ps -eo user=,uid=,pid=,comm=``."""

    user: str
    uid: int
    pid: int
    comm: str


class CleanupAction(_Fact):
    """One action of a pool's reclaim cleanup (``reclaim policy POOL --clean``), as the host
    reported it: what (``processes`` of a user, ``mounts`` at a mount point, ``crontabs`` of a
    user), on what, and the command's exit status (0: done)."""

    action: str
    target: str
    rc: int

    @property
    def ok(self) -> bool:
        return self.rc == 0

    def describe(self) -> str:
        verb = {"processes": "killed the processes of", "mounts": "unmounted",
                "crontabs": "removed the crontab of"}.get(self.action, self.action)
        return f"{verb} {self.target}" + ("" if self.ok else f" FAILED (rc {self.rc})")


#: What a pool's reclaim may clean before the checks (``reclaim policy POOL --clean``).
CLEAN_ACTIONS = ("processes", "mounts", "crontabs", "scratch")


def parse_clean(text: str) -> tuple[str, ...]:
    """``processes,mounts`` as the actions (in :data:`CLEAN_ACTIONS` order); ``none`` or
    empty: none. An unknown action is a :class:`ValueError` naming the valid ones."""
    words = [w.strip().lower() for w in text.split(",") if w.strip()]
    if words == ["none"]:
        return ()
    bad = [w for w in words if w not in CLEAN_ACTIONS]
    if bad:
        raise ValueError(
            f"unknown cleanup action {', '.join(map(repr, bad))}: use {', '.join(CLEAN_ACTIONS)} "
            "(comma-separated) or none"
        )
    return tuple(a for a in CLEAN_ACTIONS if a in words)


class ReclaimFindings(_Fact):
    """What the reclaim sections showed; ``None``: that section could not be read."""

    #: The pool's cleanup, run before every check (empty: none configured or nothing to do).
    cleanup: list[CleanupAction] = []
    mounts: list[Mount] | None = None
    processes: list[Process] | None = None
    crontab_users: list[str] | None = None
    scratch_left: list[str] | None = None
    problems: list[str] = []


@dataclass(frozen=True)
class ReclaimPolicy:
    """How a reclaim judges (from the settings and the lease)."""

    data_paths: tuple[str, ...] = ("/data", "/scratch", "/mnt")
    idle_memory_mib: int = 1024
    #: The account gpufleet logs in as (its own processes are not leftovers).
    login_user: str | None = None
    #: The lessee's users recorded with the lease; None: not recorded.
    lessee_users: tuple[str, ...] | None = None
    scratch_clean: bool = False
    #: The pool's cleanup actions (:data:`CLEAN_ACTIONS`), run before the checks.
    clean: tuple[str, ...] = ()


@dataclass(frozen=True)
class ReclaimIssue:
    """One reason the host is not clean. ``needs_reset``: a GPU reset is due first."""

    check: str
    message: str
    needs_reset: bool = False


@dataclass(frozen=True)
class ReclaimVerdict:
    """The issues found (empty: clean)."""

    issues: list[ReclaimIssue] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.issues

    @property
    def needs_reset(self) -> bool:
        return any(i.needs_reset for i in self.issues)

    def summary(self) -> str:
        return "; ".join(f"{i.check}: {i.message}" for i in self.issues) or "clean"


def _under(path: str, roots: Sequence[str]) -> str | None:
    for root in roots:
        base = root.rstrip("/") or "/"
        if path != base and path.startswith(base.rstrip("/") + "/"):
            return root
    return None


def _is_compute(kind: str | None) -> bool:
    # nvidia-smi process types: "C" (compute), "G" (graphics), "C+G", "M" (MPS) ...
    return kind is None or kind.upper() != "G"


def _gpu_issues(facts: HostFacts | None, policy: ReclaimPolicy) -> list[ReclaimIssue]:
    report = facts.nvidia_smi if facts is not None else None
    if report is None:
        why = (facts.nvidia_smi_error if facts is not None else None) or "no GPU report"
        return [
            ReclaimIssue("gpu_processes", f"cannot see the GPUs' processes: {why}"),
            ReclaimIssue("gpu_memory", f"cannot see the GPUs' memory: {why}"),
        ]
    issues: list[ReclaimIssue] = []
    for gpu in report.gpus:
        left = [p for p in gpu.processes if _is_compute(p.type)]
        if left:
            procs = ", ".join(f"pid {p.pid} {p.name or '?'}" for p in left)
            issues.append(ReclaimIssue("gpu_processes", f"GPU {gpu.index}: still running {procs}"))
        if gpu.memory_used_mib is None:
            issues.append(ReclaimIssue("gpu_memory", f"GPU {gpu.index}: used memory not reported"))
        elif gpu.memory_used_mib > policy.idle_memory_mib:
            issues.append(
                ReclaimIssue(
                    "gpu_memory",
                    f"GPU {gpu.index}: {gpu.memory_used_mib} MiB in use "
                    f"(idle is at most {policy.idle_memory_mib} MiB)",
                )
            )
        if gpu.remapped_rows is not None and gpu.remapped_rows.pending:
            issues.append(
                ReclaimIssue(
                    "row_remap_pending",
                    f"GPU {gpu.index}: remapped rows pending; needs a GPU reset first",
                    needs_reset=True,
                )
            )
    return issues


def lessee_user(p: Process, policy: ReclaimPolicy) -> bool:
    """Whether ``p`` belongs to the lessee (see the module docstring)."""
    if policy.lessee_users is not None:
        return p.user in policy.lessee_users
    return p.uid >= UID_MIN and p.uid != NOBODY_UID and p.user != policy.login_user


def judge_reclaim(
    facts: HostFacts | None, findings: ReclaimFindings, policy: ReclaimPolicy
) -> ReclaimVerdict:
    """Every reclaim check on the fresh facts and findings of one host (fail closed). The
    facts and findings are read *after* the pool's cleanup ran, so whatever the cleanup could
    not remove (GPU memory still in use, a mount that would not unmount) still fails."""
    issues = _gpu_issues(facts, policy)
    issues += [
        ReclaimIssue("cleanup", a.describe()) for a in findings.cleanup if not a.ok
    ]
    if findings.mounts is None:
        issues.append(ReclaimIssue("data_mounts", "cannot read the mount table"))
    else:
        for m in findings.mounts:
            root = _under(m.mountpoint, policy.data_paths)
            if root is not None:
                issues.append(
                    ReclaimIssue(
                        "data_mounts", f"{m.mountpoint} ({m.fstype} {m.device}) left under {root}"
                    )
                )
    if findings.processes is None:
        issues.append(ReclaimIssue("lessee_processes", "cannot list the processes"))
    else:
        left = [p for p in findings.processes if lessee_user(p, policy)]
        if left:
            shown = ", ".join(f"{p.user} pid {p.pid} {p.comm}" for p in left[:10])
            more = f" and {len(left) - 10} more" if len(left) > 10 else ""
            issues.append(ReclaimIssue("lessee_processes", f"still running: {shown}{more}"))
    if findings.crontab_users is None:
        issues.append(ReclaimIssue("lessee_crontabs", "cannot list the crontabs"))
    else:
        if policy.lessee_users is not None:
            users = [u for u in findings.crontab_users if u in policy.lessee_users]
        else:
            users = [u for u in findings.crontab_users if u not in ("root", policy.login_user)]
        if users:
            issues.append(ReclaimIssue("lessee_crontabs", f"crontabs left: {', '.join(users)}"))
    if findings.scratch_left is None:
        issues.append(ReclaimIssue("scratch", "cannot list the scratch space"))
    elif findings.scratch_left:
        what = "not cleaned" if policy.scratch_clean else "not empty"
        shown = ", ".join(findings.scratch_left[:10])
        issues.append(ReclaimIssue("scratch", f"{what}: {shown}"))
    return ReclaimVerdict(issues)
