"""One machine, one host (A.7), on real sshd lab hosts and both databases: the same machine
enrolled under two names (two sshd hosts answering with the same GPU UUIDs) is flagged on the
later name, with an alarm and a status reason, and never validates to ``available`` while the
duplicate stands."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.sshlab_fixtures import SshLabFactory

from gpufleet.inventory import load_inventory
from gpufleet.lab.fleet import create_fleet
from gpufleet.lab.renderers import render_sections
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts import operations
from gpufleet.service.hosts.enroll import enroll
from gpufleet.service.hosts.validate import validate
from gpufleet.service.views.hosts import show_host

pytestmark = pytest.mark.sshlab


def test_same_machine_under_two_names_is_flagged_and_not_counted_twice(
    fleet: Fleet, sshlab_factory: SshLabFactory, tmp_path: Path
) -> None:
    lf = create_fleet(2, models=["h100-8x"], faults={})
    machine, other = lf.hosts
    lab = sshlab_factory()
    # node-a and node-a-alias answer with one machine's facts (same GPU UUIDs); node-b differs.
    targets = {
        "node-a": lab.add_host("node-a", render_sections(machine)),
        "node-b": lab.add_host("node-b", render_sections(other)),
        "node-a-alias": lab.add_host("node-a-alias", render_sections(machine)),
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
    assert by["node-a"].state == "available" and by["node-b"].state == "available"
    assert by["node-a-alias"].state == "validating"
    assert "same machine as host node-a" in by["node-a-alias"].reasons[0]
    alias = show_host(fleet, "node-a-alias")
    assert alias.view.status_reason and "same machine as host node-a" in alias.view.status_reason
    alarms = [e for e in alias.events if e["kind"] == "alarm"]
    assert len(alarms) == 1 and alarms[0]["data"]["duplicate_of"] == "node-a"
    assert not [e for e in show_host(fleet, "node-a").events if e["kind"] == "alarm"]

    # Still not counted on the next run, and no second alarm for the same finding.
    by = {v.host: v for v in validate(fleet).verdicts}
    assert by["node-a-alias"].state == "validating" and by["node-a"].state == "available"
    assert len([e for e in show_host(fleet, "node-a-alias").events if e["kind"] == "alarm"]) == 1

    # The alias is retired: the first name stays available.
    operations.retire(fleet, "node-a-alias", "duplicate of node-a")
    assert {v.host: v.state for v in validate(fleet).verdicts}["node-a"] == "available"
