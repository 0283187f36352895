"""Issue 8, start-up: the ``gpufleet`` entry point (``gpufleet.cli.entry:main``) answers
``labels NAME [--json]`` without Typer, Click, SQLAlchemy, pydantic-settings or croniter (and
without Rich under ``--json``), and the plain shapes of the read commands (``hosts show NAME``,
``labels [SELECTOR]``, ``hosts list [SELECTOR]``, ``summary [SELECTOR]``, ``drift
[SELECTOR]``, each with or without ``--json``) without Typer or Click, prints exactly what
the Typer commands print with the same exit code, and leaves every other case (errors,
warnings, remote mode, other command lines) to the Typer command, whose output is then the
same as before; the settings read the environment as pydantic-settings did.

Every ``gpufleet`` run through the entry point is a fresh process (what it imports is the
point). The Typer command whose output is the reference runs in a process forked, per
command, from one that has already imported the Typer application and the read commands'
modules (:class:`_TyperForks`): the same modules a fresh ``gpufleet`` imports for these
commands (none reads the environment at import but Rich's console, built for the same
``COLUMNS=100``), while the command line, the environment, the settings, stdout/stderr
(files, not terminals) and the exit status are the command's own; so it prints what a fresh
process prints without paying the imports (about 1 s of CPU) again in each of the 70 cases."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from gpufleet.cli.entry import Lean, lean_argv
from gpufleet.config import KNOWN_CRON, environment_values, load_settings
from gpufleet.domain.spec import Baseline
from gpufleet.lab.demo import enroll_lab
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.baselines import save_baseline, set_pool_baseline
from gpufleet.service.hosts.collect import collect
from gpufleet.service.views.summary import host_labels

HEAVY = ("typer", "click", "sqlalchemy", "pydantic_settings", "croniter", "rich", "gpufleet.api")

#: Runs gpufleet ARGV in a fresh process through the entry point ("entry") or the Typer
#: application itself ("typer"), then prints the heavy modules it loaded.
_CODE = (
    "import sys\n"
    "how, argv = sys.argv[1], sys.argv[2:]\n"
    "sys.argv = ['gpufleet', *argv]\n"
    "code = 0\n"
    "try:\n"
    "    if how == 'entry':\n"
    "        from gpufleet.cli.entry import main\n"
    "        main()\n"
    "    else:\n"
    "        from gpufleet.cli.main import app\n"
    "        app()\n"
    "except SystemExit as e:\n"
    "    code = e.code or 0\n"
    "sys.stdout.flush()\n"
    f"heavy = {HEAVY!r}\n"
    "print('LOADED', code, *sorted({m.split('.')[0] if not m.startswith('gpufleet') else m"
    " for m in sys.modules if m.startswith(heavy)}))\n"
)


#: The Typer application's fork server: imports what a fresh ``python -c`` running
#: ``gpufleet.cli.main.app`` imports for the read commands, then, per request line (JSON:
#: env, argv, out, err), forks a child that takes the request's environment, stdin from
#: /dev/null, stdout/stderr to the given files, runs ``app()`` as :data:`_CODE` does, runs
#: the exit handlers, flushes and exits with the command's code; the server answers with the
#: child's wait status.
_SERVER = (
    "import atexit, json, os, sys, threading\n"
    "from gpufleet.cli.main import app\n"
    "import gpufleet.cli.drift, gpufleet.cli.hosts, gpufleet.cli.hosts_list\n"
    "import gpufleet.cli.hosts_show, gpufleet.cli.labels, gpufleet.cli.summary_view\n"
    "import gpufleet.cli.leases_view, gpufleet.cli.alloc\n"
    "assert threading.active_count() == 1\n"
    "print('READY', flush=True)\n"
    "for line in sys.stdin:\n"
    "    req = json.loads(line)\n"
    "    pid = os.fork()\n"
    "    if pid == 0:\n"
    "        os.environ.clear()\n"
    "        os.environ.update(req['env'])\n"
    "        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)\n"
    "        for fd, path in ((1, req['out']), (2, req['err'])):\n"
    "            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)\n"
    "        sys.argv = ['gpufleet', *req['argv']]\n"
    "        code = 0\n"
    "        try:\n"
    "            app()\n"
    "        except SystemExit as e:\n"
    "            code = e.code or 0\n"
    "        atexit._run_exitfuncs()\n"
    "        sys.stdout.flush()\n"
    "        sys.stderr.flush()\n"
    "        os._exit(code)\n"
    "    print(os.waitpid(pid, 0)[1], flush=True)\n"
)


class _TyperForks:
    """The Typer command of :data:`_SERVER`, one fork per command (started on first use)."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.proc: subprocess.Popen[str] | None = None
        self.count = 0

    def _server(self) -> tuple[IO[str], IO[str]]:
        if self.proc is None:
            env = {k: v for k, v in os.environ.items() if not k.upper().startswith("GPUFLEET_")}
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _SERVER],
                env=env | {"COLUMNS": "100"},  # as _env: Rich reads COLUMNS at import
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            assert self.proc.stdout is not None and self.proc.stdout.readline() == "READY\n"
        assert self.proc.stdin is not None and self.proc.stdout is not None
        return self.proc.stdin, self.proc.stdout

    def run(self, env: dict[str, str], *argv: str) -> tuple[int, str, str]:
        assert env.get("COLUMNS") == "100", "the server's Rich console was built for 100"
        stdin, stdout = self._server()
        self.count += 1
        out, err = self.tmp / f"{self.count}.out", self.tmp / f"{self.count}.err"
        req = {"env": env, "argv": list(argv), "out": str(out), "err": str(err)}
        stdin.write(json.dumps(req) + "\n")
        stdin.flush()
        status = int(stdout.readline())
        assert os.WIFEXITED(status), f"the Typer command died: wait status {status}"
        return os.WEXITSTATUS(status), out.read_text(), err.read_text()

    def close(self) -> None:
        if self.proc is not None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            assert self.proc.wait(30) == 0
            self.proc = None


