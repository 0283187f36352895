"""``gpufleet bmc power`` and ``gpufleet reimage`` against the real dynamic Redfish emulator
(sushy-emulator --fake, feature set full): the emulator's own state is read back to show the
power changed, the image was inserted and the one-time boot override set."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from pydantic import ValidationError
from tests.bmc.conftest import BMC_PASSWORD, BMC_USER
from tests.bmc.redfishlab import Emulator, free_port, get_json, serve_files, system_uuid
from tests.clitools import Cli, cli_for_backend, flat

from gpufleet.api.schemas import BaselineOut
from gpufleet.cli.main import app
from gpufleet.domain.spec import Baseline
from gpufleet.errors import ConfigError
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.baselines import get_baseline, save_baseline
from gpufleet.service.hosts.bmc import image_for
from gpufleet.store.db import Database

pytestmark = pytest.mark.xdist_group("redfish")
AUTH = (BMC_USER, BMC_PASSWORD)


@pytest.fixture(params=["sqlite", "postgres"])
def gf(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cli]:
    c = cli_for_backend(request, tmp_path, "bmc-power-test")
    c.env["GPUFLEET_SECRET_KEY"] = Fernet.generate_key().decode()
    c.env["GPUFLEET_SECRET_KEY_FILE"] = None
    c.env["GPUFLEET_BMC_PASSWORD"] = None
    c.env["GPUFLEET_BMC_SETTLE"] = "20"
    yield c


def _enroll(gf: Cli, name: str, em: Emulator, system: int) -> str:
    inv = gf.tmp / "p.ini"
    inv.write_text(f"[gpu]\n{name} ansible_host=127.0.0.1 ansible_port={free_port()} "
                   f"gpufleet_bmc_address={em.url} gpufleet_bmc_system={system_uuid(system)}\n")
    gf.run("enroll", "-i", str(inv))
    pw = gf.tmp / "bmc.pw"
    pw.write_text(BMC_PASSWORD + "\n")
    gf.run("bmc", "set", name, "--username", BMC_USER, "--password-file", str(pw))
    pw.unlink()  # sealed in the store now
    return f"{em.url}/redfish/v1/Systems/{system_uuid(system)}"


def _allocate(gf: Cli, name: str, state: str = "allocated") -> None:
    """Test setup: put the host in ``allocated`` (or ``state``) directly (the allocation and
    validation paths are tested elsewhere; here only what the BMC action does with it)."""
    url = (gf.global_args[gf.global_args.index("--db") + 1] if "--db" in gf.global_args
           else f"sqlite:///{gf.tmp / 'home' / 'gpufleet.db'}")
    db = Database(url)
    try:
        with db.engine.begin() as c:
            c.exec_driver_sql(f"UPDATE hosts SET state = '{state}' WHERE name = '{name}'")
    finally:
        db.dispose()


def test_power_actions_change_the_emulator_and_are_recorded(
    gf: Cli, dynamic_bmc: Emulator
) -> None:
    sysurl = _enroll(gf, "gpu-p", dynamic_bmc, 4)
    assert gf.json("bmc", "power", "on", "gpu-p", "--yes")["power_state"] == "On"
    no = gf.runner.invoke(app, [*gf.global_args, "bmc", "power", "off", "gpu-p"],
                          input="n\n", env=gf.env)
    assert no.exit_code == 1 and get_json(sysurl, AUTH)["PowerState"] == "On"
    off = gf.json("bmc", "power", "off", "gpu-p", "--yes")
    assert off["ok"] and off["power_state"] == "Off"
    assert get_json(sysurl, AUTH)["PowerState"] == "Off"
    for action in ("on", "cycle", "reset"):
        res = gf.json("bmc", "power", action, "gpu-p", "--yes")
        assert res["ok"] and res["power_state"] == "On", res
        assert get_json(sysurl, AUTH)["PowerState"] == "On"
    events = [e["message"] for e in gf.json("events", "--kind", "bmc")]
    assert {"power off: Off", "power on: On", "power cycle: On", "power reset: On"} <= set(events)

    _allocate(gf, "gpu-p")
    refused = gf.run("bmc", "power", "off", "gpu-p", "--yes", code=5)
    assert "allocated" in refused.stderr and get_json(sysurl, AUTH)["PowerState"] == "On"
    forced = gf.json("bmc", "power", "off", "gpu-p", "--yes", "--force")
    assert forced["ok"] and get_json(sysurl, AUTH)["PowerState"] == "Off"
    gf.run("reimage", "gpu-p", "--image", "http://127.0.0.1/x.iso", "--yes", code=5)
    text = json.dumps(gf.json("events")) + "".join(
        gf.run("hosts", "show", "gpu-p", "--json").stdout)
    assert BMC_PASSWORD not in text


def test_reimage_inserts_media_sets_one_time_boot_and_revalidates(
    gf: Cli, dynamic_bmc: Emulator, tmp_path: Path
) -> None:
    sysurl = _enroll(gf, "gpu-r", dynamic_bmc, 5)
    images = tmp_path / "images"
    images.mkdir()
    (images / "ubuntu-22.04-gpu.iso").write_bytes(b"\0" * 4096)
    (images / "ubuntu-24.04-gpu.iso").write_bytes(b"\0" * 4096)
    with serve_files(images) as base:
        first = gf.json("reimage", "gpu-r", "--image", f"{base}/ubuntu-22.04-gpu.iso", "--yes")
        assert first["ok"] and first["power_state"] == "On"
        cd = get_json(f"{dynamic_bmc.url}/redfish/v1/Systems/{system_uuid(5)}/VirtualMedia/Cd",
                      AUTH) if _system_vmedia(dynamic_bmc) else get_json(
            f"{dynamic_bmc.url}/redfish/v1/Managers/{system_uuid(5)}/VirtualMedia/Cd", AUTH)
        assert cd["Image"] == f"{base}/ubuntu-22.04-gpu.iso" and cd["Inserted"] is True
        boot = get_json(sysurl, AUTH)["Boot"]
        assert isinstance(boot, dict) and boot["BootSourceOverrideTarget"] == "Cd"
        # media already inserted: ejected first, with a note saying so
        second = gf.json("reimage", "gpu-r", "--image", f"{base}/ubuntu-24.04-gpu.iso", "--yes")
        assert second["ok"] and any("ejected" in n and "22.04" in n for n in second["notes"])
        assert any("hosts rekey" in n for n in second["notes"])
    kinds = [(e["kind"], e["message"]) for e in gf.json("events", "--limit", "50")]
    assert any(k == "change-declared" and "reimage" in m for k, m in kinds)
    assert any(k == "bmc" and m.startswith("reimage: ") for k, m in kinds)


def _system_vmedia(em: Emulator) -> bool:
    return "VirtualMedia" in get_json(f"{em.url}/redfish/v1/Systems/{system_uuid(5)}", AUTH)


def test_reimage_image_from_the_baseline(fleet: Fleet, tmp_path: Path) -> None:
    save_baseline(fleet, Baseline(name="b-url", os_image_url="http://repo/ubuntu.iso"))
    save_baseline(fleet, Baseline(name="b-none"))
    assert image_for(fleet, "any", None, "b-url") == "http://repo/ubuntu.iso"
    with pytest.raises(ConfigError, match="names no os_image_url"):
        image_for(fleet, "any", None, "b-none")
    with pytest.raises(ConfigError, match="http"):
        image_for(fleet, "any", "ftp://x/y.iso", None)
    # the API shows it beside the pins, not among them
    out = BaselineOut.of(get_baseline(fleet, "b-url"), [])
    assert out.os_image_url == "http://repo/ubuntu.iso" and "os_image_url" not in out.spec
    for bad in ("ftp://repo/x.iso", "http://", "/srv/x.iso"):
        with pytest.raises(ValidationError, match="http"):
            Baseline(name="b", os_image_url=bad)
    assert Baseline(name="b", os_image_url=" ").os_image_url is None


def test_reimage_baseline_names_the_image(
    gf: Cli, dynamic_bmc: Emulator, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # every log line at DEBUG, sushy's and urllib3's too (gpufleet quiets sushy to WARNING):
    # an operator turning logging up must see no credential either
    caplog.set_level(logging.DEBUG)
    for name in ("sushy", "urllib3", "gpufleet"):
        caplog.set_level(logging.DEBUG, logger=name)
    # the host's pool is mapped to the baseline whose os_image_url reimage inserts
    inv = gf.tmp / "b.ini"
    inv.write_text(f"[gpu]\ngpu-b ansible_host=127.0.0.1 ansible_port={free_port()} "
                   f"gpufleet_pool=imaging gpufleet_bmc_address={dynamic_bmc.url} "
                   f"gpufleet_bmc_system={system_uuid(6)}\n")
    gf.run("enroll", "-i", str(inv))
    pw = gf.tmp / "bmc.pw"
    pw.write_text(BMC_PASSWORD + "\n")
    gf.run("bmc", "set", "gpu-b", "--username", BMC_USER, "--password-file", str(pw))
    sysurl = f"{dynamic_bmc.url}/redfish/v1/Systems/{system_uuid(6)}"
    vmedia = f"{sysurl}/VirtualMedia/Cd" if "VirtualMedia" in get_json(sysurl, AUTH) else (
        f"{dynamic_bmc.url}/redfish/v1/Managers/{system_uuid(6)}/VirtualMedia/Cd")
    images = tmp_path / "images"
    images.mkdir()
    (images / "rocky-9-gpu.iso").write_bytes(b"\0" * 4096)
    (images / "ubuntu-24.04-gpu.iso").write_bytes(b"\0" * 4096)
    with serve_files(images) as base:
        rocky, ubuntu = f"{base}/rocky-9-gpu.iso", f"{base}/ubuntu-24.04-gpu.iso"
        gf.run("baseline", "create", "b-rocky", "--driver", "550.90.07", "--os-image-url", rocky)
        gf.run("baseline", "create", "b-ubuntu", "--os-image-url", ubuntu, "--pool", "imaging")
        gf.run("baseline", "create", "b-none", "--driver", "550.90.07")
        # stored on the baseline, shown by show and list (text and --json); not a pin
        shown = gf.json("baseline", "show", "b-rocky")
        assert shown["os_image_url"] == rocky and shown["driver"] == "550.90.07"
        listed = {b["name"]: b.get("os_image_url") for b in gf.json("baseline", "list")}
        assert listed == {"b-rocky": rocky, "b-ubuntu": ubuntu, "b-none": None}
        assert "rocky-9-gpu.iso" in flat(gf.run("baseline", "show", "b-rocky").stdout)
        assert "OS image" in gf.run("baseline", "list").stdout  # its column (80 wide: folded)
        diff = gf.json("baseline", "diff", "b-rocky", "b-none")
        assert {d["field"] for d in diff} == {"os_image_url"}
        bad = gf.run("baseline", "create", "b-bad", "--os-image-url", "ftp://x/y.iso", code=2)
        assert "b-bad" in bad.stderr and "http(s) URL" in bad.stderr
        assert "b-bad" not in {b["name"] for b in gf.json("baseline", "list")}

        # a baseline without an image: a clear error naming it, nothing inserted
        before = get_json(vmedia, AUTH)
        none = gf.run("reimage", "gpu-b", "--baseline", "b-none", "--yes", code=2)
        assert "baseline 'b-none' names no os_image_url" in flat(none.stderr)
        assert get_json(vmedia, AUTH).get("Image") == before.get("Image")

        # --baseline B: B's image is inserted and booted once
        _allocate(gf, "gpu-b", "available")  # as if validated
        res = gf.json("reimage", "gpu-b", "--baseline", "b-rocky", "--yes")
        assert res["ok"] and res["power_state"] == "On", res
        assert res["state"] == "validating" == gf.state("gpu-b")  # back to validation
        cd = get_json(vmedia, AUTH)
        assert cd["Image"] == rocky and cd["Inserted"] is True
        boot = get_json(sysurl, AUTH)["Boot"]
        # (sushy-emulator always reports BootSourceOverrideEnabled "Continuous": it ignores
        # the Once gpufleet sends, see its main.py; the target is what it keeps)
        assert isinstance(boot, dict) and boot["BootSourceOverrideTarget"] == "Cd"
        # no --baseline: the host's (its pool's) baseline
        res = gf.json("reimage", "gpu-b", "--yes")
        assert res["ok"] and get_json(vmedia, AUTH)["Image"] == ubuntu
    bmc_events = [e["message"] for e in gf.json("events", "--kind", "bmc")]
    assert any(m.startswith(f"reimage: {rocky} ") for m in bmc_events), bmc_events
    assert any(m.startswith(f"reimage: {ubuntu} ") for m in bmc_events), bmc_events
    assert gf.json("bmc", "status", "gpu-b")["hosts"][0]["outcome"] == "ok"
    # the log saw the Redfish traffic, and no credential in clear or as a basic-auth header
    assert "HTTP request: POST" in caplog.text and "VirtualMedia" in caplog.text
    basic = base64.b64encode(f"{BMC_USER}:{BMC_PASSWORD}".encode()).decode()
    assert BMC_PASSWORD not in caplog.text and basic not in caplog.text
