"""Errors a person can act on, and text shown literally (issue 6 C.13, C.15; issue 7 item 5).

* Every GpufleetError class goes through the CLI's one boundary the same way: one line
  ``error: MESSAGE`` on stderr (exit code of the class), or with ``--json`` the one shape
  ``{"error": {"code", "message", "retryable"}}`` on stdout.
* Configuration and infrastructure errors (bad GPUFLEET_* value, missing profiles file, wrong or
  unreachable database, corrupt or read-only database, disk full) end in one line, exit 2, no
  traceback (``--debug`` shows it), and a bad configuration creates nothing. These run the real
  ``gpufleet`` in a subprocess against real SQLite files and the real PostgreSQL.
* Hostile text (Rich markup, terminal escape sequences) in reasons and inventory values is shown
  literally by real commands and never reaches the terminal as a control sequence; ``--json``
  keeps it exact.
"""

from __future__ import annotations

import errno
import io
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError
from tests.test_errors import EXAMPLES, every_error_class
from typer.testing import CliRunner

from gpufleet.cli.common import SafeConsole, boundary, infrastructure_error, lit, printable
from gpufleet.cli.main import app as gpufleet_app
from gpufleet.errors import GpufleetError, LocalIOError, StoreError, StoreUnavailable

HOSTILE = "[/] [bold]x\x1b]0;pwned\x07 [link=http://evil]y[/link] :end: \x1b[2J\x9b1m\u202e"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("GPUFLEET_"):
            monkeypatch.delenv(name)


def _app_raising(exc: BaseException) -> typer.Typer:
    app = typer.Typer()

    @app.command()
    @boundary
    def boom(as_json: bool = typer.Option(False, "--json")) -> None:
        raise exc

    return app


# -- one shape per error class, through the boundary ------------------------------------------


@pytest.mark.parametrize("cls", every_error_class(), ids=lambda c: c.__name__)
def test_json_error_shape_on_stdout(cls: type[GpufleetError]) -> None:
    exc, message = EXAMPLES[cls]
    r = CliRunner().invoke(_app_raising(exc), ["--json"])
    assert r.exit_code == cls.exit_code
    assert json.loads(r.stdout) == {
        "error": {"code": cls.code, "message": message, "retryable": cls.retryable}
    }
    assert r.stderr == ""


@pytest.mark.parametrize("cls", every_error_class(), ids=lambda c: c.__name__)
def test_text_error_is_one_line_on_stderr(cls: type[GpufleetError]) -> None:
    exc, message = EXAMPLES[cls]
    r = CliRunner().invoke(_app_raising(exc), [])
    assert r.exit_code == cls.exit_code
    assert r.stdout == ""
    assert r.stderr == f"error: {message}\n"


def test_error_message_with_markup_and_escapes_is_literal() -> None:
    r = CliRunner().invoke(_app_raising(GpufleetError(f"host said {HOSTILE}")), [])
    assert r.exit_code == 1
    assert r.stderr.count("\n") == 1
    assert "[/] [bold]x" in r.stderr and "[link=http://evil]y[/link] :end:" in r.stderr
    assert "\\x1b]0;pwned\\x07" in r.stderr and "\\x1b[2J" in r.stderr and "\\x9b" in r.stderr
    assert not any(c in r.stderr for c in "\x1b\x07\x9b\u202e")
    shown = CliRunner().invoke(_app_raising(GpufleetError(HOSTILE)), ["--json"])
    assert json.loads(shown.stdout)["error"]["message"] == HOSTILE  # exact in JSON


def test_multi_line_messages_end_in_one_line() -> None:
    r = CliRunner().invoke(_app_raising(GpufleetError("first\nsecond")), [])
    assert r.stderr == "error: first second\n"


# -- configuration and infrastructure: the real CLI, one line, exit 2, no traceback ----------


