"""The BMC never acts on the wrong machine (issue 24, item 7), against the real sushy-tools
dynamic emulator on SQLite and PostgreSQL: while the host's ``bmc-identity`` alarm is open,
``bmc power cycle``, ``reimage`` and a ``--reimage`` campaign are refused (exit 5, the alarm
named) and the emulator is untouched; ``--override-identity --reason`` lets power through and
is recorded. Fails on 84be469 (the power cycle and the reimage went through)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from tests.bmc.conftest import BMC_PASSWORD, BMC_USER
from tests.bmc.redfishlab import Emulator, free_port, get_json, system_uuid
from tests.clitools import Cli, cli_for_backend, flat

from gpufleet.store.db import Database

pytestmark = pytest.mark.xdist_group("redfish")
AUTH = (BMC_USER, BMC_PASSWORD)
SYSTEM = 2
WRONG_UUID = "11111111-2222-3333-4444-555555555555"


@pytest.fixture(params=["sqlite", "postgres"])
def gf(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cli]:
    c = cli_for_backend(request, tmp_path, "bmc-guard-test")
    c.env["GPUFLEET_SECRET_KEY"] = Fernet.generate_key().decode()
    c.env["GPUFLEET_SECRET_KEY_FILE"] = None
    c.env["GPUFLEET_BMC_PASSWORD"] = None
    c.env["GPUFLEET_BMC_SETTLE"] = "20"
    yield c


def _set_state(gf: Cli, name: str, state: str) -> None:
    """Test setup: put the host in ``state`` directly (validation is tested elsewhere)."""
    url = (gf.global_args[gf.global_args.index("--db") + 1] if "--db" in gf.global_args
           else f"sqlite:///{gf.tmp / 'home' / 'gpufleet.db'}")
    db = Database(url)
    try:
        with db.engine.begin() as c:
            c.exec_driver_sql(f"UPDATE hosts SET state = '{state}' WHERE name = '{name}'")
    finally:
        db.dispose()


def test_identity_alarm_blocks_power_and_reimage_unless_overridden(
    gf: Cli, dynamic_bmc: Emulator
) -> None:
    inv = gf.tmp / "g.ini"
    inv.write_text(f"[gpu]\ngpu-x ansible_host=127.0.0.1 ansible_port={free_port()} "
                   f"gpufleet_bmc_address={dynamic_bmc.url} "
                   f"gpufleet_bmc_system={system_uuid(SYSTEM)} gpufleet_bmc_uuid={WRONG_UUID}\n")
    gf.run("enroll", "-i", str(inv))
    pw = gf.tmp / "bmc.pw"
    pw.write_text(BMC_PASSWORD + "\n")
    gf.run("bmc", "set", "gpu-x", "--username", BMC_USER, "--password-file", str(pw))
    pw.unlink()
    sysurl = f"{dynamic_bmc.url}/redfish/v1/Systems/{system_uuid(SYSTEM)}"
    gf.run("bmc", "power", "on", "gpu-x", "--yes")  # no alarm yet: allowed
    (row,) = gf.json("bmc", "status", "gpu-x")["hosts"]
    assert any(a.startswith("bmc-identity") for a in row["alarms"]), row

    # refused, exit 5, the alarm named; the emulator untouched
    before = get_json(sysurl, AUTH)
    r = gf.run("bmc", "power", "cycle", "gpu-x", "--yes", code=5)
    out = flat(r.stdout + r.stderr)
    assert "refused: open bmc-identity alarm" in out and WRONG_UUID in out, out
    assert "--override-identity" in out
    r = gf.run("bmc", "power", "off", "gpu-x", "--yes", code=5)
    assert get_json(sysurl, AUTH)["PowerState"] == before["PowerState"] == "On"
    r = gf.run("reimage", "gpu-x", "--image", "http://127.0.0.1:9/x.iso", "--yes", code=5)
    assert "reimage through its BMC refused" in flat(r.stdout + r.stderr)
    boot = get_json(sysurl, AUTH).get("Boot", {})
    assert boot.get("BootSourceOverrideTarget") == before.get("Boot", {}).get(
        "BootSourceOverrideTarget")

    # a campaign's reimage step fails the host with the same refusal
    gf.run("baseline", "create", "b-img", "--driver", "570.86.15",
           "--os-image-url", "http://127.0.0.1:9/x.iso")
    _set_state(gf, "gpu-x", "available")  # as if validated
    gf.json("campaign", "create", "re1", "--target-baseline", "b-img", "--selector", "gpu-x",
            "--reimage", "--ticket", "RE-9", "--waves", "100%", "--change-kind", "reimage")
    gf.run("campaign", "run", "re1", "--json", code=1)
    out = gf.json("campaign", "report", "re1")
    assert out["status"] == "halted"
    host = out["waves"][0]["hosts"][0]
    assert host["step"] == "failed"
    assert "reimage through its BMC refused: open bmc-identity alarm" in host["reason"], host
    assert not [e for e in gf.json("events", "--kind", "bmc")
                if e["message"].startswith("reimage:")]

    # an override needs a reason; with one, the action goes through and is recorded
    gf.run("bmc", "power", "off", "gpu-x", "--yes", "--override-identity", code=2)
    gf.run("bmc", "power", "off", "gpu-x", "--yes", "--reason", "x", code=2)
    res = gf.json("bmc", "power", "off", "gpu-x", "--yes", "--override-identity",
                  "--reason", "checked the cable myself, OPS-9")
    assert res["ok"] and get_json(sysurl, AUTH)["PowerState"] == "Off"
    events = gf.json("events", "gpu-x", "--limit", "50")
    overrides = [e for e in events if (e.get("data") or {}).get("action") == "override-identity"]
    assert len(overrides) == 1, json.dumps(events)[:2000]
    assert overrides[0]["data"]["reason"] == "checked the cable myself, OPS-9"
    assert overrides[0]["data"]["for"] == "power off"
    assert "despite open bmc-identity alarm" in overrides[0]["message"]
