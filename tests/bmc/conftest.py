"""Redfish emulators for the BMC tests: started once per session on loopback."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.bmc.redfishlab import TOWER, Emulator, start_dynamic, start_static

#: The dynamic emulator's login (a test credential: the tests grep for it everywhere).
BMC_USER = "fleetadmin"
BMC_PASSWORD = "Bmc-s3cret-7f2c9e"
#: Systems the dynamic emulator serves.
SYSTEMS = 6


@pytest.fixture(scope="session")
def static_bmc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    """sushy-static over the DMTF public-tower mockup (unedited)."""
    em = start_static(TOWER, tmp_path_factory.mktemp("static"))
    yield em
    em.stop()


@pytest.fixture(scope="session")
def critical_bmc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    """sushy-static over an EDITED copy of public-tower: the system's Status.Health and
    HealthRollup set to Critical (nothing else changed)."""
    root = tmp_path_factory.mktemp("critical")
    tree = root / "tower"
    shutil.copytree(TOWER, tree)
    sysfile = tree / "Systems" / "437XR1238R2" / "index.json"
    text = sysfile.read_text()
    assert '"HealthRollup": "OK"' in text
    sysfile.write_text(text.replace('"Health": "OK"', '"Health": "Critical"', 1)
                       .replace('"HealthRollup": "OK"', '"HealthRollup": "Critical"', 1))
    em = start_static(tree, root)
    yield em
    em.stop()


@pytest.fixture(scope="session")
def garbage_bmc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    """sushy-static over an EDITED copy of public-tower whose Systems collection is not
    JSON (a service that answers garbage)."""
    root = tmp_path_factory.mktemp("garbage")
    tree = root / "tower"
    shutil.copytree(TOWER, tree)
    (tree / "Systems" / "index.json").write_text("<html>502 Bad Gateway</html>\n")
    em = start_static(tree, root)
    yield em
    em.stop()


@pytest.fixture(scope="session")
def dynamic_bmc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    """sushy-emulator --fake with SYSTEMS systems, basic auth, feature set full."""
    em = start_dynamic(tmp_path_factory.mktemp("dynamic"), SYSTEMS, BMC_USER, BMC_PASSWORD)
    yield em
    em.stop()


def tower_mockup() -> Path:
    return TOWER
