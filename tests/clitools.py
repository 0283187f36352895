"""Running the ``gpufleet`` CLI in tests, on SQLite (``--home``) or PostgreSQL (``--db``)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from gpufleet.cli.main import app
from gpufleet.store.db import Database
from tests.conftest import _truncate, copy_sqlite_template
from tests.labproof import lab_profiles


def flat(text: str) -> str:
    """Rich wraps at 80 columns in the runner: compare with whitespace collapsed."""
    return " ".join(text.split())


@dataclass
class Cli:
    """``gpufleet`` with the global options of one backend."""

    global_args: list[str]
    tmp: Path
    env: dict[str, str | None]
    runner: CliRunner = field(default_factory=CliRunner)

    def run(self, *argv: str, code: int = 0) -> Result:
        """Run a command; assert its exit code."""
        r = self.runner.invoke(app, [*self.global_args, *argv], env=self.env)
        if r.exception is not None and not isinstance(r.exception, SystemExit):
            raise r.exception
        assert r.exit_code == code, (
            f"gpufleet {' '.join(argv)}: exit {r.exit_code}, expected {code}\n"
            f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
        )
        return r

    def json(self, *argv: str, code: int = 0) -> Any:
        """Run a command with ``--json`` and decode its stdout."""
        return json.loads(self.run(*argv, "--json", code=code).stdout)

    def prove(self, selector: str, *, code: int = 0) -> None:
        """The proof the training profiles ask for, as an operator gives it: a DCGM diag at
        level 2 and an NCCL all-reduce on ``selector`` (``code`` 1 when one of its hosts
        cannot be tested), and :data:`tests.labproof.LAB_NCCL_PROFILE` as the site's profiles."""
        self.env["GPUFLEET_PROFILES"] = str(lab_profiles(self.tmp))
        self.run("evidence", "run", selector, "--kind", "dcgm", "--level", "2", code=code)
        self.run("evidence", "run", selector, "--kind", "nccl", code=code)

    def state(self, host: str) -> str:
        """The host's lifecycle state as ``hosts list`` reports it."""
        rows = self.json("hosts", "list", host)
        assert [r["name"] for r in rows] == [host]
        return str(rows[0]["state"])


def cli_for_backend(request: pytest.FixtureRequest, tmp_path: Path, actor: str) -> Cli:
    """SQLite under --home (its database a copy of the session's migrated one), or the
    session's PostgreSQL via --db (tables emptied); the environment is cleared of GPUFLEET_*
    so nothing outside the test leaks in."""
    home = tmp_path / "home"
    env: dict[str, str | None] = {
        "GPUFLEET_ACTOR": actor,
        "GPUFLEET_DATABASE_URL": None,
        "GPUFLEET_HOME": None,
        # times without a zone are the operator's local time: the tests' is UTC unless a
        # test says otherwise (docs/reference.md, "Times")
        "TZ": "UTC",
    }
    args = ["--home", str(home)]  # also with --db, so nothing is written under ~
    if request.param == "sqlite":
        # the home's database as the first command creates it (migrated to the current
        # schema), copied rather than migrated again in every test: tests/conftest.py
        copy_sqlite_template(request.getfixturevalue("sqlite_template"), home / "gpufleet.db")
    if request.param == "postgres":
        url: str = request.getfixturevalue("pg_database_url")
        db = Database(url)
        _truncate(db)
        db.dispose()
        args += ["--db", url]
    return Cli(args, tmp_path, env)
