"""``campaign create``/``run`` with a playbook on an install without ``ansible-playbook``:
refused before anything is stored or touched (exit 2, the ``config`` error naming what to
install), on both databases.

The install without it is real: a virtual environment whose interpreter sees gpufleet's
site-packages (ansible-runner included) but whose ``bin/`` holds no ``ansible-playbook``, run
with a ``PATH`` that holds none either."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.clitools import Cli, cli_for_backend, flat

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(params=["sqlite", "postgres"])
def gf(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cli]:
    c = cli_for_backend(request, tmp_path, "no-ansible-test")
    lab = c.tmp / "lab"
    c.run("lab", "create", "--hosts", "3", "--model", "h100-8x", "--dir", str(lab))
    c.run("enroll", "-i", str(lab / "inventory.ini"))
    c.run("validate")
    c.run("baseline", "create", "b-new", "--driver", "570.86.15")
    (c.tmp / "up.yml").write_text("- hosts: all\n  gather_facts: false\n  tasks: []\n")
    yield c


def _bare_python(tmp: Path) -> Path:
    """A venv interpreter with this venv's packages and no ansible-playbook beside it."""
    venv = tmp / "bare"
    (venv / "bin").mkdir(parents=True)
    base = Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    (venv / "bin" / "python").symlink_to(base)
    (venv / "pyvenv.cfg").write_text(
        f"home = {base.parent}\ninclude-system-site-packages = false\n"
    )
    (venv / "lib").symlink_to(Path(sys.prefix) / "lib")
    assert not (venv / "bin" / "ansible-playbook").exists()
    return venv / "bin" / "python"


def _bare(gf: Cli, python: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    env |= {"PATH": "/usr/bin:/bin", "GPUFLEET_ACTOR": "no-ansible-test",
            "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "200"}
    return subprocess.run([str(python), "-m", "gpufleet.cli.main", *gf.global_args, *argv],
                          capture_output=True, text=True, env=env, timeout=120, cwd=gf.tmp)


def test_a_playbook_campaign_is_refused_without_ansible_playbook(gf: Cli) -> None:
    python = _bare_python(gf.tmp)
    up = str(gf.tmp / "up.yml")
    args = ["campaign", "create", "c1", "--target-baseline", "b-new", "--selector", "gpu-*",
            "--ticket", "BUILD-1", "--waves", "100%"]
    r = _bare(gf, python, *args, "--playbook", up)
    assert r.returncode == 2, (r.stdout, r.stderr)
    msg = flat(r.stderr)
    assert "ansible-playbook: not found next to" in msg and "pip install" in msg, msg
    assert "ansible-core" in msg
    assert gf.json("campaign", "list") == []  # nothing stored
    # a command campaign does not need Ansible
    r = _bare(gf, python, *args[:2], "c0", *args[3:], "--command", "true", "--dry-run")
    assert r.returncode == 0, (r.stdout, r.stderr)

    # created where Ansible is installed, run where it is not: refused, nothing taken
    gf.run(*args, "--playbook", up)
    r = _bare(gf, python, "campaign", "run", "c1", "--json")
    assert r.returncode == 2, (r.stdout, r.stderr)
    err = json.loads(r.stdout)["error"]  # --json: the one error shape, on stdout
    assert err["code"] == "config" and err["message"].startswith("ansible-playbook: not found")
    assert gf.json("campaign", "status", "c1")["status"] == "planned"
    assert {h["state"] for h in gf.json("hosts", "list")} == {"available"}
    assert not [e for e in gf.json("events", "--kind", "campaign")
                if "started" in e["message"]]
