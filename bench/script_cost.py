"""The remote collection script's own cost on one host (issue 30, item 2): CPU and wall.

Materialises one lab host's sections as the real-sshd lab's fake tools (``tests/sshlab.py``),
leaving out the tools the host lacks (a section the lab renders as "not found", rc 127, is
served by absence, as on a real host), then runs two scripts through ``sh -s`` in turn,
``--repeat`` times each: the script of this tree and the one of ``--before SRC`` (another
tree's ``src``, e.g. ``git archive main src | tar -x -C /tmp/before``). Prints the min and
median CPU (``RUSAGE_CHILDREN``) and wall ms of each. ``--slow`` makes the fake
``nvidia-smi`` take 0.3 s a call and ``lspci``/``ibstat``/``dmesg`` 0.15 s, as on a real
8-GPU host, so that what runs at once shows in the wall time.

    .venv/bin/python bench/script_cost.py --before /tmp/before/src [--repeat 15] [--slow]
        [--model a100-8x]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.sshlab import materialize_host

from gpufleet.collect.script import remote_script
from gpufleet.lab.fleet import LabHost
from gpufleet.lab.renderers import render_sections

_SLOW = (("nvidia-smi", "0.3"), ("lspci", "0.15"), ("ibstat", "0.15"), ("dmesg", "0.15"))


def _other_script(src: Path) -> str:
    code = "import sys; from gpufleet.collect.script import remote_script as r; print(r())"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": str(src)},
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout


def _host_env(model: str, slow: bool) -> dict[str, str]:
    secs = render_sections(LabHost(name="h", model=model, serial_salt=1))
    present = {k: v for k, v in secs.items() if not (v.rc == 127 and "not found" in v.stderr)}
    print(f"{model}: {len(secs) - len(present)} of {len(secs)} sections' tools absent")
    env = {**materialize_host(Path(tempfile.mkdtemp()) / "h", present), "LC_ALL": "C"}
    if slow:
        bin_dir = Path(env["PATH"].split(":")[0])
        for tool, seconds in _SLOW:
            fake = bin_dir / tool
            if fake.exists():
                first, rest = fake.read_text().split("\n", 1)
                fake.write_text(f"{first}\n/bin/sleep {seconds}\n{rest}")
    return env


def _run(script: str, env: dict[str, str]) -> tuple[float, float]:
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(["sh", "-s"], input=script, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if not out.stdout.rstrip().endswith("@@gpufleet:done@@"):
        raise SystemExit(f"the script did not finish: {out.stderr[-500:]}")
    cpu = r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime
    return cpu * 1000, wall * 1000


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--before", type=Path, required=True, help="the other tree's src")
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--slow", action="store_true")
    ap.add_argument("--model", default="a100-8x")
    a = ap.parse_args(argv)
    env = _host_env(a.model, a.slow)
    scripts = {"before": _other_script(a.before), "after": remote_script()}
    got: dict[str, list[tuple[float, float]]] = {k: [] for k in scripts}
    for _ in range(a.repeat):  # alternating, so that both see the same load
        for label, script in scripts.items():
            got[label].append(_run(script, env))
    for label, runs in got.items():
        cpu = [c for c, _ in runs]
        wall = [w for _, w in runs]
        print(
            f"{label:6} CPU ms min/median {min(cpu):.1f}/{statistics.median(cpu):.1f}, "
            f"wall ms min/median {min(wall):.1f}/{statistics.median(wall):.1f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
