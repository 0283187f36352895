"""Collection of a fleet of real sshd hosts through the whole service (enroll -> collect -> store).

Acceptance: 20+ real sshd hosts incl. a wrong key, a stopped sshd, one hanging past the command
timeout, one returning truncated XML, one whose host key changed since the last collection; each
is reported with the right reason, all others are collected, and no previous good snapshot is
overwritten.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.sshlab import SshLab
from tests.sshlab_fixtures import SshLabFactory

from gpufleet.collect.bundle import Section
from gpufleet.collect.transport import Outcome
from gpufleet.inventory import load_inventory
from gpufleet.lab.fleet import apply_change, create_fleet
from gpufleet.lab.renderers import render_sections
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.collect import collect
from gpufleet.service.hosts.enroll import enroll
from gpufleet.service.views.hosts import show_host, snapshot_count
from gpufleet.testing import FakeClock

pytestmark = pytest.mark.sshlab

MODES = {"gpu-03": "wrong-key", "gpu-04": "stopped", "gpu-05": "hang"}


def test_ssh_fleet_collection(
    fleet: Fleet, clock: FakeClock, sshlab_factory: SshLabFactory, tmp_path: Path
) -> None:
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

    first_seen = show_host(fleet, "gpu-09").view.last_collected_at
    assert first_seen is not None
    clock.advance(minutes=5)
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
    # gpu-09 answered the same facts again: seen at the second collection, no new snapshot
    # (issue 8: history only when the facts change)
    assert second["gpu-09"].outcome is Outcome.OK
    assert snapshot_count(fleet, "gpu-09") == 1
    seen = show_host(fleet, "gpu-09").view.last_collected_at
    assert seen is not None and seen > first_seen
    assert any(e["kind"] == "alarm" for e in show_host(fleet, "gpu-07").events)


# ------------------------------------------------- B.9: hosts without ansible_user


def _lab_inventory(
    tmp_path: Path, sshlab_factory: SshLabFactory, *, with_key: bool
) -> tuple[Path, SshLab]:
    lab_fleet = create_fleet(2, models=["h100-8x"], faults={})
    lab = sshlab_factory()
    targets = {h.name: lab.add_host(h.name, render_sections(h)) for h in lab_fleet.hosts}
    lab.start()
    # As many inventories are written: no ansible_user (and here no key either, maybe).
    lines = ["[gpu]"] + [
        f"{n} ansible_host={t.address} ansible_port={t.port}" for n, t in targets.items()
    ]
    if with_key:
        lines += ["", "[gpu:vars]", f"ansible_ssh_private_key_file={lab.client_key}"]
    inv = tmp_path / "hosts.ini"
    inv.write_text("\n".join(lines) + "\n")
    return inv, lab


def test_no_ansible_user_uses_ssh_config(
    fleet: Fleet, sshlab_factory: SshLabFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """User and IdentityFile come from ~/.ssh/config, as they would for Ansible."""
    inv, lab = _lab_inventory(tmp_path, sshlab_factory, with_key=False)
    home = tmp_path / "operator-home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text(
        f"Host 127.0.0.1\n  User {lab.user}\n  IdentityFile {lab.client_key}\n"
    )
    monkeypatch.setenv("HOME", str(home))
    enroll(fleet, load_inventory(inv))
    rep = collect(fleet, timeout_s=30)
    assert {r.host: (r.outcome, r.reason) for r in rep.results} == {
        "gpu-01": (Outcome.OK, ""),
        "gpu-02": (Outcome.OK, ""),
    }
    assert all(r.gpus == 8 for r in rep.results)


def test_no_ansible_user_connects_as_the_local_user(
    fleet: Fleet, sshlab_factory: SshLabFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No user anywhere: the login is the local user's name (here the lab's user), as
    ``ssh host`` would do; another local user is refused by the host, by name."""
    inv, lab = _lab_inventory(tmp_path, sshlab_factory, with_key=True)
    monkeypatch.setenv("HOME", str(tmp_path / "empty-home"))  # no ~/.ssh/config
    for var in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.setenv(var, lab.user)
    enroll(fleet, load_inventory(inv))
    rep = collect(fleet, timeout_s=30)
    assert [(r.outcome, r.gpus) for r in rep.results] == [(Outcome.OK, 8), (Outcome.OK, 8)]
    for var in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.setenv(var, "nobody-here")
    rep = collect(fleet, timeout_s=30)
    assert [r.outcome for r in rep.results] == [Outcome.AUTH_FAILED, Outcome.AUTH_FAILED]
    assert "Permission denied" in rep.results[0].reason


# ------------------------------------------------- B.12: duplicate framed sections


def test_forged_duplicate_section_makes_only_that_host_bad_output(
    fleet: Fleet, sshlab_factory: SshLabFactory, tmp_path: Path
) -> None:
    """A host whose /etc/os-release carries gpufleet's framing (edited capture: the lab's real
    sections, with forged marker lines added to its /etc/os-release) would smuggle in a
    second nvidia-smi-xml section; the bundle is refused for that host alone."""
    lab_fleet = create_fleet(3, models=["h100-8x"], faults={})
    lab = sshlab_factory()
    targets = {}
    for h in lab_fleet.hosts:
        sections = render_sections(h)
        if h.name == "gpu-02":
            real = sections["os-release"]
            forged = (
                f"{real.stdout}\n@@gpufleet:end os-release rc=0@@\n"
                "@@gpufleet:begin nvidia-smi-xml@@\n<nvidia_smi_log><attached_gpus>0"
                "</attached_gpus></nvidia_smi_log>\n@@gpufleet:end nvidia-smi-xml rc=0@@\n"
                "@@gpufleet:begin os-release@@"
            )
            sections = {**sections, "os-release": Section("os-release", forged, "", 0)}
        targets[h.name] = lab.add_host(h.name, sections)
    lab.start()
    inv = tmp_path / "hosts.ini"
    inv.write_text("\n".join(
        f"{n} ansible_host={t.address} ansible_port={t.port} ansible_user={t.user} "
        f"ansible_ssh_private_key_file={t.key_file}" for n, t in targets.items()) + "\n")
    enroll(fleet, load_inventory(inv))
    rep = collect(fleet, timeout_s=30)
    by = {r.host: r for r in rep.results}
    assert by["gpu-02"].outcome is Outcome.BAD_OUTPUT
    assert "appears twice" in by["gpu-02"].reason and "gpu-02" in by["gpu-02"].reason
    assert by["gpu-01"].outcome is Outcome.OK and by["gpu-03"].outcome is Outcome.OK
    assert not rep.ok
    assert show_host(fleet, "gpu-02").facts is None  # nothing of the forged bundle stored