_typer: _TyperForks | None = None


@pytest.fixture(scope="module", autouse=True)
def _typer_forks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    global _typer
    _typer = _TyperForks(tmp_path_factory.mktemp("typer-out"))
    try:
        yield
    finally:
        _typer.close()
        _typer = None


def _run(how: str, env: dict[str, str], *argv: str) -> tuple[int, str, str, list[str]]:
    """(exit code, stdout, stderr, heavy modules loaded) of ``gpufleet ARGV``: "entry", a
    fresh process through the entry point; "typer", the Typer command (:class:`_TyperForks`;
    its modules are not reported)."""
    if how == "typer":
        assert _typer is not None
        return (*_typer.run(env, *argv), [])
    p = subprocess.run(
        [sys.executable, "-c", _CODE, how, *argv],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert p.returncode == 0, p.stderr
    body, loaded = p.stdout.rsplit("LOADED", 1)
    code, *modules = loaded.split()
    return int(code), body, p.stderr, modules


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home with three collected lab hosts (one without GPUs answering) and its database;
    the A100 pool points at a baseline whose driver its hosts do not have (drift exits 1)."""
    root = tmp_path_factory.mktemp("startup")
    fleet = Fleet.open(home=root / "home", actor="pytest")
    try:
        enroll_lab(
            fleet,
            root / "lab",
            3,
            models=["a100-8x", "h100-8x"],
            faults={"gpu-03": ["gpu-missing"]},
        )
        collect(fleet)
        save_baseline(fleet, Baseline(name="ref", driver="1.2.3"))
        set_pool_baseline(fleet, "train-a100", "ref")
    finally:
        fleet.db.dispose()
    return root / "home"


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("GPUFLEET_")}
    return env | {"GPUFLEET_HOME": str(home), "COLUMNS": "100"} | extra


def test_labels_host_starts_without_typer_and_prints_what_the_command_prints(home: Path) -> None:
    env = _env(home)
    for name in ("gpu-01", "GPU-03"):
        code, body, err, loaded = _run("entry", env, "labels", name, "--json")
        assert (code, err, loaded) == (0, "", []), (err, loaded)
        assert _run("typer", env, "labels", name, "--json")[:3] == (0, body, "")
        fleet = Fleet.open(home=home, actor="pytest")
        try:
            want = [
                {
                    "host": r.host,
                    "labels": r.labels,
                    "taints": [
                        {"key": t.key, "value": t.value, "effect": t.effect} for t in r.taints
                    ],
                }
                for r in host_labels(fleet, name)
            ]
        finally:
            fleet.db.dispose()
        assert json.loads(body) == want
        # the table: Rich, but still no Typer, no store, no settings machinery
        code, table, err, loaded = _run("entry", env, "--home", str(home), "labels", name)
        assert (code, err, loaded) == (0, "", ["rich"]), (err, loaded)
        assert _run("typer", env, "labels", name)[:3] == (0, table, "")
        assert "nvidia.com/gpu.product" in table or name == "GPU-03"


def test_hosts_show_starts_without_typer_and_prints_what_the_command_prints(
    home: Path,
) -> None:
    env = _env(home)
    for argv in (["hosts", "show", "gpu-01"], ["hosts", "show", "gpu-03", "--json"]):
        code, body, err, loaded = _run("entry", env, *argv)
        assert (code, err) == (0, ""), err
        assert "typer" not in loaded and "click" not in loaded, loaded
        assert _run("typer", env, *argv)[:3] == (0, body, "")
    assert json.loads(body)["host"]["name"] == "gpu-03"


def test_leases_show_starts_without_typer_and_prints_what_the_command_prints(
    tmp_path: Path,
) -> None:
    """Issue 30 item 3: ``leases show ID`` is a lean read too, through the command's own
    read and presenter (:mod:`gpufleet.cli.leases_view`); errors are the command's."""
    from datetime import timedelta

    from gpufleet.domain.placement import Request
    from gpufleet.service.allocation.allocation import allocate
    from gpufleet.service.hosts.validate import validate

    fleet = Fleet.open(home=tmp_path / "home", actor="pytest")
    try:
        enroll_lab(fleet, tmp_path / "lab", 2, models=["h100-8x"], faults={})
        validate(fleet)
        got = allocate(fleet, Request(gpus=8), owner="team-a", purpose="llm",
                       until=fleet.clock() + timedelta(hours=20), users=["alice"])
        assert got.lease is not None
    finally:
        fleet.db.dispose()
    env = _env(tmp_path / "home")
    for argv in (["leases", "show", "1"], ["leases", "show", "1", "--json"]):
        code, body, err, loaded = _run("entry", env, *argv)
        assert (code, err) == (0, ""), err
        assert "typer" not in loaded and "click" not in loaded, loaded
        assert _run("typer", env, *argv)[:3] == (0, body, "")
    assert json.loads(body)["owner"] == "team-a"
    for argv in (["leases", "show", "9"], ["leases", "show", "x"]):  # exit 4; exit 2
        code, body, err, loaded = _run("entry", env, *argv)
        assert "typer" in loaded
        assert (code, body, err) == _run("typer", env, *argv)[:3]
        assert code == (4 if argv[-1] == "9" else 2)


@pytest.mark.parametrize(
    ("argv", "extra"),
    [
        (["labels", "nope", "--json"], {}),  # no such host: the command's error, exit 4
        (["labels", "nope"], {}),
        (["labels", "gpu-01", "--json"], {"GPUFLEET_FORKS": "x"}),  # a config error, exit 2
        (["labels", "gpu-01"], {"GPUFLEET_FROKS": "3"}),  # the unknown-variable warning
        (["labels", "gpu-01", "--json"], {"GPUFLEET_URL": "http://127.0.0.1:9"}),  # remote
        (["--db", "sqlite:///nowhere/x.db", "labels", "gpu-01", "--json"], {}),
        (["hosts", "show", "nope"], {}),  # no such host: exit 4
        (["hosts", "show", "nope", "--json"], {}),
        (["hosts", "show", "gpu-01"], {"GPUFLEET_FROKS": "3"}),
        (["hosts", "show", "gpu-01", "--json"], {"GPUFLEET_URL": "http://127.0.0.1:9"}),
        (["hosts", "show", "gpu-01", "--json"], {"GPUFLEET_ACTOR": " "}),  # config error
        (["summary", "nope"], {}),  # a selector that matches nothing: exit 4
        (["summary", "nope", "--json"], {}),
        (["summary", "state:bogus"], {}),  # a bad selector
        (["summary", "gpu-0[12]"], {}),
        (["summary", "--json"], {"GPUFLEET_URL": "http://127.0.0.1:9"}),  # remote: exit 3
        (["summary"], {"GPUFLEET_FROKS": "3"}),
        (["summary", "--json"], {"GPUFLEET_FORKS": "x"}),
        (["--db", "sqlite:///nowhere/x.db", "summary"], {}),  # no database there: exit 2
        (["--db", "postgresql+psycopg://nobody@127.0.0.1:9/x", "summary", "--json"], {}),
        (["hosts", "list", "nope", "--json"], {}),
        (["hosts", "list", "state:bogus"], {}),
        (["hosts", "list"], {"GPUFLEET_URL": "http://127.0.0.1:9"}),
        (["hosts", "list", "--json"], {"GPUFLEET_FROKS": "3"}),
        (["--db", "sqlite:///nowhere/x.db", "hosts", "list", "--json"], {}),
        (["labels", "state:bogus", "--json"], {}),
        (["labels", "state:available", "--json"], {}),  # matches nothing here: exit 4
        (["labels", "state:bogus"], {}),
        (["labels"], {"GPUFLEET_URL": "http://127.0.0.1:9"}),
        (["labels", "--json"], {"GPUFLEET_ACTOR": " "}),
        (["--db", "sqlite:///nowhere/x.db", "labels", "state:available"], {}),
        (["drift", "nope"], {}),
        (["drift", "nope", "--json"], {}),
        (["drift", "--json"], {"GPUFLEET_URL": "http://127.0.0.1:9"}),
        (["drift"], {"GPUFLEET_FROKS": "3"}),
        (["--db", "sqlite:///nowhere/x.db", "drift", "--json"], {}),
    ],
)
def test_what_the_lean_start_declines_the_command_reports_as_before(
    home: Path, argv: list[str], extra: dict[str, str]
) -> None:
    env = _env(home, **extra)
    entry = _run("entry", env, *argv)
    typer_ = _run("typer", env, *argv)
    assert entry[:3] == typer_[:3]
    assert "typer" in entry[3]  # answered by the command, not the lean start


def test_the_lean_command_line_is_only_the_plain_one() -> None:
    home, labels, show = Path("h"), ("labels",), ("hosts", "show")
    assert lean_argv(["labels", "a"]) == Lean(None, None, False, labels, "a", False)
    assert lean_argv(["--home", "h", "--debug", "labels", "--json", "a"]) == Lean(
        home, None, True, labels, "a", True
    )
    assert lean_argv(["--home=h", "--db=sqlite:///x", "hosts", "show", "a", "--json"]) == (
        Lean(home, "sqlite:///x", False, show, "a", True)
    )
    assert lean_argv(["hosts", "show", "a"]) == Lean(None, None, False, show, "a", False)
    assert lean_argv(["labels"]) == Lean(None, None, False, labels, None, False)
    assert lean_argv(["summary", "--json"]) == Lean(None, None, False, ("summary",), None, True)
    assert lean_argv(["summary", "a"]) == Lean(None, None, False, ("summary",), "a", False)
    assert lean_argv(["hosts", "list", "state:x", "--json"]) == Lean(
        None, None, False, ("hosts", "list"), "state:x", True
    )
    assert lean_argv(["--db", "u", "drift"]) == Lean(None, "u", False, ("drift",), None, False)
    for argv in (
        [],
        ["--help"],
        ["labels", "--help"],
        ["labels", "a", "b"],
        ["labels", "a", "--json", "--json"],
        ["labels", "-x", "a"],
        ["--home"],
        ["--home", "--db", "labels", "a"],
        ["--verbose", "labels", "a"],
        ["hosts", "show"],
        ["hosts", "show", "a", "b"],
        ["hosts", "show", "--help"],
        ["hosts", "list", "a", "b"],
        ["hosts", "list", "-g", "a"],
        ["hosts", "list", "--state", "available"],
        ["hosts", "list", "--json=1"],
        ["hosts", "a"],
        ["hosts"],
        ["summary", "a", "b"],
        ["summary", "--help"],
        ["summary", "--"],
        ["drift", "-h"],
        ["drift", "a", "--json", "b"],
        ["summaries"],
        ["pool", "list"],
        ["baseline", "list"],
    ):
        assert lean_argv(argv) is None, argv


#: The read commands' plain shapes the entry point answers itself (issue 8, start-up).
_READS = [
    ["summary"],
    ["summary", "--json"],
    ["summary", "gpu-01,gpu-02"],
    ["--home", "HOME", "summary", "--json", "state:enrolled"],
    ["hosts", "list"],
    ["hosts", "list", "--json"],
    ["hosts", "list", "model:H100", "--json"],
    ["labels"],
    ["labels", "state:enrolled", "--json"],
    ["labels", "state:enrolled"],
    ["labels", "gpu-0*"],  # a selector: the service's read
    ["labels", "gpu-0*", "--json"],
    ["drift"],  # exit 1: the A100 hosts drift from the pool's baseline
    ["drift", "--json"],
    ["drift", "gpu-02"],  # exit 0: the H100 pool has no baseline
    ["--debug", "drift", "gpu-02", "--json"],
    ["hosts", "show", "gpu-02"],
]


@pytest.mark.parametrize("argv", _READS, ids=" ".join)
def test_the_read_commands_start_without_typer_and_print_what_the_command_prints(
    home: Path, argv: list[str]
) -> None:
    argv = [str(home) if a == "HOME" else a for a in argv]
    env = _env(home)
    code, body, err, loaded = _run("entry", env, *argv)
    assert "typer" not in loaded and "click" not in loaded, loaded
    typer_code, typer_body, typer_err = _run("typer", env, *argv)[:3]
    assert (typer_code, typer_body, _unlogged(typer_err)) == (code, body, _unlogged(err))
    assert body.strip() and _unlogged(err) == ""
    assert ("--debug" in argv) == (" DEBUG gpufleet." in err)  # --debug: debug lines (issue 25)
    assert code == (1 if argv[-1] == "drift" or argv[-2:] == ["drift", "--json"] else 0)
    if "--json" in argv:
        json.loads(body)


#: A log line of gpufleet.logs' text format (its time differs from one run to the next).
_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\S+ (DEBUG|INFO) \S+: .*\n", re.M)


def _unlogged(err: str) -> str:
    """``err`` without its DEBUG and INFO log lines."""
    return _LOG_LINE.sub("", err)


@pytest.mark.parametrize(
    "argv",
    [["summary"], ["summary", "--json"], ["hosts", "list", "--json"], ["labels"], ["drift"]],
    ids=" ".join,
)
def test_a_new_home_is_answered_as_the_command_answers_it(tmp_path: Path, argv: list[str]) -> None:
    """No database yet: both ways create it and print the empty fleet (each in its own
    new home, so neither sees the other's database)."""
    got = [_run(how, _env(tmp_path / how), *argv)[:3] for how in ("entry", "typer")]
    assert got[0] == got[1]
    assert got[0][0] == 0


def test_loading_the_settings_imports_neither_pydantic_settings_nor_croniter() -> None:
    code = (
        "import sys\nfrom gpufleet.config import load_settings\nload_settings()\n"
        "print(sorted(m for m in sys.modules if m.startswith(('croniter', 'pydantic_settings'))))"
    )
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("GPUFLEET_")}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"
    from croniter import croniter  # type: ignore[import-untyped]

    assert KNOWN_CRON and all(croniter.is_valid(c) for c in KNOWN_CRON)


