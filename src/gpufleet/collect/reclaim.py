"""Parsers of the reclaim sections (pure: text -> :mod:`gpufleet.domain.reclaim` values).

The sections themselves (commands, what they read) are
:data:`gpufleet.collect.sections.RECLAIM_REGISTRY`; :func:`read_reclaim` applies it to the
sections of one reclaim run. A section that failed or does not parse is ``None`` (not
collected) with a problem naming it, never ``[]``: the reclaim checks then fail closed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gpufleet.collect.bundle import Section
from gpufleet.collect.fit import build, int_of
from gpufleet.domain.reclaim import CleanupAction, Mount, Process, ReclaimFindings
from gpufleet.errors import ParseError

if TYPE_CHECKING:
    from gpufleet.collect.sections import SectionSpec

_OCTAL = re.compile(r"\\([0-7]{3})")


def _unescape(field: str) -> str:
    # /proc/mounts escapes space, tab, newline and backslash as \040 \011 \012 \134.
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), field)


def parse_mounts(text: str, source: str) -> list[Mount]:
    """``/proc/mounts`` (or ``/proc/self/mounts``): device, mount point, type per line."""
    out: list[Mount] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) < 3:
            raise ParseError(source, f"not a mount table line: {line[:80]!r}", line=n)
        out.append(
            build(
                Mount,
                source,
                line=n,
                device=_unescape(parts[0]),
                mountpoint=_unescape(parts[1]),
                fstype=parts[2],
            )
        )
    return out


def parse_ps(text: str, source: str) -> list[Process]:
    """``ps -eo user=,uid=,pid=,comm=``: one process per line (the command may have spaces)."""
    out: list[Process] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split(None, 3)
        if len(parts) < 3 or not all(p.isascii() and p.isdigit() for p in parts[1:3]):
            raise ParseError(source, f"not a 'user uid pid comm' line: {line[:80]!r}", line=n)
        out.append(
            build(
                Process,
                source,
                line=n,
                user=parts[0],
                uid=int_of(parts[1], source, "uid", line=n),
                pid=int_of(parts[2], source, "pid", line=n),
                comm=parts[3].strip() if len(parts) > 3 else "",
            )
        )
    return out


_USER = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*\$?$")


def parse_crontab_users(text: str, source: str) -> list[str]:
    """``ls -1A`` of the crontab spool: one user name per line."""
    out: list[str] = []
    for n, line in enumerate(text.splitlines(), 1):
        name = line.strip()
        if not name:
            continue
        if not _USER.match(name):
            raise ParseError(source, f"not a user name: {name[:80]!r}", line=n)
        out.append(name)
    return out


def parse_scratch(text: str, source: str) -> list[str]:
    """What ``find DIR -mindepth 1 -maxdepth 1`` left in the scratch paths (one per line)."""
    return [line.strip() for line in text.splitlines() if line.strip()]


# --------------------------------------------------------------------------- pool cleanup

#: The pool's cleanup (``reclaim policy POOL --clean``), run *before* the collection so the GPU
#: report and every reclaim check see the host after it. The service sets, in front of the
#: script: RECLAIM_DO (the actions: processes mounts crontabs), RECLAIM_USERS (the lease's
#: users; empty: none recorded, so every user with UID >= 1000 but RECLAIM_LOGIN and nobody,
#: and for crontabs every one but root and RECLAIM_LOGIN), RECLAIM_LOGIN, RECLAIM_DATA (the
#: data paths: mounts strictly under one are unmounted, deepest first). Not root: through
#: ``sudo -n`` (a login user without it fails each action, and the reclaim with it). One line
#: per action: ``ACTION RC TARGET``.
CLEANUP = r"""
lessees() {
  if [ -n "$RECLAIM_USERS" ]; then for u in $RECLAIM_USERS; do echo "$u"; done; return 0; fi
  if [ "$1" = ps ]; then
    ps -eo user:32=,uid= | while read -r u id; do
      [ "$id" -ge 1000 ] 2>/dev/null && [ "$id" != 65534 ] && [ "$u" != "$RECLAIM_LOGIN" ] \
        && echo "$u"
    done | sort -u
  else
    ls -1A "$R/var/spool/cron/crontabs" 2>/dev/null | while read -r u; do
      [ "$u" != root ] && [ "$u" != "$RECLAIM_LOGIN" ] && echo "$u"
    done
  fi
}
cleanup() {
  S=""; [ "$(id -u 2>/dev/null)" = 0 ] || S="sudo -n"
  for a in $RECLAIM_DO; do
    case $a in
    processes) for u in $(lessees ps); do
        $S pkill -KILL -u "$u"; rc=$?
        [ "$rc" = 1 ] || echo "processes $rc $u"
      done ;;
    mounts) readf "$R/proc/mounts" | while read -r dev mp rest; do
        for d in $RECLAIM_DATA; do case "$mp" in "${d%/}"/*) echo "$mp" ;; esac; done
      done | sort -ru | while read -r mp; do
        $S umount "$(printf '%b' "$mp")"; echo "mounts $? $mp"
      done ;;
    crontabs) for u in $(lessees cron); do
        [ -e "$R/var/spool/cron/crontabs/$u" ] || continue
        $S rm -f "$R/var/spool/cron/crontabs/$u"; echo "crontabs $? $u"
      done ;;
    esac
  done
  return 0
}"""


def parse_cleanup(text: str, source: str) -> list[CleanupAction]:
    """The lines of :data:`CLEANUP`: ``ACTION RC TARGET`` (the target may hold spaces)."""
    out: list[CleanupAction] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split(None, 2)
        if len(parts) < 3 or not parts[1].isascii() or not parts[1].isdigit():
            raise ParseError(source, f"not an 'action rc target' line: {line[:80]!r}", line=n)
        out.append(
            build(
                CleanupAction,
                source,
                line=n,
                action=parts[0],
                rc=int_of(parts[1], source, "rc", line=n),
                target=_unescape(parts[2]),
            )
        )
    return out


def cleanup_section() -> SectionSpec:
    """The cleanup as a section of the reclaim script (put first: see :data:`CLEANUP`)."""
    from gpufleet.collect.sections import SectionSpec

    return SectionSpec(
        CLEANUP_SECTION,
        "cleanup",
        ("cleanup",),
        lambda r: {"cleanup": parse_cleanup(r.text, r.source)},
        tool="pkill",
        functions=CLEANUP.strip("\n"),
    )


CLEANUP_SECTION = "reclaim-cleanup"

#: A crontab spool that does not exist means cron is not installed: no crontabs.
_NO_SPOOL = "No such file or directory"


def read_reclaim(sections: Mapping[str, Section], host: str) -> ReclaimFindings:
    """The reclaim findings of one host from its sections (see the module docstring)."""
    from gpufleet.collect.sections import RECLAIM_REGISTRY, Read

    values: dict[str, Any] = {}
    problems: list[str] = []
    cleaned = sections.get(CLEANUP_SECTION)
    if cleaned is not None:  # absent: no cleanup in this script
        source = f"{host}:{CLEANUP_SECTION}"
        try:
            if cleaned.rc != 0:
                raise ParseError(source, f"rc={cleaned.rc}: {cleaned.stderr.strip()[:200]}")
            values["cleanup"] = parse_cleanup(cleaned.stdout, source)
        except ParseError as exc:
            problems.append(str(exc))
            values["cleanup"] = [CleanupAction(action="cleanup", target=str(exc), rc=1)]
    for spec in RECLAIM_REGISTRY:
        sec = sections.get(spec.name)
        source = f"{host}:{spec.name}"
        if sec is None:
            problems.append(f"{source}: not collected")
            continue
        if sec.rc != 0:
            if spec.name == "reclaim-crontabs" and _NO_SPOOL in sec.stderr:
                values.update({key: [] for key in spec.fields})
                continue
            detail = (sec.stderr or sec.stdout).strip().splitlines()
            problems.append(f"{source}: rc={sec.rc}: {detail[0][:200] if detail else 'failed'}")
            continue
        assert spec.parse is not None
        try:
            values.update(spec.parse(Read(sec.stdout, source, host, problems, sections, values)))
        except ParseError as exc:
            problems.append(str(exc))
    return ReclaimFindings(**values, problems=problems)
