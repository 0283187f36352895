"""A ``--reimage`` campaign against the real sushy-tools dynamic emulator: the host goes to
maintenance with the campaign's reason, the target baseline's ``os_image_url`` is inserted
as virtual media (the emulator's state shows it) and the host is sent back to validation.
The host has no SSH endpoint here (its address is a closed loopback port), so it cannot
re-collect: the campaign records that (the canary fails, the campaign halts) and never
judges the host on its pre-reimage facts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from tests.bmc.conftest import BMC_PASSWORD, BMC_USER
from tests.bmc.redfishlab import Emulator, free_port, get_json, serve_files, system_uuid
from tests.bmc.test_bmc_power import _allocate
from tests.clitools import Cli, cli_for_backend, flat

pytestmark = pytest.mark.xdist_group("redfish")

AUTH = (BMC_USER, BMC_PASSWORD)
SYSTEM = 3


@pytest.fixture(params=["sqlite", "postgres"])
def gf(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cli]:
    c = cli_for_backend(request, tmp_path, "campaign-reimage-test")
    c.env["GPUFLEET_SECRET_KEY"] = Fernet.generate_key().decode()
    c.env["GPUFLEET_SECRET_KEY_FILE"] = None
    c.env["GPUFLEET_BMC_PASSWORD"] = None
    c.env["GPUFLEET_BMC_SETTLE"] = "20"
    yield c


def test_reimage_campaign_inserts_the_target_image_and_sends_the_host_to_validation(
    gf: Cli, dynamic_bmc: Emulator, tmp_path: Path
) -> None:
    inv = gf.tmp / "r.ini"
    inv.write_text(f"[gpu]\ngpu-m ansible_host=127.0.0.1 ansible_port={free_port()} "
                   f"gpufleet_pool=imaging gpufleet_bmc_address={dynamic_bmc.url} "
                   f"gpufleet_bmc_system={system_uuid(SYSTEM)}\n")
    gf.run("enroll", "-i", str(inv))
    pw = gf.tmp / "bmc.pw"
    pw.write_text(BMC_PASSWORD + "\n")
    gf.run("bmc", "set", "gpu-m", "--username", BMC_USER, "--password-file", str(pw))
    pw.unlink()
    sysurl = f"{dynamic_bmc.url}/redfish/v1/Systems/{system_uuid(SYSTEM)}"
    vmedia = f"{sysurl}/VirtualMedia/Cd" if "VirtualMedia" in get_json(sysurl, AUTH) else (
        f"{dynamic_bmc.url}/redfish/v1/Managers/{system_uuid(SYSTEM)}/VirtualMedia/Cd")
    images = tmp_path / "images"
    images.mkdir()
    (images / "rocky-9.4-gpu-570.iso").write_bytes(b"\0" * 4096)
    with serve_files(images) as base:
        url = f"{base}/rocky-9.4-gpu-570.iso"
        gf.run("baseline", "create", "b-img", "--driver", "570.86.15", "--os-image-url", url)
        _allocate(gf, "gpu-m", "available")  # as if validated
        plan = gf.json("campaign", "create", "re1", "--target-baseline", "b-img",
                       "--selector", "gpu-m", "--reimage", "--ticket", "RE-7",
                       "--waves", "100%", "--change-kind", "reimage")
        assert plan["action"]["kind"] == "reimage"
        assert [h["host"] for h in plan["waves"][0]["hosts"]] == ["gpu-m"]
        assert get_json(vmedia, AUTH).get("Image") != url
        run = gf.run("campaign", "run", "re1", "--json", code=1)  # halted: see below
    out = gf.json("campaign", "report", "re1")
    # the emulator: the target baseline's image inserted, the host set to boot from it
    cd = get_json(vmedia, AUTH)
    assert cd["Image"] == url and cd["Inserted"] is True
    boot = get_json(sysurl, AUTH)["Boot"]
    assert isinstance(boot, dict) and boot["BootSourceOverrideTarget"] == "Cd"
    # the host went to maintenance with the campaign's reason, then back to validation
    events = gf.json("events", "gpu-m", "--limit", "200")[::-1]  # oldest first
    moves = [(e["data"]["from"], e["data"]["to"], e["data"].get("ticket"))
             for e in events if e["kind"] == "transition"]
    assert ("available", "maintenance", "RE-7") in moves, moves
    assert ("maintenance", "validating", "RE-7") in moves, moves
    into = next(e for e in events if e["kind"] == "transition"
                and e["data"]["to"] == "maintenance")
    assert into["data"]["reason"] == "campaign re1 (RE-7)"
    # maintenance, then the BMC reimage, then the change with the ticket, then validation
    msgs = [e["message"] for e in events]
    reimaged = next(i for i, m in enumerate(msgs) if m.startswith(f"reimage: {url} "))
    change = msgs.index("reimage by RE-7 (campaign re1): reimaged by virtual media")
    back = next(i for i, e in enumerate(events) if e["kind"] == "transition"
                and e["data"]["to"] == "validating")
    assert events.index(into) < reimaged < change < back, msgs
    # every change the campaign made to the host carries the ticket (Deliver 4): the BMC
    # action, the reimage change the BMC recorded, the key cleared, the moves, the baseline
    changes = [e for e in events[events.index(into):] if e["kind"] in (
        "transition", "change-declared", "bmc", "host-key-rekeyed", "updated")]
    assert {e["kind"] for e in changes} == {
        "transition", "change-declared", "bmc", "host-key-rekeyed", "updated"}, changes
    untagged = [(e["kind"], e["message"]) for e in changes if e["data"].get("ticket") != "RE-7"]
    assert not untagged, untagged
    declared = [e["message"] for e in changes if e["kind"] == "change-declared"]
    assert f"reimage declared (ticket RE-7): by virtual media: {url}" in declared, declared
    bmc = [e["message"] for e in gf.json("events", "--kind", "bmc")]
    assert any(m.startswith(f"reimage: {url} ") for m in bmc), bmc
    # it cannot re-collect here: the campaign records it and halts after the canary
    assert out["status"] == "halted", flat(run.stdout)
    host = out["waves"][0]["hosts"][0]
    assert host["step"] == "failed" and host["action_runs"] == 1
    assert "no fresh facts" in (host["reason"] or ""), host
    # never returned to service on its pre-reimage facts: it waits in validation
    assert gf.state("gpu-m") == "validating"
