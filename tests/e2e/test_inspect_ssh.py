"""``gpufleet inspect run --every`` over real sshd lab hosts (issue 10 item 2): connections stay
open between sweeps (one login per host for several sweeps, seen in sshd's own log), a hanging
host costs only its own timeout and never delays the others' next sweep, and SIGTERM stops
the loop cleanly (a real ``gpufleet`` process, sim lab). The probe's driver-load age read over
sshd holds a link rule inside its grace after a driver reload (no reboot)."""

from __future__ import annotations

import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select
from tests.sshlab_fixtures import SshLabFactory

from gpufleet.inventory import load_inventory
from gpufleet.lab.fleet import create_fleet, write_inventory
from gpufleet.lab.probe import render_probe
from gpufleet.lab.renderers import render_sections
from gpufleet.service.core.fleet import Fleet, utcnow
from gpufleet.service.health.inspect import SweepReport, inspect, inspect_loop
from gpufleet.service.hosts.enroll import enroll
from gpufleet.store.tables import Alarm, Host, HostSampleRow

pytestmark = pytest.mark.sshlab
GPUFLEET = str(Path(sys.executable).with_name("gpufleet"))


def _probe_tools(host_dir: Path, answer: str) -> None:
    """The lab's fake nvidia-smi answers the probe's --query-gpu with the sim lab's CSV."""
    gpu = answer.split("@@probe gpu\n", 1)[1].split("\n@@rc", 1)[0]
    (host_dir / "data" / "probe-gpu.csv").write_text(gpu + "\n")
    tool = host_dir / "bin" / "nvidia-smi"
    tool.write_text(f"#!/bin/sh\ncat '{host_dir}/data/probe-gpu.csv'\n")
    tool.chmod(0o755)


def test_every_keeps_connections_open_and_a_hang_delays_nobody(
    fleet: Fleet, sshlab_factory: SshLabFactory, tmp_path: Path
) -> None:
    lf = create_fleet(3, models=["h100-8x"], faults={})
    lab = sshlab_factory()
    modes = {"gpu-01": "ok", "gpu-02": "ok", "gpu-03": "hang"}
    targets = {
        h.name: lab.add_host(h.name, render_sections(h), mode=modes[h.name], password_auth=True)
        for h in lf.hosts
    }
    for h in lf.hosts:
        _probe_tools(lab._host(h.name).dir, render_probe(h))
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
    fleet.clock = utcnow  # sweeps a few seconds apart, as in production

    stop = threading.Event()
    sweeps: list[tuple[SweepReport, float]] = []
    started = time.monotonic()

    def seen(report: SweepReport | None, error: str | None) -> None:
        assert report is not None, error
        sweeps.append((report, time.monotonic() - started))
        if len(sweeps) == 3:
            stop.set()

    n = inspect_loop(fleet, None, timedelta(seconds=3), stop, timeout_s=2.0, on_sweep=seen)
    assert n == 3
    for report, _ in sweeps:
        by = {h.host: h for h in report.hosts}
        assert by["gpu-01"].outcome == by["gpu-02"].outcome == "ok"
        assert by["gpu-01"].problems == []  # the CSV came back and parsed, through real sshd
        assert by["gpu-03"].outcome == "timeout"
    # One login per healthy host for all three sweeps: the connection stayed open.
    for name in ("gpu-01", "gpu-02"):
        assert lab.sshd_log(name).count("Accepted publickey") == 1, lab.sshd_log(name)
    # The hanging host cost its own 2 s each sweep; sweeps still started every 3 s (measured
    # between the sweeps' own start times: a loop that waited the interval after a sweep
    # held up by the hang would start them 5 s apart; the margin absorbs a loaded machine).
    starts = [r.at.timestamp() for r, _ in sweeps]
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert all(2.0 < g < 4.4 for g in gaps), gaps
    with fleet.db.session() as s:  # no claim left behind
        assert all(h.claim_token is None for h in s.scalars(select(Host)))


