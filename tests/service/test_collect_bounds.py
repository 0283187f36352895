"""A value that parses but does not fit spoils only its own host (issue 6, B.8).

An absurd memory size, a 200-character kernel release, 100k GPUs: each makes THAT host
``bad output`` with a reason naming host, section and field; every other host is collected
and stored, the run finishes, and the CLI exits 1. The bounds live on the fact models, so the
refusal is the same on SQLite (which would store anything) and PostgreSQL (which would raise
on an over-long column and abort the run) - the end-to-end test runs on both, over real sshd.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from tests.sshlab_fixtures import SshLabFactory

from gpufleet.collect.assemble import assemble_facts
from gpufleet.collect.bundle import Section
from gpufleet.collect.transport import Outcome
from gpufleet.errors import ParseError
from gpufleet.inventory import load_inventory
from gpufleet.lab.fleet import create_fleet
from gpufleet.lab.renderers import render_sections
from gpufleet.service.core.fleet import Fleet
from gpufleet.service.hosts.collect import collect
from gpufleet.service.hosts.enroll import enroll
from gpufleet.service.views.hosts import show_host, snapshot_count

NOW = datetime(2026, 1, 1, tzinfo=UTC)
KERNEL_200 = "5.15.0-" + "x" * 193


def _healthy() -> dict[str, Section]:
    return render_sections(create_fleet(1, models=["a100-8x"], faults={}).hosts[0])


def _with(secs: dict[str, Section], name: str, stdout: str) -> dict[str, Section]:
    return {**secs, name: Section(name, stdout, "", 0)}


def _absurd_memory(secs: dict[str, Section]) -> dict[str, Section]:
    return _with(secs, "meminfo", "MemTotal:       99999999999999999999 kB\nMemFree: 1 kB")


def _hundred_thousand_gpus(secs: dict[str, Section]) -> dict[str, Section]:
    # EDITED lab capture: the real report says it has 100000 GPUs attached.
    xml = secs["nvidia-smi-xml"].stdout
    start = xml.index("<attached_gpus>")
    end = xml.index("</attached_gpus>")
    return _with(secs, "nvidia-smi-xml", xml[:start] + "<attached_gpus>100000" + xml[end:])


@pytest.mark.parametrize(
    ("edit", "section", "field"),
    [
        (_absurd_memory, "meminfo", "memory_total_kib"),
        (lambda s: _with(s, "uname-r", KERNEL_200), "uname-r", "kernel"),
        (_hundred_thousand_gpus, "nvidia-smi", "attached_gpus"),
        (lambda s: _with(s, "nproc", "9" * 40), "nproc", "cpu_count"),
        (lambda s: _with(s, "hostname", "h" * 300), "hostname", "hostname"),
    ],
)
def test_a_value_that_does_not_fit_refuses_the_collection_naming_host_and_field(
    edit: object, section: str, field: str
) -> None:
    healthy = _healthy()
    assert assemble_facts(healthy, NOW, "gpu-01").memory_total_kib  # the unedited host fits
    with pytest.raises(ParseError) as info:
        assemble_facts(edit(healthy), NOW, "gpu-01")  # type: ignore[operator]
    message = str(info.value)
    assert message.startswith(f"gpu-01:{section}"), message
    assert field in message


def test_a_long_ib_ca_name_or_lsblk_model_does_not_fit() -> None:
    healthy = _healthy()
    ib = healthy["ibstat"].stdout.replace("mlx5_0", "mlx5_" + "0" * 100, 1)
    with pytest.raises(ParseError, match=r"gpu-01:ibstat.*ca"):
        assemble_facts(_with(healthy, "ibstat", ib), NOW, "gpu-01")
    lsblk = 'NAME="nvme0n1" SIZE="99999999999999999999999" TRAN="nvme" ROTA="0" MODEL="x"'
    with pytest.raises(ParseError, match=r"gpu-01:lsblk.*size_bytes"):
        assemble_facts(_with(healthy, "lsblk", lsblk), NOW, "gpu-01")


BAD = {
    "gpu-02": ("memory_total_kib", _absurd_memory),
    "gpu-03": ("kernel", lambda s: _with(s, "uname-r", KERNEL_200)),
    "gpu-04": ("attached_gpus", _hundred_thousand_gpus),
}


@pytest.mark.sshlab
def test_one_bad_value_spoils_only_its_host(
    fleet: Fleet, sshlab_factory: SshLabFactory, tmp_path: Path
) -> None:
    lab_fleet = create_fleet(5, models=["a100-8x"], faults={})
    lab = sshlab_factory()
    targets = {}
    for h in lab_fleet.hosts:
        secs = render_sections(h)
        if h.name in BAD:
            secs = BAD[h.name][1](secs)
        targets[h.name] = lab.add_host(h.name, secs)
    lab.start()
    inv = tmp_path / "hosts.ini"
    lines = ["[gpu_lab]"]
    for name, t in targets.items():
        lines.append(f"{name} ansible_host={t.address} ansible_port={t.port} ansible_user={t.user}")
    lines += ["", "[gpu_lab:vars]", f"ansible_ssh_private_key_file={lab.client_key}"]
    inv.write_text("\n".join(lines) + "\n")
    enroll(fleet, load_inventory(inv))

    report = collect(fleet, timeout_s=20)
    by = {r.host: r for r in report.results}
    assert set(by) == set(targets)  # the run finished and reported every host
    for name, (field, _) in BAD.items():
        assert by[name].outcome is Outcome.BAD_OUTPUT, (name, by[name])
        assert name in by[name].reason and field in by[name].reason, by[name].reason
        assert snapshot_count(fleet, name) == 0  # nothing of it reached the database
    for name in ("gpu-01", "gpu-05"):
        assert by[name].outcome is Outcome.OK, by[name]
        assert snapshot_count(fleet, name) == 1
        facts = show_host(fleet, name).facts
        assert facts is not None and len(facts.gpus) == 8
    assert report.counts == {"ok": 2, "bad output": 3}
