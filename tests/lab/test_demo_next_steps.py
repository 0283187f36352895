"""``make demo`` ends with next steps that work when pasted (issue 29 item 1): the demo
prints them, a shell runs them as printed; the checkout's ``./gpufleet`` wrapper."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from gpufleet.lab.cli import next_steps

ROOT = Path(__file__).resolve().parents[2]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    return {**env, "TZ": "UTC", **extra}


def test_next_steps_as_make_demo_prints_them() -> None:
    # make demo: `.venv/bin/gpufleet --home .gpufleet-demo lab demo` in the checkout
    steps = next_steps(Path(".gpufleet-demo"), db_url=None, host="gpu-04", cwd=ROOT,
                       venv=ROOT / ".venv")
    assert steps[:4] == [". .venv/bin/activate", "export GPUFLEET_HOME=.gpufleet-demo",
                         "gpufleet hosts list", "gpufleet hosts show gpu-04"]
    assert steps[-1] == "# or, without activating: ./gpufleet hosts list"
    # no virtual environment, no home given: nothing to activate or export
    bare = next_steps(None, db_url=None, host="gpu 1", cwd=ROOT, venv=None)
    assert bare[:2] == ["gpufleet hosts list", "gpufleet hosts show 'gpu 1'"]
    # make demo (32 hosts) has a rack: its page and its incident, before the wrapper line
    racked = next_steps(Path(".gpufleet-demo"), db_url=None, host="gpu-04", cwd=ROOT,
                        venv=ROOT / ".venv", rack="nvl01-t01")
    assert racked[-3:-1] == ["gpufleet racks show nvl01-t01", "gpufleet racks incidents"]


def test_the_demo_next_steps_work_when_pasted(tmp_path: Path) -> None:
    """The demo as `make demo` runs it (a relative --home, SQLite), in a directory of its
    own; then its printed next steps in a fresh shell whose PATH has no gpufleet: the rack's
    page shows its one incident (issue 27 item 8; the demo has its rack from 8 hosts on)."""
    demo = subprocess.run(
        [sys.executable, "-m", "gpufleet.cli.main", "--home", ".gpufleet-demo", "lab", "demo",
         "--hosts", "8"],
        cwd=tmp_path, env=_env(COLUMNS="120"), capture_output=True, text=True, check=True,
    ).stdout
    lines = demo.splitlines()
    start = next(i for i, ln in enumerate(lines) if "next steps" in ln)
    steps = [ln for ln in lines[start + 1:] if ln.strip()]
    assert "export GPUFLEET_HOME=.gpufleet-demo" in steps, steps
    assert not shutil.which("gpufleet", path=os.defpath)  # only the steps put it on PATH
    shell = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", "\n".join(steps)],
        cwd=tmp_path, env=_env(PATH=os.defpath, COLUMNS="120"), capture_output=True,
        text=True,
    )
    assert shell.returncode == 0, (steps, shell.stdout, shell.stderr)
    assert "26 hosts" in shell.stdout and "gpu-08" in shell.stdout  # 8 and the rack's 18
    assert "no hosts yet" not in shell.stdout
    assert "one rack incident (alarm 1): fabric findings on 2 of 18 trays" in " ".join(
        demo.split()), demo
    assert "gpufleet racks show nvl01-t01" in steps
    out = " ".join(shell.stdout.split())
    assert "restricted: 18 trays by rack incident (alarm 1)" in out, out
    assert "rack-scoped fabric findings on 2 of 18 trays (nvl01-t03, nvl01-t07)" in out, out


def test_the_gpufleet_wrapper_runs_the_checkouts_environment(tmp_path: Path) -> None:
    wrapper = tmp_path / "gpufleet"
    shutil.copy(ROOT / "gpufleet", wrapper)
    missing = subprocess.run([str(wrapper), "--help"], capture_output=True, text=True)
    assert missing.returncode == 2 and "run 'make env'" in missing.stderr
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    installed = Path(sys.executable).parent / "gpufleet"
    (tmp_path / ".venv" / "bin" / "gpufleet").symlink_to(installed)
    home = tmp_path / "home"
    ran = subprocess.run([str(wrapper), "--home", str(home), "hosts", "list", "--json"],
                         env=_env(), capture_output=True, text=True)
    assert ran.returncode == 0 and ran.stdout.strip() == "[]", ran.stderr
