"""Collection of a fleet of real sshd hosts through the whole service (enroll -> collect -> store).

Acceptance: 20+ real sshd hosts incl. a wrong key, a stopped sshd, one hanging past the command
timeout, one returning truncated XML, one whose host key changed since the last collection; each
is reported with the right reason, all others are collected, and no previous good snapshot is
overwritten.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.sshlab_fixtures import SshLabFactory

from gpufleet.collect.inventory import load_inventory
from gpufleet.collect.transport import Outcome
from gpufleet.lab.fleet import apply_change, create_fleet, render_sections
from gpufleet.service.collect import collect
from gpufleet.service.enroll import enroll
from gpufleet.service.fleet import Fleet
from gpufleet.service.hosts import show_host, snapshot_count

pytestmark = pytest.mark.sshlab

MODES = {"gpu-03": "wrong-key", "gpu-04": "stopped", "gpu-05": "hang"}


def test_ssh_fleet_collection(fleet: Fleet, sshlab_factory: SshLabFactory, tmp_path: Path) -> None:
    lab_fleet = create_fleet(22, models=["a100-8x", "h100-8x"], faults={"gpu-06": ["truncated"]})
    lab = sshlab_factory()
    targets = {}
    for h in lab_fleet.hosts:
        targets[h.name] = lab.add_host(h.name, render_sections(h), mode=MODES.get(h.name, "ok"))
    lab.start()
    inv = tmp_path / "hosts.ini"
    lines = ["[gpu_lab]"]
    for name, t in targets.items():
        lines.append(f"{name} ansible_host={t.address} ansible_port={t.port} ansible_user={t.user}")
    lines += [
        "",
        "[gpu_lab:vars]",
        f"ansible_ssh_private_key_file={lab.client_key}",
        "gpufleet_gpu_count=8",
    ]
    inv.write_text("\n".join(lines) + "\n")
    enroll(fleet, load_inventory(inv))

    first = {r.host: r for r in collect(fleet, timeout_s=6).results}
    assert first["gpu-03"].outcome is Outcome.AUTH_FAILED
    assert "Permission denied" in first["gpu-03"].reason or "publickey" in first["gpu-03"].reason
    assert first["gpu-04"].outcome is Outcome.UNREACHABLE
    assert first["gpu-05"].outcome is Outcome.TIMEOUT
    assert "6 s" in first["gpu-05"].reason
    assert first["gpu-06"].outcome is Outcome.BAD_OUTPUT
    assert "gpu-06" in first["gpu-06"].reason and "line" in first["gpu-06"].reason
    ok = [n for n, r in first.items() if r.outcome is Outcome.OK]
    assert len(ok) == 18
    assert all(first[n].gpus == 8 for n in ok)
    good = show_host(fleet, "gpu-08").facts
    assert good is not None and len(good.gpus) == 8

    # Host key changes on gpu-07; gpu-08 starts answering truncated XML.
    lab.rotate_host_key("gpu-07")
    h8 = apply_change(lab_fleet, "gpu-08", add_faults=["truncated"]).host("gpu-08")
    lab.set_sections("gpu-08", render_sections(h8))
    second = {r.host: r for r in collect(fleet, timeout_s=6).results}
    assert second["gpu-07"].outcome is Outcome.HOST_KEY_CHANGED
    assert "SHA256:" in second["gpu-07"].reason
    assert second["gpu-08"].outcome is Outcome.BAD_OUTPUT
    assert show_host(fleet, "gpu-08").facts == good
    assert snapshot_count(fleet, "gpu-08") == 1
    assert snapshot_count(fleet, "gpu-07") == 1
    assert snapshot_count(fleet, "gpu-09") == 2
    assert any(e["kind"] == "alarm" for e in show_host(fleet, "gpu-07").events)
