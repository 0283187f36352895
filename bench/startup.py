"""Start-up bench: how long trivial gpufleet commands take to start (issue 8, goal < 150 ms).

Runs each command ``--runs`` times as a fresh process (hyperfine-like: one warm-up, then
median and min wall time and CPU time from ``wait4``; the commands take turns run by run, so
a change in the machine's load falls on all of them alike), against references measured in the
same run: a bare ``python -c pass`` of the same interpreter, and the floors under it (``import
pydantic``'s ``BaseModel``: the settings and the spec are pydantic models; ``import typer``:
what every command but the lean starts parses with). The pages people type most
(:data:`TARGETS`: ``hosts show``, ``labels`` and ``hosts list SELECTOR``, ``leases show``, as a
table and ``--json``; issue 30 item 3) are marked ``[target]``, each with whether it started in
under 150 ms. Then prints, for each target, the modules whose import takes longest (``python
-X importtime``, cumulative) and how many modules it loads.

    .venv/bin/python bench/startup.py [--runs 10] [--top 15] [--hosts 32] [--src OLD_TREE/src]

The commands run with bytecode caches, as an installed gpufleet has them: the bench drops
``PYTHONDONTWRITEBYTECODE`` from their environment, so the warm-up run writes ``__pycache__``
(ignored by git) and the timed runs read it. ``--no-pyc`` keeps the variable as the caller
has it (with it set, every run compiles gpufleet's sources: ~60-100 ms more per command).

``--src`` also times another source tree's CLI, in turn with this tree's (e.g. ``git worktree
add`` of an older commit: "before" figures in the same run conditions): its
``gpufleet.cli.entry:main``, or ``gpufleet.cli.main:app`` where it has no entry module, run by
``python -c`` against the same database.

``summary`` and ``labels state:available --json`` (read commands that go through the ORM)
are timed beside them, with ``import sqlalchemy.orm`` as their floor.

The commands run on a scratch home made by ``gpufleet lab demo -n HOSTS`` (collected, validated,
a rack and its incident; ``--hosts``, 32 by default) with one lease (``leases show 1``), so they
read a real database of the demo's size.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = str(ROOT / ".venv" / "bin" / "python")
GPUFLEET = str(ROOT / ".venv" / "bin" / "gpufleet")

#: How ``--src`` runs the other tree's CLI (``python -c LAUNCH ARGS``).
LAUNCH = (
    "import sys\n"
    "try:\n    from gpufleet.cli.entry import main\n"
    "except ImportError:\n    from gpufleet.cli.main import app as main\n"
    "sys.argv[0] = 'gpufleet'\nsys.exit(main())"
)


Case = tuple[Sequence[str], dict[str, str]]

#: The pages people type most (issue 30 item 3): each to start in under :data:`GOAL_MS`.
TARGETS: list[list[str]] = [
    ["hosts", "show", "gpu-03"],
    ["hosts", "show", "gpu-03", "--json"],
    ["labels", "gpu-03"],
    ["labels", "gpu-03", "--json"],
    ["hosts", "list", "pool:train-a100"],
    ["hosts", "list", "pool:train-a100", "--json"],
    ["leases", "show", "1"],
    ["leases", "show", "1", "--json"],
]
GOAL_MS = 150


def timed(cases: dict[str, Case], runs: int) -> dict[str, tuple[float, float, float, float]]:
    """Per case (argv, env): (median wall ms, min wall ms, median CPU ms, min CPU ms) over
    ``runs`` after one warm-up. The cases take turns, run by run, so that a change in the
    machine's load falls on all of them alike."""
    walls: dict[str, list[float]] = {k: [] for k in cases}
    cpus: dict[str, list[float]] = {k: [] for k in cases}
    for i in range(runs + 1):
        for key, (argv, env) in cases.items():
            t = time.perf_counter()
            p = subprocess.Popen(
                argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            _, status, ru = os.wait4(p.pid, 0)
            if os.waitstatus_to_exitcode(status) != 0:
                raise SystemExit(f"{' '.join(argv)} failed")
            if i:  # the first run warms the page cache (and writes the bytecode caches)
                walls[key].append((time.perf_counter() - t) * 1000)
                cpus[key].append((ru.ru_utime + ru.ru_stime) * 1000)
    return {
        k: (
            statistics.median(walls[k]),
            min(walls[k]),
            statistics.median(cpus[k]),
            min(cpus[k]),
        )
        for k in cases
    }


def import_profile(
    env: dict[str, str], top: int, argv: Sequence[str]
) -> tuple[int, list[tuple[int, str]]]:
    """(modules loaded, the ``top`` slowest cumulative imports in µs) of ``gpufleet ARGV``
    through the entry point."""
    code = LAUNCH.replace("sys.argv[0] = 'gpufleet'", f"sys.argv = ['gpufleet', *{list(argv)!r}]")
    out = subprocess.run(
        [PY, "-X", "importtime", "-c", code],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stderr
    rows: list[tuple[int, str]] = []
    for line in out.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = line.split("|")
        rows.append((int(cumulative), name.strip()))
    return len(rows), sorted(rows, reverse=True)[:top]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--hosts", type=int, default=32, help="hosts of the demo fleet")
    ap.add_argument("--src", type=Path, help="time this source tree's CLI instead")
    ap.add_argument(
        "--no-pyc", action="store_true", help="keep PYTHONDONTWRITEBYTECODE as it is set"
    )
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gpufleet-startup-") as home:
        env = dict(os.environ, GPUFLEET_HOME=home, GPUFLEET_ACTOR="bench")
        if not a.no_pyc:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
        env.pop("GPUFLEET_DATABASE_URL", None)
        subprocess.run(  # the demo fleet (collected, validated, a rack), then one lease
            [GPUFLEET, "lab", "demo", "-n", str(a.hosts)],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        subprocess.run(
            [GPUFLEET, "allocate", "--hosts", "1", "--for", "72h", "--owner", "bench",
             "--purpose", "bench", "--selector", "state:available"],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        trees: dict[str, Case] = {"": ([GPUFLEET], env)}
        if a.src is not None:  # the other tree first: "before", then "after"
            other = dict(env, PYTHONPATH=str(a.src.resolve()))
            trees = {" (--src)": ([PY, "-c", LAUNCH], other), " (this tree)": ([GPUFLEET], env)}
            print(f"--src: {a.src.resolve()}")
        cases: dict[str, Case] = {
            "python -c pass (reference)": ([PY, "-c", "pass"], env),
            "python + pydantic BaseModel (floor)": (
                [PY, "-c", "from pydantic import BaseModel"],
                env,
            ),
            "python + typer (floor)": ([PY, "-c", "import typer"], env),
            "python + sqlalchemy.orm (floor of the store's reads)": (
                [PY, "-c", "import sqlalchemy.orm"],
                env,
            ),
        }
        for label, args in (
            ("gpufleet --help", ["--help"]),
            *((f"gpufleet {' '.join(c)} [target]", c) for c in TARGETS),
            ("gpufleet summary", ["summary"]),  # the read commands (through the ORM)
            ("gpufleet labels state:available --json", ["labels", "state:available", "--json"]),
        ):
            for tree, (program, tree_env) in trees.items():
                cases[label + tree] = ([*program, *args], tree_env)
        pyc = "no (PYTHONDONTWRITEBYTECODE)" if env.get("PYTHONDONTWRITEBYTECODE") else "yes"
        load = os.getloadavg()[0]
        print(f"nproc={os.cpu_count()} runs={a.runs} load={load:.2f} pyc={pyc}")
        got = timed(cases, a.runs)
        ref = got["python -c pass (reference)"][0]
        print(
            "| command | wall ms median | wall ms min | CPU ms median | CPU ms min | x pass "
            "| < 150 ms |"
        )
        print("|---|---|---|---|---|---|---|")
        for label, (wall, low, cpu, cpu_low) in got.items():
            goal = ("yes" if wall < GOAL_MS else "NO") if "[target]" in label else ""
            print(
                f"| {label} | {wall:.0f} | {low:.0f} | {cpu:.0f} | {cpu_low:.0f} "
                f"| {wall / ref:.1f} | {goal} |"
            )
        print(f"load average after the timings: {os.getloadavg()[0]:.2f}")
        for argv in TARGETS:
            n, slow = import_profile(env, a.top, argv)
            print(f"\ngpufleet {' '.join(argv)} loads {n} modules; slowest (cumulative ms):")
            for us, name in slow:
                print(f"  {us / 1000:8.1f}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
