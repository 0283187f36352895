"""The BMC identity cross-check against the in-band DMI identity, on SQLite and PostgreSQL: a
real sshd lab host answers the real collection script with a DMI serial/UUID, the real
sushy-static emulator serves the unedited DMTF public-tower mockup (serial 437XR1238R2). A DMI
serial that differs from the BMC's opens ``bmc-identity`` ("inventory says gpu-07, the BMC at
that address is serial X: wrong cable or wrong inventory"); once the host reports the BMC's
serial/UUID in-band, the next read closes it. The DMI values are LAB values (the lab
renderer's), and for the match the lab's ``dmi`` section is EDITED to the mockup's serial/UUID."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.bmc.conftest import BMC_PASSWORD, BMC_USER
from tests.bmc.redfishlab import Emulator
from tests.sshlab_fixtures import SshLabFactory

from gpufleet.collect.bundle import Section
from gpufleet.domain.bmc import BmcIdentity, BmcReading, InBand, identity_findings
from gpufleet.inventory import load_inventory
from gpufleet.lab.fleet import LabHost
from gpufleet.lab.renderers import render_sections
from gpufleet.lab.templates import system_identity
from gpufleet.service.core.alarms import list_alarms
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.bmc import bmc_status
from gpufleet.service.hosts.collect import collect
from gpufleet.service.hosts.enroll import enroll

pytestmark = [pytest.mark.sshlab, pytest.mark.xdist_group("redfish")]

TOWER_SERIAL = "437XR1238R2"
TOWER_UUID = "38947555-7742-3448-3784-823347823834"


def test_dmi_serial_differing_from_the_bmc_opens_and_matching_closes(
    fleet: Fleet, sshlab_factory: SshLabFactory, static_bmc: Emulator, tmp_path: Path
) -> None:
    host = LabHost(name="gpu-07", model="h100-8x", serial_salt=7)
    lab_serial = system_identity(host)["product_serial"]
    lab = sshlab_factory()
    t = lab.add_host("gpu-07", render_sections(host))
    lab.start()
    pw = tmp_path / "bmc.pw"
    pw.write_text(BMC_PASSWORD + "\n")
    (tmp_path / "hosts.ini").write_text(
        "[gpu]\n"
        f"gpu-07 ansible_host={t.address} ansible_port={t.port} ansible_user={t.user} "
        f"ansible_ssh_private_key_file={lab.client_key} gpufleet_bmc_address={static_bmc.url} "
        f"gpufleet_bmc_username={BMC_USER} gpufleet_bmc_password_file={pw}\n"
    )
    enroll(fleet, load_inventory(tmp_path / "hosts.ini"))
    collect(fleet, "gpu-07")

    [st] = bmc_status(fleet, "gpu-07")
    assert st.outcome == "ok", st.reason
    [alarm] = [a for a in st.alarms if a.startswith("bmc-identity")]
    assert f"inventory says gpu-07, the BMC at that address is serial {TOWER_SERIAL}" in alarm
    assert f"the host reports DMI serial {lab_serial} in-band, the BMC says {TOWER_SERIAL}" in alarm
    assert "wrong cable or wrong inventory" in alarm
    assert [a.kind for a in list_alarms(fleet, "gpu-07") if a.kind == "bmc-identity"]

    # The host now reports the BMC's machine in-band (EDITED lab dmi section): the alarm closes.
    fixed = dict(render_sections(host))
    fixed["dmi"] = Section(
        "dmi", f"sys_vendor=Contoso\nproduct_name=3500\nproduct_serial={TOWER_SERIAL}\n"
        f"product_uuid={TOWER_UUID}", "", 0)
    lab.set_sections("gpu-07", fixed)
    collect(fleet, "gpu-07")
    [st] = bmc_status(fleet, "gpu-07")
    assert st.outcome == "ok" and not [a for a in st.alarms if a.startswith("bmc-identity")]
    assert not [a for a in list_alarms(fleet, "gpu-07") if a.kind == "bmc-identity"]


def _reading(serial: str | None, uuid: str | None) -> BmcReading:
    return BmcReading(system_id="1", identity=BmcIdentity(serial=serial, uuid=uuid))


def test_dmi_cross_check_pure() -> None:
    got = _reading(TOWER_SERIAL, TOWER_UUID)
    ok = identity_findings("gpu-01", got, InBand(dmi_serial="437xr1238r2", dmi_uuid=TOWER_UUID))
    assert [f.open for f in ok] == [False]
    bad = identity_findings("gpu-07", got, InBand(dmi_uuid="11111111-2222-3333-4444-555555555555"))
    assert bad[0].open and "DMI UUID 11111111-2222-3333-4444-555555555555" in bad[0].message
    # SMBIOS < 2.6 byte order of the first three fields: the same machine.
    swapped = "55759438-4277-4834-3784-823347823834"
    assert not identity_findings("h", got, InBand(dmi_uuid=swapped))[0].open
    # A placeholder or unread DMI serial is no evidence either way: no mismatch.
    for blank in ("To Be Filled By O.E.M.", None, "0000000000"):
        assert not identity_findings("h", got, InBand(dmi_serial=blank))[0].open
    # Nothing known on the BMC side: not compared.
    assert not identity_findings("h", _reading(None, None), InBand(dmi_serial="X"))[0].open