def test_the_environment_is_read_case_insensitively_and_flags_win(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in list(os.environ):
        if name.upper().startswith("GPUFLEET_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("gpufleet_forks", "7")
    monkeypatch.setenv("GPUFLEET_SCHEDULE_COLLECT", "*/5 * * * *")
    monkeypatch.setenv("GPUFLEET_HOME", str(tmp_path / "env"))
    assert environment_values() == {
        "forks": "7",
        "schedule_collect": "*/5 * * * *",
        "home": str(tmp_path / "env"),
    }
    s = load_settings(home=tmp_path / "flag")
    assert (s.forks, s.schedule_collect, s.home) == (7, "*/5 * * * *", tmp_path / "flag")


#: What the read commands must not import (issue 8: each costs start-up CPU the command does
#: not use): the web/API stack, the job queue, SSH, HTTP clients, the secrets' cryptography,
#: remediation and webhook delivery, and the profiles and health checks (validation's).
_NOT_FOR_READS = (
    "fastapi",
    "starlette",
    "procrastinate",
    "asyncssh",
    "httpx",
    "jinja2",
    "cryptography",
    "gpufleet.service.health.remediation",
    "gpufleet.service.core.webhooks",
    "gpufleet.domain.profiles",
    "gpufleet.domain.checks",
)

_READ_CODE = (
    "import sys\n"
    "sys.argv = ['gpufleet', *sys.argv[1:]]\n"
    "code = 0\n"
    "try:\n"
    "    from gpufleet.cli.entry import main\n"
    "    main()\n"
    "except SystemExit as e:\n"
    "    code = e.code or 0\n"
    "sys.stdout.flush()\n"
    f"bad = {_NOT_FOR_READS!r}\n"
    "print('LOADED', code, *sorted(m for m in sys.modules if m.split('.')[0] in bad"
    " or any(m == b or m.startswith(b + '.') for b in bad)))\n"
)


@pytest.mark.parametrize(
    "argv",
    [
        ["summary"],
        ["hosts", "list", "--json"],
        ["labels", "gpu-0*", "--json"],  # a selector: the full path
        ["drift"],
    ],
)
def test_the_read_commands_import_none_of_what_they_do_not_use(home: Path, argv: list[str]) -> None:
    p = subprocess.run(
        [sys.executable, "-c", _READ_CODE, *argv],
        env=_env(home),
        capture_output=True,
        text=True,
        check=False,
    )
    assert p.returncode == 0, p.stderr
    body, loaded = p.stdout.rsplit("LOADED", 1)
    code, *modules = loaded.split()
    # drift exits 1: the fixture's A100 pool drifts from its baseline
    assert (code, p.stderr) == ("1" if argv == ["drift"] else "0", ""), p.stderr
    assert body.strip(), "the command printed nothing"
    assert modules == [], modules


@pytest.mark.parametrize(
    "argv",
    [
        ["summary", "--json"],  # a lean start
        ["hosts", "list", "--group", "nope", "--json"],  # the Typer application
        ["pool", "list"],
    ],
    ids=" ".join,
)
def test_the_garbage_collector_is_on_again_when_the_command_runs(
    home: Path, argv: list[str]
) -> None:
    """The entry point imports with the collector off; the command itself runs with it on
    (the imported modules frozen out of its collections)."""
    code = (
        "import gc, sys\n"
        "sys.argv = ['gpufleet', *sys.argv[1:]]\n"
        "from gpufleet.cli import common\n"
        "seen = []\n"
        "opened = common.open_fleet\n"
        "def spy():\n"
        "    seen.append((gc.isenabled(), gc.get_freeze_count() > 0))\n"
        "    return opened()\n"
        "common.open_fleet = spy\n"
        "for m in ('summary_view', 'hosts', 'baseline'):\n"
        "    __import__('gpufleet.cli.' + m)\n"
        "    mod = sys.modules['gpufleet.cli.' + m]\n"
        "    if hasattr(mod, 'open_fleet'): mod.open_fleet = spy\n"
        "from gpufleet.cli.entry import main\n"
        "try:\n"
        "    main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "print('SEEN', seen)\n"
    )
    p = subprocess.run(
        [sys.executable, "-c", code, *argv],
        env=_env(home),
        capture_output=True,
        text=True,
        check=False,
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.rsplit("SEEN", 1)[1].strip() == "[(True, True)]", p.stdout


@pytest.mark.parametrize("lang", ["en", "zh_CN"])
def test_the_fast_reads_print_what_the_commands_print_on_both_databases(
    fleet: Fleet, tmp_path: Path, lang: str
) -> None:
    """Issues 25 and 30 item 3: ``hosts list [SELECTOR]``, ``labels NAME`` and ``leases show
    ID`` are read by the fast read layer on the driver's own connection (no SQLAlchemy, no
    Typer) and print exactly what the Typer commands print through the same layer, on
    SQLite and PostgreSQL, in Chinese and in Shanghai's time too."""
    from datetime import timedelta

    from gpufleet.domain.events import AlarmKind, AlarmSeverity
    from gpufleet.domain.placement import Request
    from gpufleet.service.allocation.allocation import allocate
    from gpufleet.service.core.alarms import raise_alarm
    from gpufleet.service.hosts.validate import validate
    from gpufleet.store.repo import host_by_name

    models = ["a100-8x", "h100-8x", "a100-8x", "h100-8x", "ascend-910b3-8x", "mi100-4x"]
    enroll_lab(fleet, tmp_path / "lab", 6, models=models,
               faults={"gpu-03": ["gpu-missing"]})  # fmt: skip
    validate(fleet)
    with fleet.db.session() as s:  # an open alarm on the quarantined host
        raise_alarm(s, fleet, host_by_name(s, "gpu-03"), AlarmKind.HOST_KEY_CHANGED,
                    AlarmSeverity.CRITICAL, "host key changed: <b>[red]x[/]")  # fmt: skip
    got = allocate(fleet, Request(hosts=1), owner="team-a", purpose="llm",
                   until=fleet.clock() + timedelta(hours=20), users=["alice"])  # fmt: skip
    assert got.lease is not None
    free = next(f"gpu-0{i}" for i in (1, 2) if f"gpu-0{i}" not in got.lease.hosts)
    leased = got.lease.hosts[0]
    env = _env(tmp_path / "home", TZ="Asia/Shanghai", GPUFLEET_LANG=lang)
    for argv in (
        ["hosts", "list", "pool:train-a100"],
        ["hosts", "list", "pool:train-a100", "--json"],
        ["hosts", "list"],
        ["hosts", "list", "GPU-0*,state:quarantined"],
        ["labels", free],  # not leased: read lean (a leased host's labels need its lease)
        ["labels", free, "--json"],
        ["leases", "show", str(got.lease.id)],
        ["leases", "show", str(got.lease.id), "--json"],
        ["hosts", "show", free],  # healthy
        ["hosts", "show", free, "--json"],
        ["hosts", "show", "gpu-03"],  # quarantined, with an open alarm
        ["hosts", "show", "gpu-03", "--json"],
        ["hosts", "show", "gpu-05"],  # Ascend NPUs
        ["hosts", "show", "gpu-05", "--json"],
        ["hosts", "show", "gpu-06"],  # AMD GPUs
        ["hosts", "show", "gpu-06", "--json"],
        ["hosts", "show", leased],  # leased: its lease and labels
        ["hosts", "show", leased, "--json"],
    ):
        full = ["--db", fleet.db.url, *argv]
        code, body, err, loaded = _run("entry", env, *full)
        assert (code, err) == (0, ""), (argv, err)
        # a leased host's labels need its lease: its --json is read by the service
        lean = not (argv[:2] == ["hosts", "show"] and argv[2] == leased and "--json" in argv)
        if lean:
            assert not {"typer", "click", "sqlalchemy"} & set(loaded), (argv, loaded)
        else:
            assert "typer" not in loaded, (argv, loaded)
        assert _fresh_typer(env, *full) == (0, body, ""), argv
        if argv[:2] == ["hosts", "show"] and "--json" in argv:
            assert json.loads(body)["host"]["name"] == argv[2]
        if argv == ["hosts", "show", "gpu-03"]:
            assert "host-key-changed" in body and "<b>[red]x[/]" in body, body
        if argv[0] == "leases" and "--json" not in argv:
            assert "CST" in body  # Shanghai's time
        if lang == "zh_CN" and argv == ["hosts", "list", "pool:train-a100"]:
            assert "台主机" in body, body
    # no such host: the lean start declines; the command names the nearest known names
    full = ["--db", fleet.db.url, "hosts", "show", "gpu-3"]
    code, body, err, loaded = _run("entry", env, *full)
    assert code == 4 and "gpu-03" in err and body == "", (code, err)
    assert "typer" in loaded  # the command reported it
    assert _fresh_typer_failing(env, *full) == (code, body, err)


def _fresh_typer_failing(env: dict[str, str], *argv: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of a failing Typer command in a fresh process."""
    p = subprocess.run([sys.executable, "-c", _CODE, "typer", *argv], env=env,
                       capture_output=True, text=True, check=False)  # fmt: skip
    body, loaded = p.stdout.rsplit("LOADED", 1)
    return int(loaded.split()[0]), body, p.stderr


def _fresh_typer(env: dict[str, str], *argv: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of the Typer command in a fresh process (the fork server
    of :func:`_run` chose its language when it started)."""
    p = subprocess.run([sys.executable, "-c", _CODE, "typer", *argv], env=env,
                       capture_output=True, text=True, check=False)  # fmt: skip
    assert p.returncode == 0, p.stderr
    body, loaded = p.stdout.rsplit("LOADED", 1)
    return int(loaded.split()[0]), body, p.stderr
