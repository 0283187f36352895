"""``GET /api/v1/racks`` and ``/racks/{rack}`` through the real ASGI app on SQLite and
PostgreSQL (issue 27): a lab NVL72 rack missing one tray, read with a viewer token; the
shapes the CLI's ``racks list/show --json`` print; 404 in the one error shape."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpufleet.api.app import create_app
from gpufleet.api.auth import TokenStore
from gpufleet.inventory import load_inventory
from gpufleet.lab.fleet import write_inventory
from gpufleet.lab.racks import create_racks
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.collect import collect
from gpufleet.service.hosts.enroll import enroll
from tests.api.conftest import auth
from tests.api.test_api import V1, error


@pytest.fixture
def racks_client(fleet: Fleet, tmp_path: Path, tokens_file: Path) -> Iterator[TestClient]:
    lab = tmp_path / "lab"
    fl = create_racks("gb200-nvl72", 1, faults={"nvl01-t09": ["tray-missing"]})
    fl.save(lab)
    write_inventory(fl, lab / "inventory.ini", transport="sim", lab_dir=lab)
    enroll(fleet, load_inventory(lab / "inventory.ini"))
    collect(fleet)
    with TestClient(create_app(fleet, TokenStore(tokens_file))) as c:
        yield c


def test_racks_list_and_show(racks_client: TestClient) -> None:
    r = racks_client.get(f"{V1}/racks", headers=auth("viewer"))
    assert r.status_code == 200, r.text
    (rack,) = r.json()
    assert rack["model"] == "gb200-nvl72" and rack["trays"] == 17
    assert rack["expected_trays"] == 18 and rack["tray_rows"] is None
    assert [f["kind"] for f in rack["findings"]] == ["missing_tray"]
    assert "tray index 8" in rack["findings"][0]["message"]
    shown = racks_client.get(f"{V1}/racks/{rack['rack']}", headers=auth("viewer")).json()
    rows = shown["tray_rows"]
    assert [t["tray_index"] for t in rows] == [i for i in range(18) if i != 8]
    assert rows[0]["alarms"][0]["kind"] == "rack-manifest"
    by_domain = racks_client.get(f"{V1}/racks/{rack['nvl_domain']}", headers=auth("viewer"))
    assert by_domain.json()["rack"] == rack["rack"]
    error(racks_client.get(f"{V1}/racks/nope", headers=auth("viewer")), 404, "not_found")
