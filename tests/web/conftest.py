"""Dashboard fixtures: the API application with the dashboard attached, over a lab fleet."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpufleet.api.app import create_app
from gpufleet.api.auth import TokenStore
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.core.tokens import Role, create_token
from gpufleet.web.app import attach
from tests.api.conftest import sqlite_lab, with_lab  # noqa: F401 (sqlite_lab: a fixture)


@pytest.fixture
def web_fleet(fleet: Fleet, tmp_path: Path, request: pytest.FixtureRequest) -> Fleet:
    return with_lab(fleet, tmp_path, request)


@pytest.fixture
def viewer_token(web_fleet: Fleet) -> str:
    return create_token(web_fleet, "dash", Role.VIEWER)[1]


@pytest.fixture
def web(web_fleet: Fleet, viewer_token: str) -> Iterator[TestClient]:
    app = create_app(web_fleet, TokenStore(None))
    attach(app, web_fleet, app.state.ctx.tokens)
    with TestClient(app) as c:
        yield c
