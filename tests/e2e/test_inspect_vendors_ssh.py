"""Vendor-neutral inspection over real sshd lab hosts (issue 24 item 3): an Ascend host and an
AMD host, collected and validated over SSH, answer ``inspect``'s probe through their vendor
plugins' sections run by the host's own shell (npu-smi and hccn_tool answering per chip, as
the real tools do, from the lab host's captures): ``ok``, no problem, no finding, samples
stored; an NPU turned to Alarm (the real Alarm capture) is a critical finding and the host
leaves ``available``. Main 84be469 answered both with ``ParseError``/``bad_output``."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

import pytest
from sqlalchemy import select
from tests.sshlab_fixtures import SshLabFactory

from gpufleet.collect.bundle import Section
from gpufleet.inventory import load_inventory
from gpufleet.lab.fleet import LabHost, create_fleet, write_inventory
from gpufleet.lab.renderers import render_sections
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.health.inspect import inspect
from gpufleet.service.hosts.enroll import enroll
from gpufleet.service.hosts.validate import validate
from gpufleet.store.tables import GpuSampleRow, Host, HostSampleRow
from gpufleet.vendors.huawei.plugin import split_chip_answers

pytestmark = pytest.mark.sshlab


def _chip_tools(host_dir: Path, given: Mapping[str, Section]) -> None:
    """npu-smi and hccn_tool answering per chip / per NPU from the lab host's sections (the
    generic fake serves one answer per argument list; the per-chip loops ask each chip)."""
    data = host_dir / "chips"
    data.mkdir(exist_ok=True)
    for a in split_chip_answers(given["npu_smi_health"].stdout, "health"):
        (data / f"health.{a.npu_id}.{a.chip_id}").write_text(a.text.rstrip("\n") + "\n")
    for view in ("board", "usages", "common"):
        for a in split_chip_answers(given[f"npu_smi_{view}"].stdout, view):
            (data / f"{view}.{a.npu_id}").write_text(a.text.rstrip("\n") + "\n")
    for name, kind in (
        ("hccn_link", "-link"),
        ("hccn_net_health", "-net_health"),
        ("hccn_stat", "-stat"),
        ("hccn_link_stat", "-link_stat"),
        ("hccn_optical", "-optical"),
    ):
        for a in split_chip_answers(given[name].stdout, name):
            (data / f"{kind}.{a.logic_id}").write_text(a.text.rstrip("\n") + "\n")
    for name in ("npu_smi_info", "npu_smi_mapping", "npu_smi_topo"):
        (data / name).write_text(given[name].stdout + "\n")
    d, log = str(data), host_dir / "run" / "calls.log"
    (host_dir / "bin" / "npu-smi").write_text(
        "#!/bin/sh\n"
        f'echo "npu-smi $*" >> {log}\n'
        'case "$*" in\n'
        f'  "info") cat {d}/npu_smi_info ;;\n'
        f'  "info -m") cat {d}/npu_smi_mapping ;;\n'
        f'  "info -t topo") cat {d}/npu_smi_topo ;;\n'
        f'  "info -t health -i "*) cat {d}/health.$5.$7 ;;\n'
        f'  "info -t board -i "*|"info -t usages -i "*|"info -t common -i "*) cat {d}/$3.$5 ;;\n'
        '  *) echo "npu-smi: unsupported $*" >&2; exit 2 ;;\n'
        "esac\n"
    )
    (host_dir / "bin" / "hccn_tool").write_text(
        f'#!/bin/sh\necho "hccn_tool $*" >> {log}\ncat {d}/"$3.$2"\n'
    )
    for tool in ("npu-smi", "hccn_tool"):
        (host_dir / "bin" / tool).chmod(0o755)


def test_ascend_and_amd_hosts_over_sshd_are_ok_then_an_alarm_is_found(
    fleet: Fleet, sshlab_factory: SshLabFactory, tmp_path: Path
) -> None:
    fleet.settings.guard_share = 1.0  # not about the blast-radius guard
    fleet.settings.guard_hosts = 100
    lf = create_fleet(2, models=["ascend-910b3-8x", "mi100-4x"], faults={})
    lab = sshlab_factory()
    targets = {h.name: lab.add_host(h.name, render_sections(h)) for h in lf.hosts}
    npu = lf.hosts[0]
    _chip_tools(lab._host(npu.name).dir, render_sections(npu))
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
    assert {v.host: v.state for v in validate(fleet).verdicts} == {
        "gpu-01": "available",
        "gpu-02": "available",
    }

    before = {name: len(lab.calls(name)) for name in targets}
    report = inspect(fleet, timeout_s=60)
    for h in report.hosts:
        assert (h.outcome, h.reason, h.problems, h.findings) == ("ok", "", [], []), h
    with fleet.db.session() as s:
        ids = {h.name: h.id for h in s.scalars(select(Host))}
        rows = {r.host_id: r for r in s.scalars(select(HostSampleRow))}
        counts = {
            hid: len(s.scalars(select(GpuSampleRow).where(GpuSampleRow.host_id == hid)).all())
            for hid in ids.values()
        }
    assert counts == {ids["gpu-01"]: 8, ids["gpu-02"]: 4}
    assert {r.gpus_ok for r in rows.values()} == {True}
    # the probe's tool calls, seen by the hosts themselves: each vendor's tool, per chip for
    # the NPUs, and never nvidia-smi
    npu_calls = lab.calls("gpu-01")[before["gpu-01"] :]
    amd_calls = lab.calls("gpu-02")[before["gpu-02"] :]
    assert "npu-smi info" in npu_calls and "npu-smi info -t health -i 7 -c 0" in npu_calls
    assert "hccn_tool -i 7 -link -g" in npu_calls, npu_calls
    assert [c.split()[0] for c in amd_calls] == ["rocm-smi", "dmesg"], amd_calls
    assert not any(c.startswith("nvidia-smi") for c in npu_calls + amd_calls)

    # NPU 3 in Alarm (the real Alarm capture with its error codes), between two sweeps
    fleet.clock.advance(minutes=5)  # type: ignore[attr-defined]
    sick = LabHost(
        name=npu.name, model=npu.model, serial_salt=npu.serial_salt, faults=["npu-alarm:3"]
    )
    lab.set_sections(npu.name, render_sections(sick))
    _chip_tools(lab._host(npu.name).dir, render_sections(sick))
    report = inspect(fleet, timeout_s=60)
    by = {h.host: h for h in report.hosts}
    assert [
        (f.rule, f.severity.value, f.action.value, f.gpu_index) for f in by["gpu-01"].findings
    ] == [("accelerator-unhealthy", "critical", "reset_gpu", 3)]
    assert "A4025021 8C03A000 8C084E00" in by["gpu-01"].findings[0].message
    assert by["gpu-02"].findings == []
    with fleet.db.session() as s:
        st = {h.name: h.state.value for h in s.scalars(select(Host))}
    assert st == {"gpu-01": "quarantined", "gpu-02": "available"}
