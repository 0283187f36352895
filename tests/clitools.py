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


def flat(text: str) -> str:
    """Rich wraps at 80 columns in the runner: compare with whitespace collapsed."""
    return " ".join(text.split())


#: The lab replays one real all-reduce run, on 8x A100 (235 GB/s peak: lab/data/captured/
#: active): below the H100 SXM floor of domain/data/nccl_floors.yaml, and there is no H100
#: capture to replay instead. Tests of H100 lab hosts that follow a host into
#: training-multinode use this site profile: an NCCL result is still required (and any wrong
#: value or missing bandwidth fails it), the model floor is not applied.
LAB_NCCL_PROFILE = "profiles:\n  training-multinode:\n    checks:\n      nccl: {require: true}\n"


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
        cannot be tested), and :data:`LAB_NCCL_PROFILE` as the site's profiles."""
        overlay = self.tmp / "lab-profiles.yaml"
        overlay.write_text(LAB_NCCL_PROFILE)
        self.env["GPUFLEET_PROFILES"] = str(overlay)
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
