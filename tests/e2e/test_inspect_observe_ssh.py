"""No data is a fault, on real sshd lab hosts (issue 24 items 1 and 4): ``nvidia-smi`` removed
from a host mid-life, and a host whose nvidia-smi answers the EDITED real capture of a GPU
handle error (rc 15), each leave ``available`` after two sweeps with one alarm and their
fault; the healthy host stays available; every sample carries the host's boot_id read over
sshd. Fails on main 84be469: both hosts stay ``available``, outcome ``ok``, no alarm."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from sqlalchemy import select
from tests.e2e.test_inspect_ssh import _probe_tools
from tests.sshlab_fixtures import SshLabFactory

from gpufleet.domain.events import AlarmKind
from gpufleet.inventory import load_inventory
from gpufleet.lab.fleet import create_fleet, write_inventory
from gpufleet.lab.probe import render_probe
from gpufleet.lab.renderers import render_sections
from gpufleet.service.core.fleet import Fleet, utcnow
from gpufleet.service.health.inspect import inspect
from gpufleet.service.hosts.enroll import enroll
from gpufleet.service.hosts.validate import validate
from gpufleet.store.tables import Alarm, Host, HostSampleRow

pytestmark = pytest.mark.sshlab
EDITED = (
    Path(__file__).parents[1] / "fixtures/inspect/nvidia-smi-query-gpu-h100-handle-error.EDITED.csv"
)
BOOT = "6c1a4e0f-3b5d-4c2a-9e41-0d7f2b9a8c11"


def test_nvidia_smi_removed_or_failing_mid_life_leaves_available(
    fleet: Fleet, sshlab_factory: SshLabFactory, tmp_path: Path
) -> None:
    fleet.settings.guard_share = 1.0
    fleet.settings.guard_hosts = 100
    lf = create_fleet(3, models=["h100-8x"], faults={})
    lab = sshlab_factory()
    targets = {h.name: lab.add_host(h.name, render_sections(h)) for h in lf.hosts}
    dirs = {h.name: lab._host(h.name).dir for h in lf.hosts}
    for h in lf.hosts:
        boot_id = dirs[h.name] / "sysroot/proc/sys/kernel/random/boot_id"
        boot_id.parent.mkdir(parents=True, exist_ok=True)
        boot_id.write_text(BOOT + "\n")
    lab.start()
    inv = write_inventory(lf, tmp_path / "hosts.ini", transport="ssh")
    text = inv.read_text()
    for name, t in targets.items():
        text = re.sub(
            rf"^{name} ",
            f"{name} ansible_host={t.address} ansible_port={t.port} ansible_user={t.user} "
            f"ansible_ssh_private_key_file={lab.client_key} ",
            text,
            flags=re.M,
        )
    inv.write_text(text)
    enroll(fleet, load_inventory(inv))
    with fleet.db.session() as s:
        for h in s.scalars(select(Host)):
            h.expected = {**h.expected, "gpu_count": 8}
    fleet.clock = utcnow
    # collected and validated over sshd first (the lab's nvidia-smi answers the collection)
    assert {v.state for v in validate(fleet).verdicts} == {"available"}
    for h in lf.hosts:  # then it answers the probe's --query-gpu with the real capture
        _probe_tools(dirs[h.name], render_probe(h))
    first = inspect(fleet)
    assert [h.outcome for h in first.hosts] == ["ok"] * 3, first.hosts

    # Mid-life: gpu-01 loses its nvidia-smi; gpu-02's cannot reach one GPU (rc 15).
    (dirs["gpu-01"] / "bin/nvidia-smi").unlink()
    tool = dirs["gpu-02"] / "bin/nvidia-smi"
    tool.write_text(f"#!/bin/sh\ncat '{EDITED}'\nexit 15\n")
    reports = []
    for _ in range(2):
        time.sleep(1.1)  # samples a second apart
        reports.append({h.host: h for h in inspect(fleet).hosts})
    for by in reports:
        assert by["gpu-01"].outcome == by["gpu-02"].outcome == "probe_failed"
        assert by["gpu-03"].outcome == "ok"
    assert "not found" in reports[0]["gpu-01"].reason
    assert "Unable to determine the device handle" in reports[0]["gpu-02"].reason
    with fleet.db.session() as s:
        hosts = {h.name: h for h in s.scalars(select(Host))}
        got = {
            (name, a.data["rule"], a.severity.value, a.data["action"])
            for a, name in s.execute(
                select(Alarm, Host.name)
                .join(Host, Host.id == Alarm.host_id)
                .where(Alarm.kind == AlarmKind.HEALTH, Alarm.closed_at.is_(None))
            )
        }
        boots = set(s.scalars(select(HostSampleRow.boot_id)))
        assert (hosts["gpu-01"].state.value, hosts["gpu-01"].fault) == (
            "quarantined",
            "telemetry_lost",
        )
        assert (hosts["gpu-02"].state.value, hosts["gpu-02"].fault) == ("quarantined", "gpu_lost")
        assert hosts["gpu-03"].state.value == "available"
    assert got == {
        ("gpu-01", "gpu-tool-missing", "critical", "escalate"),
        ("gpu-02", "gpu-handle-error", "critical", "reboot"),
    }
    assert boots == {BOOT}  # read over sshd from /proc/sys/kernel/random/boot_id
