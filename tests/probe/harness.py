"""The probe harness: run the real ``gpufleet`` CLI in a fresh process against a shared store and
check the invariants every probe must keep (issue 6, acceptance).

A :class:`World` is one populated store (SQLite under a home, or a private PostgreSQL database)
with a simulated lab of eight A100 hosts, all ``available`` with facts, plus hosts served by real
sshd lab hosts. A :class:`Probe` is one row of the bad-input catalogue: how to set it up, the
command line, the documented exit code and the message it must print. After every probe
:func:`check_invariants` asserts: no traceback, no terminal escape reached the output, an error
is one line, nothing that existed before is lost or unreadable, no host is left claimed, and no
secret appears in any output or in the stored data.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import text

from gpufleet.domain.facts import HostFacts
from gpufleet.store.db import Database

#: Secrets written into probe inventories: they must never appear in output or stored data.
SECRETS = ("Pr0be-ssh-Pa55-9931", "pr0be-become-77aa", "tok-pr0be-5150")


@dataclass
class World:
    """One populated store the probes run against."""

    backend: str  # "sqlite" | "postgres"
    root: Path
    home: Path
    url: str
    lab_dir: Path  # the simulated lab (sim transport)

    @property
    def global_args(self) -> list[str]:
        return ["--home", str(self.home), "--db", self.url]

    def sqlite_file(self) -> Path | None:
        return Path(self.url.removeprefix("sqlite:///")) if self.backend == "sqlite" else None


@dataclass
class Ctx:
    """What a probe's setup may read and change before its command runs."""

    world: World
    tmp: Path
    env: dict[str, str]
    global_args: list[str]
    sshlab: Any = None  # tests.probe.test_probe_catalogue.SshHosts, when the probe needs it
    #: host name -> claim token placed on purpose by the setup (another worker's claim)
    foreign_claims: dict[str, str] = field(default_factory=dict)
    #: hosts the command is expected to remove
    removed: set[str] = field(default_factory=set)
    #: free-form values a setup hands to its check
    notes: dict[str, Any] = field(default_factory=dict)


@dataclass
class Result:
    argv: list[str]
    code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


Check = Callable[[Ctx, Result], None]
Setup = Callable[[Ctx], None]


@dataclass(frozen=True)
class Probe:
    """One row of the bad-input catalogue."""

    name: str
    item: str  # issue 6 item: A.1 ... C.16
    category: str  # malformed inventory, hostile tool output, concurrent writers, ...
    argv: tuple[str, ...]  # after the global options; "{tmp}" is the probe's directory
    code: int  # the documented exit code (README, "Exit codes")
    says: str  # regex: the one error line (exit >= 2) or the output (exit 0 / 1) matches it
    setup: Setup | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    backends: tuple[str, ...] = ("sqlite",)
    check: Check | None = None
    #: another command started just before this one and run concurrently (concurrent writers)
    alongside: tuple[str, ...] | None = None
    #: send SIGTERM once this many hosts are claimed (interrupted runs)
    sigterm_after_claims: int | None = None
    json_error: bool = False  # --json: the error shape on stdout, stderr empty
    #: a command-line usage error, reported by Click's usage panel (not the one-line error)


def base_env(home: Path) -> dict[str, str]:
    """The environment of a probe: no GPUFLEET_* from outside, a private HOME, wide tables."""
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("GPUFLEET_")}
    env.update(HOME=str(home), COLUMNS="200", GPUFLEET_ACTOR="probe")
    env.pop("FORCE_COLOR", None)
    return env


#: The installed console script, as an operator runs it (its name shows in usage errors).
GPUFLEET = Path(sys.executable).with_name("gpufleet")


def gpufleet_cmd(global_args: Sequence[str], argv: Sequence[str]) -> list[str]:
    return [str(GPUFLEET), *global_args, *argv]


def run_probe(probe: Probe, ctx: Ctx) -> Result:
    """Run the probe's command (and its companion) as real processes."""
    argv = [a.replace("{tmp}", str(ctx.tmp)) for a in probe.argv]
    cmd = gpufleet_cmd(ctx.global_args, argv)
    env = {**ctx.env, **probe.env}
    if probe.sigterm_after_claims is not None:
        return _run_and_terminate(cmd, argv, env, ctx, probe.sigterm_after_claims)
    if probe.alongside is None:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180, cwd=ctx.tmp)
        return Result(argv, p.returncode, p.stdout, p.stderr)
    other = subprocess.Popen(
        gpufleet_cmd(ctx.global_args, probe.alongside), env=env, cwd=ctx.tmp,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        time.sleep(0.3)  # the companion is past its start-up, into its run
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180, cwd=ctx.tmp)
        out, err = other.communicate(timeout=180)
    finally:
        if other.poll() is None:
            other.kill()
            other.wait()
    ctx.notes["alongside"] = Result(list(probe.alongside), other.returncode, out, err)
    return Result(argv, p.returncode, p.stdout, p.stderr)