def gpufleet(tmp_path: Path, *argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The real ``gpufleet`` in a fresh process, HOME in tmp_path, only ``env`` GPUFLEET_*."""
    clean = {k: v for k, v in os.environ.items() if not k.upper().startswith("GPUFLEET_")}
    clean.update(HOME=str(tmp_path), COLUMNS="200", **env)
    return subprocess.run(
        [sys.executable, "-m", "gpufleet.cli.main", *argv],
        env=clean,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )


def assert_one_line(p: subprocess.CompletedProcess[str], code: int, *says: str) -> str:
    assert p.returncode == code, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr + p.stdout
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), p.stderr
    for s in says:
        assert s in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"GPUFLEET_FORKS": "abc"}, ["GPUFLEET_FORKS='abc'"]),
        ({"GPUFLEET_VALIDATION_TTL_HOURS": "-1"}, ["GPUFLEET_VALIDATION_TTL_HOURS"]),
        ({"GPUFLEET_PROFILES": "/nonexistent/p.yaml"}, ["GPUFLEET_PROFILES", "file not found"]),
        ({"GPUFLEET_DATABASE_URL": "mysql://u@h/db"}, ["GPUFLEET_DATABASE_URL", "mysql"]),
        ({"GPUFLEET_DATABASE_URL": "no url"}, ["not a database URL"]),
        (
            {"GPUFLEET_SECRET_KEY": "hunter2-secret", "GPUFLEET_SECRET_KEY_FILE": "/nonexistent"},
            ["GPUFLEET_SECRET_KEY_FILE"],
        ),
    ],
)
def test_bad_setting_is_one_line_exit_2_and_nothing_is_created(
    tmp_path: Path, env: dict[str, str], says: list[str]
) -> None:
    home = tmp_path / "state"
    p = gpufleet(tmp_path, "hosts", "list", GPUFLEET_HOME=str(home), **env)
    line = assert_one_line(p, 2, "invalid configuration", *says)
    assert "hunter2" not in line
    assert not home.exists()
    assert not (tmp_path / ".local").exists()


def test_bad_setting_with_json_is_the_error_shape(tmp_path: Path) -> None:
    p = gpufleet(tmp_path, "hosts", "list", "--json", GPUFLEET_FORKS="0")
    assert p.returncode == 2 and p.stderr == ""
    err = json.loads(p.stdout)["error"]
    assert err["code"] == "config" and err["retryable"] is False
    assert "GPUFLEET_FORKS" in err["message"]


def test_home_that_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    assert_one_line(gpufleet(tmp_path, "--home", "f", "hosts", "list"), 2, "not a directory")


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    (tmp_path / "h").mkdir()
    (tmp_path / "h" / "gpufleet.db").write_text("not a database at all\n" * 100)
    p = gpufleet(tmp_path, "--debug", "--home", "h", "hosts", "list")
    assert p.returncode == 2
    assert "Traceback" in p.stderr and "file is not a database" in p.stderr


def test_corrupt_database_file(tmp_path: Path) -> None:
    (tmp_path / "h").mkdir()
    (tmp_path / "h" / "gpufleet.db").write_text("not a database at all\n" * 100)
    assert_one_line(
        gpufleet(tmp_path, "--home", "h", "hosts", "list"), 2, "sqlite:///", "not a database"
    )


def test_unreachable_database_is_one_line_without_the_password(tmp_path: Path) -> None:
    url = "postgresql+psycopg://gpufleet:pw-not-shown@127.0.0.1:1/gpufleet"
    p = gpufleet(tmp_path, "hosts", "list", GPUFLEET_DATABASE_URL=url)
    line = assert_one_line(p, 2, "127.0.0.1", "refused")
    assert "pw-not-shown" not in line
    p = gpufleet(tmp_path, "hosts", "list", "--json", GPUFLEET_DATABASE_URL=url)
    assert p.returncode == 2
    err = json.loads(p.stdout)["error"]
    # A refused connection is StoreUnavailable, retryable (store/db.py translates it).
    assert (err["code"], err["retryable"]) == ("store_unavailable", True)
    assert "refused" in err["message"] and "pw-not-shown" not in err["message"]


@pytest.mark.postgres
def test_wrong_database_role_is_permanent(tmp_path: Path) -> None:
    url = "postgresql+psycopg://no_such_role_gf@127.0.0.1:5432/postgres"
    p = gpufleet(tmp_path, "hosts", "list", "--json", GPUFLEET_DATABASE_URL=url)
    assert p.returncode == 2, p.stderr
    err = json.loads(p.stdout)["error"]
    assert (err["code"], err["retryable"]) == ("store", False)
    assert "no_such_role_gf" in err["message"]


def test_read_only_database(tmp_path: Path) -> None:
    assert gpufleet(tmp_path, "--home", "h", "hosts", "list").returncode == 0  # migrated
    db = tmp_path / "h" / "gpufleet.db"
    inv = tmp_path / "inv.csv"
    inv.write_text("name,address\ngpu-01,10.0.0.1\n")
    ro = f"sqlite:///file:{db}?mode=ro&uri=true"
    p = gpufleet(tmp_path, "--db", ro, "enroll", "-i", str(inv))
    assert_one_line(p, 2, "readonly database")


def test_unknown_setting_is_a_warning(tmp_path: Path) -> None:
    p = gpufleet(tmp_path, "--home", "h", "hosts", "list", "--json", GPUFLEET_FORK="3")
    assert p.returncode == 0
    assert json.loads(p.stdout) == []
    assert "unknown setting GPUFLEET_FORK is ignored (did you mean GPUFLEET_FORKS?)" in p.stderr


def test_disk_full_in_sqlite_is_a_store_error(tmp_path: Path) -> None:
    """A real SQLite "database or disk is full" (a page limit stands in for the disk)."""
    eng = create_engine(f"sqlite:///{tmp_path / 'small.db'}")
    with pytest.raises(OperationalError) as info, eng.begin() as conn:
        conn.execute(text("PRAGMA max_page_count=8"))
        conn.execute(text("CREATE TABLE t (x TEXT)"))
        for _ in range(100):
            conn.execute(text("INSERT INTO t VALUES (:x)"), {"x": "y" * 4000})
    eng.dispose()
    err = infrastructure_error(info.value)
    assert isinstance(err, StoreError) and not err.retryable
    assert "full" in str(err) and "free disk space" in str(err)
    assert "INSERT" not in str(err)  # the SQL is not the cause


def test_os_errors_become_local_io_errors(tmp_path: Path) -> None:
    full = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "lab"))
    err = infrastructure_error(full)
    assert isinstance(err, LocalIOError) and err.exit_code == 2
    assert str(err) == f"{tmp_path / 'lab'}: No space left on device (free disk space, then retry)"
    assert infrastructure_error(ValueError("a bug")) is None  # bugs keep their traceback
    locked = OperationalError("SELECT 1", {}, sqlite3.OperationalError("database is locked"))
    assert isinstance(infrastructure_error(locked), StoreUnavailable)
    refused = OperationalError(
        None,
        {},
        Exception('connection to server at "127.0.0.1", port 1 failed: Connection refused'),
    )
    assert infrastructure_error(refused).retryable  # type: ignore[union-attr]
    role = OperationalError(None, {}, Exception('connection failed: role "x" does not exist'))
    assert not infrastructure_error(role).retryable  # type: ignore[union-attr]


# -- hostile text through real commands --------------------------------------------------------


def test_hostile_reason_and_inventory_values_are_shown_literally(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # no folding inside the values: the console reads COLUMNS when it prints (setting its
    # width instead would pin it for every later test of this process)
    monkeypatch.setenv("COLUMNS", "400")
    inv = tmp_path / "inv.yaml"
    inv.write_text(
        "all:\n  children:\n    gpu:\n      hosts:\n        gpu-01:\n"
        "          ansible_host: 10.0.0.1\n"
        '          gpufleet_pool: "[red]pool[/]:end:"\n'
    )
    runner = CliRunner()
    home = ["--home", str(tmp_path / "h")]

    def run(*argv: str) -> str:
        r = runner.invoke(gpufleet_app, [*home, *argv])
        assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
        assert r.exit_code == 0, (r.stdout, r.stderr)
        return r.stdout + r.stderr

    run("enroll", "-i", str(inv))
    run("maintenance", "on", "gpu-01", "--reason", HOSTILE)
    outputs = {
        "hosts show": run("hosts", "show", "gpu-01"),
        "hosts list": run("hosts", "list"),
        "events": run("events", "gpu-01"),
    }
    for name, out in outputs.items():
        assert not any(c in out for c in "\x1b\x07\x9b\u202e"), name
        flat = "".join(out.split())
        assert "[red]pool[/]:end:" in flat or name == "events", name
        if name != "hosts list":
            assert "[/][bold]x\\x1b]0;pwned\\x07" in flat, (name, out)
            assert "[link=http://evil]y[/link]:end:" in flat, (name, out)
    events = json.loads(run("events", "gpu-01", "--json"))
    assert any(e["data"].get("reason") == HOSTILE for e in events)  # JSON is faithful


def test_the_console_cleans_every_segment_even_for_rich_text_objects() -> None:
    """Text objects skip render_str; the render() net still catches their control codes,
    while the console's own styling (a real terminal) still works."""
    from rich.table import Table
    from rich.text import Text

    buf = io.StringIO()
    c = SafeConsole(file=buf, force_terminal=True, width=120, emoji=False)
    t = Table("host", "reason")
    t.add_row(Text("gpu-01"), Text(HOSTILE, style="bold"))
    c.print(t)
    c.print(f"[bold]{lit(HOSTILE)}[/]")
    out = buf.getvalue()
    assert "\x1b[1m" in out  # styles are rendered
    assert "\x1b]" not in out and "\x07" not in out and "\x1b[2J" not in out
    assert "\x9b" not in out and "\u202e" not in out
    assert printable(HOSTILE).count("\\x1b") == 2