def test_sigterm_stops_the_loop_cleanly(tmp_path: Path) -> None:
    d = tmp_path / "lab"
    d.mkdir()
    fl = create_fleet(2, models=["h100-8x"], faults={})
    fl.save(d)
    write_inventory(fl, d / "inventory.ini", transport="sim", lab_dir=d)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")} | {
        "GPUFLEET_HOME": str(tmp_path / "home"),
        "COLUMNS": "160",
    }
    subprocess.run(
        [GPUFLEET, "enroll", "-i", str(d / "inventory.ini")], env=env, check=True, timeout=60
    )
    proc = subprocess.Popen(
        [GPUFLEET, "inspect", "--every", "1s"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        lines: list[str] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            lines.append(line)
            if "gpu-02" in line:  # the first sweep's table is out
                break
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = "".join(lines) + out
    assert proc.returncode in (0, 143), text  # 143: the signal came mid-sweep
    if proc.returncode == 0:
        assert re.search(r"stopped after \d+ sweep", text), text
    after = Fleet.open(home=tmp_path / "home", actor="pytest")
    try:
        with after.db.session() as s:  # no claim left behind either way
            assert [h.claim_token for h in s.scalars(select(Host))] == [None, None]
    finally:
        after.db.dispose()


CAPTURED_IB = Path(__file__).parents[1] / "fixtures/captured/ib/gpud_sys-class-infiniband-h100.0"


def test_a_driver_reload_holds_link_rules_in_their_grace(
    fleet: Fleet, sshlab_factory: SshLabFactory, tmp_path: Path
) -> None:
    """Two real sshd hosts up for days; both lose an IB link (``link_downed`` 0 -> 3) after
    the first sweep. gpu-01's driver was reloaded a minute ago (``/sys/module/nvidia`` is
    new): its ``ib-link-downed`` (grace 900 s) stays quiet; gpu-02's driver is three days old:
    the alarm opens."""
    fleet.settings.guard_share = 1.0
    lf = create_fleet(2, models=["h100-8x"], faults={})
    lab = sshlab_factory()
    targets = {h.name: lab.add_host(h.name, render_sections(h)) for h in lf.hosts}
    sysroots = {h.name: lab._host(h.name).dir / "sysroot" for h in lf.hosts}
    for h in lf.hosts:
        _probe_tools(lab._host(h.name).dir, render_probe(h))
        shutil.copytree(CAPTURED_IB, sysroots[h.name] / "sys/class/infiniband")
        (sysroots[h.name] / "proc").mkdir(exist_ok=True)
        (sysroots[h.name] / "proc/uptime").write_text("864000.00 1700000.00\n")
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
    fleet.clock = utcnow
    first = inspect(fleet)
    assert all(h.outcome == "ok" and not h.findings for h in first.hosts), first.hosts
    now = time.time()
    for name, age in (("gpu-01", 60), ("gpu-02", 3 * 86400)):
        module = sysroots[name] / "sys/module/nvidia"
        module.mkdir(parents=True)
        os.utime(module, (now - age, now - age))
        counters = sysroots[name] / "sys/class/infiniband/mlx5_0/ports/1/counters"
        (counters / "link_downed").write_text("3\n")
    time.sleep(1.1)  # the second sample at a later second
    second = inspect(fleet)
    by = {h.host: h for h in second.hosts}
    assert by["gpu-01"].outcome == by["gpu-02"].outcome == "ok"
    with fleet.db.session() as s:
        latest = {
            name: (up, drv)
            for name, up, drv in s.execute(
                select(Host.name, HostSampleRow.uptime_s, HostSampleRow.driver_age_s)
                .join(Host, Host.id == HostSampleRow.host_id)
                .where(HostSampleRow.at == second.at)
            )
        }
        alarms = {
            (name, a.data["rule"])
            for a, name in s.execute(
                select(Alarm, Host.name)
                .join(Host, Host.id == Alarm.host_id)
                .where(Alarm.closed_at.is_(None))
            )
        }
    assert latest["gpu-01"][0] == latest["gpu-02"][0] == 864000.0  # up for ten days
    drv1, drv2 = latest["gpu-01"][1], latest["gpu-02"][1]
    assert drv1 is not None and 59 <= drv1 <= 120, drv1
    assert drv2 is not None and drv2 >= 3 * 86400, drv2
    assert [f.rule for f in by["gpu-02"].findings] == ["ib-link-downed"]
    assert by["gpu-01"].findings == []  # inside the grace after the driver reload
    assert alarms == {("gpu-02", "ib-link-downed")}