def _run_and_terminate(
    cmd: list[str], argv: list[str], env: dict[str, str], ctx: Ctx, n: int
) -> Result:
    proc = subprocess.Popen(cmd, env=env, cwd=ctx.tmp, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while len(claimed(ctx.world)) < n:
            if proc.poll() is not None:
                out, err = proc.communicate()
                raise AssertionError(f"ended before claiming {n} hosts: {out}\n{err}")
            assert time.monotonic() < deadline, "the command never claimed the hosts"
            time.sleep(0.1)
        time.sleep(0.5)  # connected; the hosts' script hangs
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    ctx.notes["claimed_while_running"] = n
    return Result(argv, proc.returncode, out, err)


# ------------------------------------------------------------------------ store inspection


def _db(world: World) -> Database:
    """A short-lived handle (the probe's command must see no connection of ours)."""
    return Database(world.url)


def claimed(world: World) -> dict[str, str]:
    """Host name -> claim token of every claimed host."""
    db = _db(world)
    try:
        with db.engine.connect() as c:
            rows = c.execute(text(
                "SELECT name, claim_token FROM hosts WHERE claim_token IS NOT NULL")).all()
    finally:
        db.dispose()
    return {str(r[0]): str(r[1]) for r in rows}


@dataclass(frozen=True)
class StoreImage:
    hosts: dict[str, int | None]  # name -> latest snapshot id
    snapshots: frozenset[int]
    events: int


def store_image(world: World) -> StoreImage:
    db = _db(world)
    try:
        with db.engine.connect() as c:
            hosts = {str(r[0]): r[1] for r in c.execute(
                text("SELECT name, latest_snapshot_id FROM hosts")).all()}
            snaps = frozenset(int(r[0]) for r in c.execute(
                text("SELECT id FROM fact_snapshots")).all())
            events = int(c.execute(text("SELECT count(*) FROM events")).scalar_one())
    finally:
        db.dispose()
    return StoreImage(hosts, snaps, events)


def stored_text(world: World) -> str:
    """Everything a secret could hide in: the SQLite file (and its WAL), or on PostgreSQL the
    text of every host's variables and every event."""
    path = world.sqlite_file()
    if path is not None:
        parts = [p.read_bytes() for p in (path, Path(f"{path}-wal")) if p.exists()]
        return b"".join(parts).decode("latin-1")
    db = _db(world)
    try:
        with db.engine.connect() as c:
            rows = c.execute(text(
                "SELECT vars::text, expected::text FROM hosts UNION ALL "
                "SELECT coalesce(message, ''), coalesce(data::text, '') FROM events")).all()
    finally:
        db.dispose()
    return json.dumps([list(map(str, r)) for r in rows])


def check_store(world: World, before: StoreImage, removed: set[str]) -> None:
    """Nothing that existed before is lost, and every host's latest facts are readable."""
    after = store_image(world)
    lost = set(before.hosts) - set(after.hosts) - removed
    assert not lost, f"hosts lost: {sorted(lost)}"
    kept = {before.hosts[h] for h in removed if h in before.hosts}
    gone = before.snapshots - after.snapshots - kept
    assert not gone, f"fact snapshots lost: {sorted(gone)}"
    assert after.events >= before.events, "events were deleted"
    # Latest facts readable (as `hosts show` reads them): every host whose latest snapshot is
    # new since the probe began (the others were read when they became latest).
    fresh = {h for h, sid in after.hosts.items() if sid is not None and before.hosts.get(h) != sid}
    if not fresh:
        return
    db = _db(world)
    try:
        with db.engine.connect() as c:
            for name, facts in c.execute(text(
                "SELECT h.name, s.facts FROM hosts h JOIN fact_snapshots s "
                "ON s.id = h.latest_snapshot_id")).all():
                if name in fresh:
                    HostFacts.model_validate(json.loads(facts) if isinstance(facts, str) else facts)
    finally:
        db.dispose()


_ERROR = re.compile(r"^error: ")
_WARNING = re.compile(r"^(warning: |\[WARNING\]: )")


def check_invariants(probe: Probe, ctx: Ctx, r: Result, before: StoreImage) -> None:
    """The invariants of every probe (see the module docstring)."""
    shown = f"gpufleet {' '.join(r.argv)}: exit {r.code}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    assert "Traceback" not in r.output, shown
    assert "\x1b" not in r.output and "\x07" not in r.output, "a control character reached " + shown
    for secret in SECRETS:
        assert secret not in r.output, f"secret shown: {shown}"
    if probe.json_error:
        assert all(_WARNING.match(x) for x in r.stderr.splitlines()), shown
        err = json.loads(r.stdout)["error"]
        assert set(err) == {"code", "message", "retryable"}, shown
        assert re.search(probe.says, err["message"]), f"{probe.says!r} not in {err['message']!r}"
    elif r.code >= 128:  # killed by a signal: whatever it printed, no error line is owed
        assert re.search(probe.says, " ".join(r.output.split())), f"{probe.says!r}: {shown}"
    elif r.code >= 2:
        lines = [x for x in r.stderr.splitlines() if x.strip()]
        errors = [x for x in lines if _ERROR.match(x)]
        assert len(errors) == 1, f"not one error line: {shown}"
        others = [x for x in lines if not _ERROR.match(x) and not _WARNING.match(x)]
        assert not others, f"stray stderr lines {others}: {shown}"
        assert re.search(probe.says, errors[0]), f"{probe.says!r} not in {errors[0]!r}"
    else:
        assert not any(_ERROR.match(x) for x in r.stderr.splitlines()), shown
        flat = " ".join(r.output.split())
        assert re.search(probe.says, flat), f"{probe.says!r} not in the output: {shown}"
    assert r.code == probe.code, shown
    check_store(ctx.world, before, ctx.removed)
    claims = claimed(ctx.world)
    assert claims == ctx.foreign_claims, f"hosts left claimed: {claims} ({shown})"
    stored = stored_text(ctx.world)
    for secret in SECRETS:
        assert secret not in stored, f"secret {secret[:4]}... stored in clear"
