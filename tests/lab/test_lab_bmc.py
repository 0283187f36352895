"""``gpufleet lab create --bmc`` and campaigns on the lab (issue 29 item 7), SQLite and
PostgreSQL, through the CLI: one real sushy-tools Redfish emulator serves a system per lab host,
wired into the inventory (address, system, user, a password FILE: the password itself is in no
inventory, output or event); ``bmc status`` reads every host (On, OK, the identity the host
reports in-band); a power off cuts the host's SSH and a power on boots it; a host whose sshd
is down is brought back by ``remediate --action reboot`` through the BMC rung; a campaign
with a command of its own runs on the lab hosts to completion (before: "lab host cannot run
'true'", the campaign halted); ``lab destroy`` stops the emulator and removes the lab.
Fails on c5932df (no --bmc, no sshd-down, no lab destroy)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.clitools import Cli, cli_for_backend, flat

from gpufleet.lab.bmc import PID_FILE, stop_bmc


@pytest.fixture(params=["sqlite", "postgres"])
def gf(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cli]:
    c = cli_for_backend(request, tmp_path, "alice")
    lab = tmp_path / "lab"
    try:
        yield c
    finally:
        stop_bmc(lab)  # the test's `lab destroy` may not have run


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text(
    ).split()[2]


def test_lab_bmc_power_remediation_and_a_campaign(gf: Cli) -> None:
    lab = gf.tmp / "lab"
    out = gf.run("lab", "create", "--hosts", "3", "--model", "a100-8x", "--bmc",
                 "--no-default-faults", "--dir", str(lab)).stdout  # fmt: skip
    password = (lab / "bmc" / "password").read_text().strip()
    assert oct((lab / "bmc" / "password").stat().st_mode & 0o777) == "0o600"
    pid = int((lab / "bmc" / PID_FILE).read_text())
    inventory = (lab / "inventory.ini").read_text()
    assert password not in inventory and password not in out
    assert inventory.count("gpufleet_bmc_password_file=") == 3
    assert inventory.count("gpufleet_bmc_address=http://127.0.0.1:") == 3
    gf.run("enroll", "-i", str(lab / "inventory.ini"))
    gf.run("collect")
    gf.run("validate")

    reads = gf.json("bmc", "status")["hosts"]
    assert sorted(r["host"] for r in reads) == ["gpu-01", "gpu-02", "gpu-03"], reads
    assert {(r["outcome"], r["power_state"], r["health"]) for r in reads} == {("ok", "On", "OK")}
    assert gf.json("alarms", "list") == []  # the same machine in-band and out of band

    # power off: the host has no route for SSH; power on: it boots and answers
    gf.run("bmc", "power", "off", "gpu-03", "--yes")
    r = gf.run("collect", "gpu-03", code=1)
    assert "No route to host" in flat(r.stdout)
    gf.run("bmc", "power", "on", "gpu-03", "--yes")
    gf.run("collect", "gpu-03")

    # sshd down: the in-band reboot cannot run, the BMC power-cycles, the host boots
    gf.run("lab", "change", "gpu-02", "--add-fault", "sshd-down", "--dir", str(lab))
    gf.run("collect", "gpu-02", code=1)
    r = gf.run("remediate", "gpu-02", "--action", "reboot")
    text = flat(r.stdout)
    assert "gpu-02: reboot failed: unreachable" in text
    assert "power-cycle ok" in text and "the host answers again" in text
    gf.run("collect", "gpu-02")
    assert gf.state("gpu-02") == "validating"
    gf.run("validate", "gpu-02")
    assert gf.state("gpu-02") == "available"

    # a campaign whose action is a command of its own runs on the lab hosts
    gf.run("baseline", "create", "a100-lab", "--from-host", "gpu-01", "--pool", "train-a100")
    gf.run("campaign", "create", "relabel", "--target-baseline", "a100-lab", "--selector",
           "pool:train-a100", "--command", "echo ok > campaign-ran", "--ticket", "T-29",
           "--waves", "100%")  # fmt: skip
    r = gf.run("campaign", "run", "relabel")
    assert "halted" not in r.stdout and "cannot run" not in r.stdout, r.stdout
    assert gf.json("campaign", "status", "relabel")["status"] == "completed"
    for n in ("gpu-01", "gpu-02", "gpu-03"):
        assert (lab / "hosts" / n / "campaign-ran").read_text() == "ok\n"

    # a playbook cannot reach a lab host: each fails at once, saying why (no Ansible run)
    gf.run("campaign", "create", "pb", "--target-baseline", "a100-lab", "--selector", "gpu-01",
           "--playbook", "system-init.yml", "--ticket", "T-29", "--canary", "0")  # fmt: skip
    r = gf.run("campaign", "run", "pb")  # one failure is within --max-failures 1
    assert "transport 'sim': Ansible reaches hosts over SSH only" in flat(r.stdout), r.stdout

    everything = "".join(gf.run(*c).stdout for c in (
        ("events", "--limit", "500", "--json"), ("hosts", "show", "gpu-02", "--json"),
        ("bmc", "status", "gpu-02", "--json")))
    assert password not in everything

    r = gf.run("lab", "destroy", "--dir", str(lab))
    assert "BMC emulator stopped" in flat(r.stdout)
    assert not lab.exists() and not _alive(pid)
    gf.run("lab", "destroy", "--dir", str(lab), code=2)  # no lab there any more
