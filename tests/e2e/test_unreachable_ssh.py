"""Unreachable is a state the platform acts on (issue 24, item 2), on real sshd hosts and
both databases: a host whose sshd is stopped is counted over collections *and* inspection
sweeps; at the second failed contact it gets fault ``unreachable``, leaves ``available``,
opens one alarm, and neither ``allocate`` nor ``capacity`` counts it; once sshd is back the
next collection closes the alarm and the host returns only through ``validate``.

Fails on 84be469: the stopped host stays ``available`` with no alarm and is leased."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from tests.sshlab import SshLab
from tests.sshlab_fixtures import SshLabFactory

from gpufleet.collect.transport import Outcome
from gpufleet.domain.placement import Request
from gpufleet.inventory import load_inventory
from gpufleet.lab.fleet import create_fleet
from gpufleet.lab.renderers import render_sections
from gpufleet.service.allocation import allocation, capacity
from gpufleet.service.core.alarms import list_alarms
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.health.inspect import inspect
from gpufleet.service.hosts.collect import collect
from gpufleet.service.hosts.enroll import enroll
from gpufleet.service.hosts.validate import validate
from gpufleet.service.views.hosts import show_host

pytestmark = pytest.mark.sshlab


def _two_hosts(fleet: Fleet, factory: SshLabFactory, tmp_path: Path) -> tuple[SshLab, str, str]:
    lab = factory()
    lines = []
    names = []
    for lh in create_fleet(2, models=["a100-8x"], faults={}).hosts:
        t = lab.add_host(lh.name, render_sections(lh))
        names.append(lh.name)
        lines.append(f"{lh.name} ansible_host={t.address} ansible_port={t.port} "
                     f"ansible_user={t.user} gpufleet_pool=train")
    lab.start()
    (tmp_path / "hosts.ini").write_text(
        "[gpu]\n" + "\n".join(lines) + "\n\n[gpu:vars]\n"
        f"ansible_ssh_private_key_file={lab.client_key}\ngpufleet_gpu_count=8\n"
    )
    enroll(fleet, load_inventory(tmp_path / "hosts.ini"))
    assert [v.state for v in validate(fleet).verdicts] == ["available", "available"]
    return lab, names[0], names[1]


def _open(fleet: Fleet, host: str) -> list[str]:
    return [a.message for a in list_alarms(fleet, host) if a.kind == "host-unreachable"
            and a.closed_at is None]


def test_a_stopped_host_is_acted_on_excluded_and_comes_back_through_validation(
    fleet: Fleet, sshlab_factory: SshLabFactory, tmp_path: Path
) -> None:
    lab, down, up = _two_hosts(fleet, sshlab_factory, tmp_path)
    lab.stop_host(down)

    # first failed contact (a collection): counted, nothing acted on yet
    (r,) = [r for r in collect(fleet, timeout_s=15).results if r.host == down]
    assert r.outcome is Outcome.UNREACHABLE, r.reason
    assert show_host(fleet, down).view.state == "available" and not _open(fleet, down)

    # second failed contact (an inspection sweep): fault, out of available, one alarm
    sweep = inspect(fleet, down, timeout_s=15)
    (hi,) = sweep.hosts
    assert hi.outcome == "unreachable"
    assert any("fault unreachable" in a for a in hi.actions), hi.actions
    v = show_host(fleet, down).view
    assert (v.state, v.fault, v.health) == ("validating", "unreachable", "critical")
    (msg,) = _open(fleet, down)
    assert "2 failed contacts" in msg and "connect" in msg.lower()

    # excluded from placement and capacity at once; the healthy host is still offered
    two = allocation.allocate(fleet, Request(hosts=2), owner="a", purpose="p",
                              duration=timedelta(hours=1))
    assert two.lease is None
    assert capacity.capacity(fleet).totals.get("free") == 8
    one = allocation.allocate(fleet, Request(hosts=1), owner="a", purpose="p",
                              duration=timedelta(hours=1))
    assert one.lease is not None and one.lease.hosts == [up]

    # more failures: still one alarm
    collect(fleet, down, timeout_s=15)
    assert len(_open(fleet, down)) == 1
    every = list_alarms(fleet, down, include_closed=True)
    assert len([a for a in every if a.kind == "host-unreachable"]) == 1

    # sshd back: the next collection reaches it, closes the alarm, clears the fault; the host
    # stays out of the pool until validate passes it
    lab.start_host(down)
    (back,) = collect(fleet, down, timeout_s=30).results
    assert back.outcome is Outcome.OK, back.reason
    assert any("reachable again" in a for a in back.actions), back.actions
    v = show_host(fleet, down).view
    assert (v.state, v.fault) == ("validating", None)
    assert not _open(fleet, down)
    assert [x.state for x in validate(fleet, down).verdicts] == ["available"]
