"""The README's tour runs as written (issue 29 item 1): every block the README marks
``<!-- tour -->`` is run top to bottom, one command line after the other, in ``bash`` on a
fresh home (``HOME`` a new directory, no ``GPUFLEET_*`` setting: the default home
``~/.local/share/gpufleet``, SQLite, and the tour's own lab), with the ``gpufleet`` of this
checkout on ``PATH``. Each line must end with the exit status the README documents: 0 unless
its comment starts ``exit N``. A line runs under ``set -e`` (``a; b``: the first command
that fails ends it, with its status). Variables (``export X=...``, ``DAY=...``) carry over to
the next lines.

The README's own rules for the marked blocks (:func:`tour_lines` checks them): comment-only
lines continue the comment above; a line ending in ``\\`` continues on the next.
"""

from __future__ import annotations

import itertools
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
MARK = "<!-- tour -->"
_EXIT = re.compile(r"^exit (\d+)\b")
_SHELL_VAR = re.compile(r"^\s*(export\s+)?[A-Za-z_][A-Za-z0-9_]*=")


@dataclass(frozen=True)
class TourLine:
    lineno: int  # in README.md
    command: str  # as it is pasted (continuations joined)
    expected: int


def _comment_start(line: str) -> int | None:
    """Index of the ``#`` that starts the line's comment (outside quotes), or None."""
    quote: str | None = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return i
    return None


def tour_lines(text: str) -> list[TourLine]:
    """The command lines of the marked blocks, in order, with their documented exits."""
    lines = text.splitlines()
    out: list[TourLine] = []
    i = 0
    while i < len(lines):
        if lines[i].strip() != MARK:
            i += 1
            continue
        i += 1
        assert lines[i].startswith("```bash"), f"README.md:{i + 1}: {MARK} not before ```bash"
        i += 1
        pending: list[str] = []
        start = 0
        while not lines[i].startswith("```"):
            raw = lines[i]
            i += 1
            if not pending and (not raw.strip() or raw.lstrip().startswith("#")):
                continue
            if not pending:
                start = i
            cut = _comment_start(raw)
            code = raw if cut is None else raw[:cut]
            comment = "" if cut is None else raw[cut + 1:].strip()
            if code.rstrip().endswith("\\"):
                pending.append(code.rstrip()[:-1])
                continue
            pending.append(code)
            m = _EXIT.match(comment)
            out.append(TourLine(start, " ".join(p.strip() for p in pending),
                                int(m.group(1)) if m else 0))
            pending = []
    return out


def test_the_readme_marks_a_tour() -> None:
    lines = tour_lines(README.read_text())
    assert len(lines) >= 20
    assert lines[0].command.startswith("gpufleet lab create")
    assert any(t.expected != 0 for t in lines)  # documented failures are annotated


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    venv_bin = str(Path(sys.executable).parent)
    env |= {"HOME": str(home), "PATH": f"{venv_bin}:{env.get('PATH', '/usr/bin:/bin')}",
            "COLUMNS": "100", "TZ": "UTC"}
    env.pop("VIRTUAL_ENV", None)
    return env


def _per_line(output: str) -> dict[int, str]:
    """The tour's output split by the ``@@line N`` marks: line number -> what it printed."""
    out: dict[int, str] = {}
    n = -1
    for line in output.splitlines(keepends=True):
        if line.startswith("@@line "):
            n = int(line.split()[1])
            continue
        out[n] = out.get(n, "") + line
    return out


@pytest.mark.long
def test_the_readme_tour_runs_as_written(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    lines = tour_lines(README.read_text())
    status = tmp_path / "status"
    # One bash runs the tour (exports carry over), each line in a subshell under set -e; the
    # statuses go to their own file (fd 3), so the tour's output cannot fake one.
    script = [f"exec 3>{shlex.quote(str(status))}", 'echo "- 0 $(date +%s.%N)" >&3']
    for n, t in enumerate(lines):
        script.append(f"echo '@@line {n}'")
        if _SHELL_VAR.match(t.command):  # `export X=...`, `DAY=...`: for the next lines
            script.append(t.command)
        else:
            script.append(f"( set -e\n{t.command}\n)")
        script.append(f'echo "{n} $? $(date +%s.%N)" >&3')
    lab = home / ".local" / "share" / "gpufleet" / "lab"
    started = time.monotonic()
    try:
        r = subprocess.run(["bash", "-c", "\n".join(script)], env=_env(home), cwd=ROOT,
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=600)
    finally:
        if lab.exists():  # the tour ends with `lab destroy`; a failed tour may not get there
            from gpufleet.lab.bmc import stop_bmc

            stop_bmc(lab)
    took = time.monotonic() - started
    marks = [line.split() for line in status.read_text().splitlines()]
    got = {n: rc for n, rc, _ in marks}
    spent = sorted(((float(b[2]) - float(a[2]), b[0]) for a, b in itertools.pairwise(marks)),
                   reverse=True)
    print("slowest tour lines:", ", ".join(f"{lines[int(n)].command[:40]} {s:.1f}s"
                                           for s, n in spent[:8]))
    logs = _per_line(r.stdout)
    if os.environ.get("TOUR_SHOW"):
        for n, t in enumerate(lines):
            if os.environ["TOUR_SHOW"] in t.command:
                print(f"$ {t.command}\n{logs.get(n, '')}")
    wrong = [
        f"README.md:{t.lineno}: `{t.command}` exited {got.get(str(n), 'never (not run)')}, "
        f"documented {t.expected}\n{logs.get(n, '')[-1500:]}"
        for n, t in enumerate(lines)
        if got.get(str(n)) != str(t.expected)
    ]
    assert not wrong, "\n".join(wrong)
    assert not lab.exists()  # `lab destroy` removed it
    print(f"the tour took {took:.0f} s")
