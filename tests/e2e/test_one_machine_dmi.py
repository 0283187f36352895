"""One machine, one host, told by the DMI system UUID (issue 6 + in-band DMI), on real sshd lab
hosts and both databases: two names whose GPUs differ (a GPU board swapped between the two
collections, or a host without GPUs) but whose OS reports the same ``product_uuid`` are one
machine: the later name is flagged and not counted. A placeholder UUID (unprogrammed AMI board)
proves nothing. The DMI sections are the lab renderer's, EDITED to share one UUID."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.sshlab_fixtures import SshLabFactory

from gpufleet.collect.bundle import Section
from gpufleet.inventory import load_inventory
from gpufleet.lab.fleet import create_fleet
from gpufleet.lab.renderers import render_sections
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.enroll import enroll
from gpufleet.service.hosts.validate import validate
from gpufleet.service.views.hosts import show_host

pytestmark = pytest.mark.sshlab

SAME = "4c4c4544-0042-3510-8051-b4c04f4d4433"
PLACEHOLDER = "03000200-0400-0500-0006-000700080009"


def _with_uuid(sections: dict[str, Section], uuid: str) -> dict[str, Section]:
    out = dict(sections)
    out["dmi"] = Section("dmi", f"sys_vendor=NVIDIA\nproduct_name=DGXH100\nproduct_uuid={uuid}",
                         "", 0)
    return out


def test_same_system_uuid_under_two_names_is_flagged(
    fleet: Fleet, sshlab_factory: SshLabFactory, tmp_path: Path
) -> None:
    lf = create_fleet(4, models=["h100-8x"], faults={})
    a, b, c, d = (dict(render_sections(h)) for h in lf.hosts)
    lab = sshlab_factory()
    targets = {
        "node-a": lab.add_host("node-a", _with_uuid(a, SAME)),
        "node-a-alias": lab.add_host("node-a-alias", _with_uuid(b, SAME.upper())),
        "node-p": lab.add_host("node-p", _with_uuid(c, PLACEHOLDER)),
        "node-q": lab.add_host("node-q", _with_uuid(d, PLACEHOLDER)),
    }
    lab.start()
    lines = ["[gpu]"] + [
        f"{n} ansible_host={t.address} ansible_port={t.port} ansible_user={t.user}"
        for n, t in targets.items()
    ]
    lines += ["", "[gpu:vars]", f"ansible_ssh_private_key_file={lab.client_key}",
              "gpufleet_gpu_count=8"]
    (tmp_path / "hosts.ini").write_text("\n".join(lines) + "\n")
    enroll(fleet, load_inventory(tmp_path / "hosts.ini"))

    by = {v.host: v for v in validate(fleet).verdicts}
    assert by["node-a"].state == "available"
    assert by["node-a-alias"].state == "validating"
    assert by["node-a-alias"].reasons[0].startswith(
        f"same machine as host node-a (same system UUID: {SAME.upper()})")
    alias = show_host(fleet, "node-a-alias")
    [alarm] = [e for e in alias.events if e["kind"] == "alarm"]
    assert alarm["data"] == {"duplicate_of": "node-a", "system_uuid": SAME.upper()}
    # The placeholder UUID two boards share identifies nothing.
    assert by["node-p"].state == "available" and by["node-q"].state == "available"
