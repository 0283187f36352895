"""``gpufleet bmc status`` against real sushy-tools emulators on loopback, on SQLite and
PostgreSQL: identity, power, health, GPU processors and SEL from the DMTF public-tower mockup;
cross-checks (identity mismatch, health Critical, new critical SEL entries); refused
credentials, a BMC that is down, one that hangs and one that answers garbage, each reported
for its host while the others are read; no credential in clear anywhere."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from tests.bmc.conftest import BMC_PASSWORD, BMC_USER
from tests.bmc.redfishlab import Emulator, free_port, silent_port, system_uuid
from tests.clitools import Cli, cli_for_backend

from gpufleet.store.db import Database

pytestmark = pytest.mark.xdist_group("redfish")

TOWER_SERIAL = "437XR1238R2"
TOWER_UUID = "38947555-7742-3448-3784-823347823834"


@pytest.fixture(params=["sqlite", "postgres"])
def gf(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cli]:
    c = cli_for_backend(request, tmp_path, "bmc-test")
    c.env["GPUFLEET_SECRET_KEY"] = Fernet.generate_key().decode()
    c.env["GPUFLEET_SECRET_KEY_FILE"] = None
    c.env["GPUFLEET_BMC_PASSWORD"] = None
    c.env["GPUFLEET_BMC_TIMEOUT"] = "2"
    yield c


def _db_dump(gf: Cli) -> str:
    """Every row of every table, as text (what a leaked credential would be found in)."""
    url = (gf.global_args[gf.global_args.index("--db") + 1] if "--db" in gf.global_args
           else f"sqlite:///{gf.tmp / 'home' / 'gpufleet.db'}")
    db = Database(url)
    out = []
    try:
        with db.engine.connect() as c:
            for t in ("hosts", "events", "alarms", "bmc_reads"):
                out += [str(tuple(r)) for r in c.exec_driver_sql(f"SELECT * FROM {t}").all()]
    finally:
        db.dispose()
    return "\n".join(out)


def _inventory(gf: Cli, lines: list[str]) -> Path:
    p = gf.tmp / "bmc.ini"
    p.write_text("[gpu]\n" + "\n".join(lines) + "\n")
    return p


def _host(name: str, url: str, *, password: str = BMC_PASSWORD, extra: str = "") -> str:
    # Each host its own SSH port, where nothing listens (its OS is "down").
    return (f"{name} ansible_host=127.0.0.1 ansible_port={free_port()} "
            f"gpufleet_bmc_address={url} "
            f"gpufleet_bmc_username={BMC_USER} gpufleet_bmc_password={password} {extra}").strip()


def test_status_reads_crosschecks_and_isolates_broken_bmcs(
    gf: Cli, static_bmc: Emulator, critical_bmc: Emulator, garbage_bmc: Emulator,
    dynamic_bmc: Emulator,
) -> None:
    down = f"http://127.0.0.1:{free_port()}"  # nothing listens there: a BMC that is down
    with silent_port() as hung:
        inv = _inventory(gf, [
            _host("gpu-01", static_bmc.url, extra=f"gpufleet_bmc_serial={TOWER_SERIAL}"),
            _host("gpu-07", static_bmc.url, extra="gpufleet_bmc_serial=SN-GPU07-EXPECTED"),
            _host("gpu-crit", critical_bmc.url),
            _host("gpu-garbage", garbage_bmc.url),
            _host("gpu-down", down),
            _host("gpu-hung", f"http://127.0.0.1:{hung}"),
            _host("gpu-dyn", dynamic_bmc.url, extra=f"gpufleet_bmc_system={system_uuid(1)}"),
            _host("gpu-wrongpw", dynamic_bmc.url, password="not-the-password",
                  extra=f"gpufleet_bmc_system={system_uuid(2)}"),
            f"gpu-nobmc ansible_host=127.0.0.1 ansible_port={free_port()}",
        ])
        outputs = [gf.run("enroll", "-i", str(inv))]
        first = gf.run("bmc", "status", "--json", code=1)
        outputs.append(first)
    rows = {r["host"]: r for r in json.loads(first.stdout)["hosts"]}
    ok = rows["gpu-01"]
    assert ok["outcome"] == "ok" and ok["power_state"] == "On" and ok["health"] == "OK"
    assert ok["identity"] == {"manufacturer": "Contoso", "model": "3500", "serial": TOWER_SERIAL,
                              "uuid": TOWER_UUID, "bios_version": "P79 v1.95 (12/06/2019)"}
    assert [(g["id"], g["model"]) for g in ok["gpus"]] == [
        ("GPU1", "Nvidia(R) TU102"), ("GPU2", "Nvidia(R) TU102")]
    assert [e["severity"] for e in ok["sel_new"]] == ["Critical", "Critical"]
    assert ok["sel_source"] == "System:437XR1238R2:Log1"
    assert any(a.startswith("bmc-sel:") for a in ok["alarms"])
    assert not any(a.startswith("bmc-identity") for a in ok["alarms"])
    # identity mismatch: the inventory's serial is not the BMC's
    mism = [a for a in rows["gpu-07"]["alarms"] if a.startswith("bmc-identity")]
    assert mism and "SN-GPU07-EXPECTED" in mism[0] and TOWER_SERIAL in mism[0]
    assert "wrong cable or wrong inventory" in mism[0]
    assert any(a.startswith("bmc-health") and "Critical" in a for a in rows["gpu-crit"]["alarms"])
    # broken BMCs: a clear reason each, the others still read
    assert rows["gpu-garbage"]["outcome"] == "bad response"
    assert "not a Redfish answer" in rows["gpu-garbage"]["reason"]
    assert rows["gpu-down"]["outcome"] == "unreachable"
    assert rows["gpu-hung"]["outcome"] == "timeout"
    assert rows["gpu-wrongpw"]["outcome"] == "auth failed"
    assert "refused the credentials of user 'fleetadmin'" in rows["gpu-wrongpw"]["reason"]
    assert rows["gpu-nobmc"]["outcome"] == "not configured"
    dyn = rows["gpu-dyn"]
    assert dyn["outcome"] == "ok" and dyn["identity"]["uuid"] == system_uuid(1)
    assert dyn["gpus"] is None  # the fake driver has no Processors: not said, not "none"

    # A second read: nothing new in the SEL, the SEL alarm stays open (never cleared by
    # silence); the operator's acknowledgement closes it, audited.
    second = gf.json("bmc", "status", "gpu-01", code=0)["hosts"][0]
    assert second["sel_new"] == [] and second["alarms"] == []
    alarms = gf.json("hosts", "show", "gpu-01")["alarms"]
    assert [a["kind"] for a in alarms] == ["bmc-sel"]
    outputs.append(gf.run("bmc", "sel-ack", "gpu-01", "--reason", "fan replaced, ticket 42"))
    assert gf.json("hosts", "show", "gpu-01")["alarms"] == []
    events = gf.json("events", "--kind", "bmc")
    assert any("fan replaced" in e["message"] for e in events)

    # No credential in clear: outputs, events, the database.
    outputs += [gf.run("bmc", "status", code=1), gf.run("events", "--json"),
                gf.run("hosts", "show", "gpu-wrongpw", "--json")]
    text = " ".join(r.stdout + r.stderr for r in outputs) + _db_dump(gf)
    assert BMC_PASSWORD not in text and "not-the-password" not in text
    assert "fernet:" in _db_dump(gf)


def test_ssh_down_is_told_apart_by_what_the_bmc_says(
    gf: Cli, static_bmc: Emulator, dynamic_bmc: Emulator
) -> None:
    inv = _inventory(gf, [
        _host("gpu-on", static_bmc.url),
        _host("gpu-off", dynamic_bmc.url, extra=f"gpufleet_bmc_system={system_uuid(3)}"),
        _host("gpu-gone", f"http://127.0.0.1:{free_port()}"),
    ])
    gf.run("enroll", "-i", str(inv))
    # The collection over SSH fails for all three (nothing listens on their SSH port).
    gf.run("collect", "--timeout", "3", code=1)
    gf.run("bmc", "power", "off", "gpu-off", "--yes")
    rows = {r["host"]: r for r in gf.json("bmc", "status", code=1)["hosts"]}
    assert rows["gpu-on"]["ssh"] == "unreachable"
    assert "BMC says On, health OK" in rows["gpu-on"]["diagnosis"]
    assert "power Off" in rows["gpu-off"]["diagnosis"]
    assert "BMC unreachable" in rows["gpu-gone"]["diagnosis"]
