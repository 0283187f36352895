"""A BMC that trickles its answer, or sends a huge one, next to a sushy-tools emulator, on
SQLite and PostgreSQL (issue 24, item 11): a per-BMC deadline bounds the whole read (not each
socket read), the good BMC is reported ``ok`` and the slow one ``timeout`` within about the
deadline, by ``bmc status`` and ``GET /api/v1/bmc`` alike; a body over the size cap (300 MB
announced, or streamed without a length) is refused as a bad response.

Fail on main 84be469: the trickling BMC holds the whole read for as long as it trickles
(30 s here, each try; sushy tries 3 times), and the endless body is read until memory or
the BMC gives out."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from fastapi.testclient import TestClient
from tests.api.conftest import auth, write_tokens
from tests.bmc.conftest import BMC_PASSWORD, BMC_USER
from tests.bmc.redfishlab import Emulator, free_port
from tests.bmc.slowbmc import misbehaving_bmc
from tests.clitools import Cli, cli_for_backend

from gpufleet.api.app import create_app
from gpufleet.api.auth import TokenStore
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.bmc import bmc_history

pytestmark = pytest.mark.xdist_group("redfish")

DEADLINE = 3.0


@pytest.fixture(params=["sqlite", "postgres"])
def gf(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cli]:
    c = cli_for_backend(request, tmp_path, "bmc-test")
    c.env["GPUFLEET_SECRET_KEY"] = Fernet.generate_key().decode()
    c.env["GPUFLEET_SECRET_KEY_FILE"] = None
    c.env["GPUFLEET_BMC_PASSWORD"] = None
    c.env["GPUFLEET_BMC_TIMEOUT"] = "2"
    yield c


def _host(name: str, url: str) -> str:
    return (f"{name} ansible_host=127.0.0.1 ansible_port={free_port()} "
            f"gpufleet_bmc_address={url} gpufleet_bmc_username={BMC_USER} "
            f"gpufleet_bmc_password={BMC_PASSWORD}")


def _fleet(gf: Cli, monkeypatch: pytest.MonkeyPatch) -> Fleet:
    key = gf.env["GPUFLEET_SECRET_KEY"]
    assert key is not None
    monkeypatch.setenv("GPUFLEET_SECRET_KEY", key)
    monkeypatch.delenv("GPUFLEET_SECRET_KEY_FILE", raising=False)
    home = Path(gf.global_args[gf.global_args.index("--home") + 1])
    url = gf.global_args[gf.global_args.index("--db") + 1] if "--db" in gf.global_args else None
    return Fleet.open(home=home, url=url, actor="pytest")


def test_a_trickling_bmc_is_cut_at_the_deadline_the_others_reported(
    gf: Cli, static_bmc: Emulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with (misbehaving_bmc("trickle", every_s=0.5) as slow,
          misbehaving_bmc("huge") as huge, misbehaving_bmc("endless") as endless):
        inv = tmp_path / "bmc.ini"
        inv.write_text("[gpu]\n" + "\n".join([
            _host("gpu-good", static_bmc.url), _host("gpu-slow", slow),
            _host("gpu-huge", huge), _host("gpu-endless", endless)]) + "\n")
        gf.run("enroll", "-i", str(inv))

        t0 = time.monotonic()
        rows = {r["host"]: r for r in gf.json(
            "bmc", "status", "--deadline", str(DEADLINE), code=1)["hosts"]}
        took = time.monotonic() - t0
        assert took < DEADLINE + 6, f"bmc status took {took:.1f} s"
        assert rows["gpu-good"]["outcome"] == "ok" and rows["gpu-good"]["power_state"] == "On"
        assert rows["gpu-slow"]["outcome"] == "timeout"
        assert f"no complete answer within {DEADLINE:g} s" in rows["gpu-slow"]["reason"]
        assert rows["gpu-huge"]["outcome"] == "bad response"
        assert "announces 300000000 bytes in one answer, over the cap of 16777216" in (
            rows["gpu-huge"]["reason"])
        assert rows["gpu-endless"]["outcome"] == "bad response"
        assert "sent more than the cap of 16777216 bytes" in rows["gpu-endless"]["reason"]
        # every read kept with its outcome: nothing lost
        fleet = _fleet(gf, monkeypatch)
        try:
            kept = {n: [h["outcome"] for h in bmc_history(fleet, n)] for n in rows}
        finally:
            fleet.db.dispose()
        assert kept == {"gpu-good": ["ok"], "gpu-slow": ["timeout"],
                        "gpu-huge": ["bad response"], "gpu-endless": ["bad response"]}

        # the API, for a viewer: the same bound
        fleet = _fleet(gf, monkeypatch)
        try:
            app = create_app(fleet, TokenStore(write_tokens(tmp_path / "tokens.yaml")))
            with TestClient(app) as client:
                t0 = time.monotonic()
                r = client.get("/api/v1/bmc", headers=auth("viewer"),
                               params={"selector": "gpu-good,gpu-slow", "timeout_s": 2,
                                       "deadline_s": DEADLINE})
                took = time.monotonic() - t0
        finally:
            fleet.db.dispose()
        assert r.status_code == 200, r.text
        assert took < DEADLINE + 4, f"GET /api/v1/bmc took {took:.1f} s"
        got = {b["host"]: b["outcome"] for b in r.json()}
        assert got == {"gpu-good": "ok", "gpu-slow": "timeout"}


def test_a_deadline_out_of_range_is_refused(gf: Cli) -> None:
    for bad in ("1e300", "inf", "0", "-3"):
        r = gf.run("bmc", "status", "--deadline", bad, code=2)
        assert "--deadline must be" in r.stderr, r.stderr
