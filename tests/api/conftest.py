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
from gpufleet.inventory import load_inventory
from gpufleet.lab.fleet import create_fleet, write_inventory
from gpufleet.service.enroll import enroll
from gpufleet.service.fleet import Fleet
from gpufleet.service.validate import validate

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
    d = tmp_path / "lab"
    d.mkdir()
    fl = create_fleet(n, models=["h100-8x"], faults={})
    fl.save(d)
    write_inventory(fl, d / "inventory.ini", transport="sim", lab_dir=d)
    enroll(fleet, load_inventory(d / "inventory.ini"))
    validate(fleet)


@pytest.fixture
def tokens_file(tmp_path: Path) -> Path:
    return write_tokens(tmp_path / "tokens.yaml")


@pytest.fixture
def lab_fleet(fleet: Fleet, tmp_path: Path) -> Fleet:
    lab(fleet, tmp_path)
    return fleet


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
