"""API fixtures: a validated lab fleet on SQLite and PostgreSQL, a tokens file with one token
per role, and a client of the real ASGI app (FastAPI's TestClient, httpx underneath)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpufleet.api.app import create_app
from gpufleet.api.auth import TokenStore, token_digest
from gpufleet.lab.demo import enroll_lab
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.validate import validate
from gpufleet.testing import FakeClock
from tests.conftest import copy_sqlite_template

#: The bearer token of each role (the tokens file stores only their SHA-256).
TOKENS = {"viewer": "tok-viewer-1", "operator": "tok-operator-1", "admin": "tok-admin-1"}


def auth(role: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[role]}"}


def write_tokens(path: Path, roles: dict[str, str] = TOKENS) -> Path:
    path.write_text(
        "".join(
            f"{token_digest(tok)}: {{role: {role}, name: {role}-bot}}\n"
            for role, tok in roles.items()
        )
    )
    return path


def lab(fleet: Fleet, tmp_path: Path, n: int = 6) -> None:
    """``n`` validated 8x H100 hosts of the simulated lab."""
    enroll_lab(fleet, tmp_path / "lab", n, models=["h100-8x"], faults={})
    validate(fleet)


@pytest.fixture
def tokens_file(tmp_path: Path) -> Path:
    return write_tokens(tmp_path / "tokens.yaml")


@pytest.fixture(scope="session")
def sqlite_lab(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Path:
    """The SQLite database :func:`lab` leaves, built once per session (per xdist worker) by
    the ``fleet`` fixture's actor and clock; its lab directory stays beside it."""
    d = tmp_path_factory.mktemp("sqlite-lab")
    path = copy_sqlite_template(sqlite_template, d / "fleet.db")
    f = Fleet.open(home=d / "home", url=f"sqlite:///{path}", actor="pytest", clock=FakeClock())
    try:
        lab(f, d)
    finally:
        f.db.dispose()
    assert not path.with_name("fleet.db-wal").exists()  # all of it in the file
    return path


def with_lab(fleet: Fleet, tmp_path: Path, request: pytest.FixtureRequest) -> Fleet:
    """``fleet`` (the ``fleet`` fixture, not yet used) with :func:`lab`'s hosts. On SQLite its
    empty database is replaced by a copy of :func:`sqlite_lab` (0.8-1.5 s of enrolling and
    validating six hosts saved per test); the hosts' inventory points at the session's lab
    directory, which no test changes (those that change lab files call :func:`lab` itself)."""
    if fleet.db.dialect != "sqlite":
        lab(fleet, tmp_path)
        return fleet
    assert fleet.actor == "pytest" and fleet.clock() == FakeClock().now, "as sqlite_lab's"
    fleet.db.dispose()
    db_file = Path(str(fleet.db.engine.url.database))
    assert not db_file.with_name(db_file.name + "-wal").exists()
    shutil.copyfile(request.getfixturevalue("sqlite_lab"), db_file)
    return fleet


@pytest.fixture
def lab_fleet(fleet: Fleet, tmp_path: Path, request: pytest.FixtureRequest) -> Fleet:
    return with_lab(fleet, tmp_path, request)


@pytest.fixture
def client(lab_fleet: Fleet, tokens_file: Path) -> Iterator[TestClient]:
    with TestClient(create_app(lab_fleet, TokenStore(tokens_file))) as c:
        yield c


@pytest.fixture(scope="session")
def promtool() -> str:
    """Debian's promtool (package ``prometheus``), installed when missing."""
    found = shutil.which("promtool")
    if found is None:
        env = {"DEBIAN_FRONTEND": "noninteractive", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
        subprocess.run(["apt-get", "update", "-qq"], check=True, env=env, timeout=600)
        subprocess.run(
            ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "prometheus"],
            check=True,
            env=env,
            timeout=900,
            capture_output=True,
        )
        found = shutil.which("promtool")
    assert found is not None, "promtool is not installed (apt-get install prometheus)"
    return found
